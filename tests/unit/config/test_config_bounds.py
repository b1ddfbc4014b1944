"""Bad numbers are named errors, not tracebacks, overflows or silent nonsense (issue 23, "Bad input").

Each reproducer of the issue is refused by ``cosim.validate`` at its config path; the ones only a
drawn workload shows (arrival times past int64 nanoseconds, requests that can never fit) are
refused by ``cosim.run`` too, before anything runs, with the same error.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import cosim
from cosim.hub.config.scheduler import SchedulerConfig
from cosim.hub.config.sections import RouterConfig
from cosim.hub.config.workload import PoissonArrival, UniformArrival
from cosim.hub.errors import HubError, ScenarioError
from cosim.hub.sim.admission import ClientLimits, request_problem
from cosim.hub.sim.kernel import DONE, Kernel
from cosim.hub.sim.routing import routes
from cosim.hub.sim.workload.sampling import clip_lengths, sample_arrivals_ns
from tests.paths import EXAMPLES

QUICKSTART = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())


def scenario(**changes: Any) -> dict[str, Any]:
    """The quickstart with 5 requests, no run folder, and ``changes`` set (``a__b__0__c=value``)."""
    config = yaml.safe_load(yaml.safe_dump(QUICKSTART))
    config["workload"]["requests"] = 5
    config["output"] = {"dir": None, "plots": False}
    for path, value in changes.items():
        node = config
        *parents, last = path.split("__")
        for key in parents:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        node[last] = value
    return config


def only_error(config: dict[str, Any]) -> ScenarioError:
    errors = cosim.validate(config)
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize(("changes", "where", "says"), [
    ({"models__llama3-8b__overrides": {"num_layers": -1}}, "models.llama3-8b.overrides", "num_layers"),
    ({"models__llama3-8b__overrides": {"num_layers": 1e10}}, "models.llama3-8b.overrides", "<= 4294967295"),
    ({"models__llama3-8b__overrides": {"bytes_per_kv_element": 1e300}}, "models.llama3-8b.overrides",
     "bytes_per_kv_element"),
    ({"hardware__a100__overrides": {"mem_capacity_bytes": -1}}, "hardware.a100.overrides.mem_capacity_bytes",
     "whole number"),
    ({"hardware__a100__overrides": {"mem_capacity_bytes": 1e300}}, "hardware.a100.overrides.mem_capacity_bytes",
     "whole number"),
    ({"hardware__a100__overrides": {"peak_tflops": 0}}, "hardware.a100.overrides.peak_tflops", "must be in"),
    ({"hardware__a100__overrides": {"peak_tflops": float("nan")}}, "hardware.a100.overrides.peak_tflops", "finite"),
    # found by fuzzing (a presets file's figures, which overrides set too): the roofline overflowed on these
    ({"hardware__a100__overrides": {"intra_node_bus_efficiency": 1e-300}},
     "hardware.a100.overrides.intra_node_bus_efficiency", "must be in [0.001, 1]"),
    ({"hardware__a100__overrides": {"intra_node_latency_us": 1e18}},
     "hardware.a100.overrides.intra_node_latency_us", "must be in [0, 1e+06] µs"),
    ({"hardware__a100__overrides": {"intra_node_hop_latency_us": -1}},
     "hardware.a100.overrides.intra_node_hop_latency_us", "must be in [0, 1e+06] µs"),
    ({"seed": -1}, "seed", "greater than or equal to 0, got -1"),
    ({"seed": 2**63}, "seed", "less than or equal to 9223372036854775807"),
    ({"workload__arrival": {"process": "constant", "at_s": 1e10}}, "workload.arrival.at_s",
     "less than or equal to 1000000000"),
    ({"clients__0__hardware__tensor_parallel": 1e12}, "clients[0].hardware.tensor_parallel",
     "less than or equal to 100000"),
    ({"workload__arrival": {"process": "gamma", "rate_per_s": 5, "cv": 1e-300}}, "workload.arrival.cv",
     "greater than or equal to 0.001, got 1e-300"),
    ({"workload__requests": 1e20}, "workload.requests", "integer"),
    ({"workload__requests": 10**9}, "workload.requests", "less than or equal to 100000000"),
    ({"workload__arrival": {"process": "poisson", "rate_per_s": float("inf")}}, "workload.arrival.rate_per_s",
     "finite"),
    ({"workload__input_tokens": {"dist": "lognormal", "mean": 1e300, "sigma": 0.5}}, "workload.input_tokens.mean",
     "less than or equal to 1000000000"),
    ({"workload__input_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 1e3}}, "workload.input_tokens.sigma",
     "less than or equal to 10"),
    ({"workload__models": {"llama3-8b": 1e300}}, "workload", "weight > 0"),
    ({"clients__0__scheduler__max_num_batched_tokens": 2**70}, "clients[0].scheduler.max_num_batched_tokens",
     "less than or equal to 1000000000"),
    ({"network": {"link": {"bandwidth_gbps": 1e-300}}}, "network.link.bandwidth_gbps",
     "greater than or equal to 0.001"),
    ({"slo": {"ttft_s": {"p90": float("inf")}}}, "slo.ttft_s.p90", "finite"),
    # found by fuzzing: the roofline could not serialize the option (a protobuf Struct) and said so at clients[0]
    ({"backends__analytical__options": {"kernels": float("-inf")}}, "backends.analytical.options.kernels",
     "finite number, got -inf"),
    ({"backends__analytical__options": {"profile": [{"a": float("nan")}]}}, "backends.analytical.options.profile[0].a",
     "finite number, got nan"),
])
def test_out_of_range_number_is_refused_at_its_path(changes: dict[str, Any], where: str, says: str) -> None:
    error = only_error(scenario(**changes))
    assert error.where == where, error
    assert says in error.message, error


@pytest.mark.parametrize(("arrival", "where"), [
    ({"process": "poisson", "rate_per_s": 1e-300}, "workload.arrival.rate_per_s"),
    ({"process": "gamma", "rate_per_s": 1e-12, "cv": 2}, "workload.arrival.rate_per_s"),
    ({"process": "uniform", "rate_per_s": 1e-9}, "workload.arrival.rate_per_s"),
])
def test_arrivals_past_int64_nanoseconds_are_refused_not_wrapped(arrival: dict[str, Any], where: str) -> None:
    config = scenario(workload__arrival=arrival)
    error = only_error(config)
    assert error.where == where and "past the 1e+09 s cosim simulates" in error.message, error
    with pytest.raises(ScenarioError) as info:  # not HubError("event scheduled at -9223372036854775808 ns")
        cosim.run(config)
    assert info.value.where == where


def test_sampled_lengths_that_overflow_are_errors_not_one_token_prompts() -> None:
    with pytest.raises(ScenarioError, match="not finite"):
        clip_lengths(np.array([1e3, np.inf]), 1, None, where="workload.input_tokens")
    with pytest.raises(ScenarioError, match="set max") as info:
        clip_lengths(np.array([1e300]), 1, None, where="workload.input_tokens")
    assert info.value.where == "workload.input_tokens"
    # With a max the user asked for clipping, and gets it (in float: int64 cannot hold the sample).
    assert clip_lengths(np.array([1e300, -5.0, 7.4]), 1, 4096).tolist() == [4096, 1, 7]


def test_normal_lengths_beyond_the_token_bound_name_the_distribution() -> None:
    error = only_error(scenario(workload__input_tokens={"dist": "normal", "mean": 1e9, "std": 1e9}))
    assert error.where == "workload.input_tokens" and "set max" in error.message, error


def test_arrival_sampling_names_the_rate() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ScenarioError) as info:
        sample_arrivals_ns(PoissonArrival(process="poisson", rate_per_s=1e-9), 20, rng)
    assert info.value.where == "workload.arrival.rate_per_s"
    times = sample_arrivals_ns(UniformArrival(process="uniform", rate_per_s=1e-6), 100, rng)
    assert times.dtype == np.int64 and times[-1] == 99 * 10**15


def test_kernel_refuses_events_past_int64_nanoseconds() -> None:
    kernel = Kernel()
    with pytest.raises(ScenarioError, match="int64"):
        kernel.call_at(2**63, DONE, lambda: None, label="step done c0")
    with pytest.raises(HubError):
        kernel.call_at(-1, DONE, lambda: None)


def test_trace_speedup_that_overflows_names_it(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n100,10,5\n")
    config = scenario(workload={"trace": {"path": str(trace), "format": "csv"},
                                "arrival": {"process": "trace", "speedup": 1e-6},
                                "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}})
    config["workload"]["arrival"]["speedup"] = 1e-6  # 100 s of trace -> 1e8 s: fine
    assert cosim.validate(config) == []
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n1e4,10,5\n")  # -> 1e10 s
    assert only_error(config).where == "workload.arrival.speedup"


# -- requests that can never fit ----------------------------------------------------------------


def test_output_that_does_not_fit_the_kv_cache_blames_the_output() -> None:
    # 11 blocks, one of them vLLM's null block: 10 x 16 = 160 tokens for a request
    config = scenario(clients__0__scheduler__num_gpu_blocks=11,
                      workload__input_tokens={"dist": "fixed", "value": 100},
                      workload__output_tokens={"dist": "fixed", "value": 100})
    error = only_error(config)
    assert error.where == "workload.output_tokens", error
    assert "request 0" in error.message and "the prompt fits, the output does not" in error.message
    assert "160 tokens" in error.message and "(4 more requests cannot either)" in error.message
    with pytest.raises(ScenarioError) as info:
        cosim.run(config)
    assert str(info.value) == str(error)
    # 100 + 61 - 1 = 160 tokens of KV: fits exactly, and runs
    config["workload"]["output_tokens"]["value"] = 61
    assert cosim.validate(config) == []
    result = cosim.run(config)
    assert result.summary["requests"]["completed"] == 5


def test_prompt_that_does_not_fit_the_kv_cache_blames_the_prompt() -> None:
    error = only_error(scenario(clients__0__scheduler__num_gpu_blocks=11,
                                workload__input_tokens={"dist": "fixed", "value": 161}))
    assert error.where == "workload.input_tokens" and "161" in error.message, error


def test_max_model_len_when_set_refuses_longer_requests() -> None:
    config = scenario(clients__0__scheduler__max_model_len=1000,
                      workload__input_tokens={"dist": "fixed", "value": 900})
    error = only_error(config)
    assert error.where == "workload.output_tokens", error
    assert "prompt 900 + output 128 = 1028 tokens exceed the max_model_len 1000 of client 'c0'" in error.message


def test_prompt_over_budget_with_whole_prompt_batching_is_an_error_as_in_vllm() -> None:
    for batching in ("static", "continuous", "mixed"):
        config = scenario(clients__0__scheduler={"batching": batching, "max_num_batched_tokens": 4096},
                          workload__input_tokens={"dist": "fixed", "value": 5000})
        error = only_error(config)
        assert error.where == "workload.input_tokens", error
        assert "exceeds the max_num_batched_tokens 4096 of client 'c0'" in error.message
        assert f"{batching} batching takes whole prompts" in error.message
        with pytest.raises(ScenarioError, match="max_num_batched_tokens"):
            cosim.run(config)


def test_prompt_over_budget_is_chunked_with_chunked_prefill(tmp_path: Path) -> None:
    config = scenario(clients__0__scheduler={"batching": "chunked", "max_num_batched_tokens": 4096},
                      workload__input_tokens={"dist": "fixed", "value": 5000})
    assert cosim.validate(config) == []
    result = cosim.run(config, output_dir=tmp_path / "run")
    assert result.summary["requests"]["completed"] == 5
    with (tmp_path / "run" / "clients.csv").open() as handle:
        prefill = [int(row["prefill_tokens"]) for row in csv.DictReader(handle)]
    assert max(prefill) == 4096 and sum(prefill) == 5 * 5000


def test_trace_request_that_cannot_fit_names_its_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n0.5,9000,5\n1,10,5\n")
    config = scenario(clients__0__scheduler__max_num_batched_tokens=8192,
                      workload={"trace": {"path": str(trace), "format": "csv"},
                                "arrival": {"process": "trace"},
                                "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}})
    error = only_error(config)
    assert error.where == f"{trace}:3", error
    assert error.message.startswith("request 1 (prompt 9000 tokens, output 5 tokens) can never be served")


def test_disaggregated_routes_check_prefill_and_decode_clients() -> None:
    scheduler = SchedulerConfig(batching="continuous", max_num_batched_tokens=2048, block_size=16)
    prefill = ClientLimits.of("p0", "m", ("prefill",), scheduler, kv_blocks=1000)
    decode = ClientLimits.of("d0", "m", ("decode",), scheduler, kv_blocks=10)
    # the prompt's KV alone fits the decode client; its output does not
    assert request_problem([prefill, decode], "m", 100, 100) == (
        "output", "prompt 100 + output 100 tokens need 199 tokens of KV cache, more than client 'd0' holds "
                  "(10 blocks x 16 = 160 tokens); the prompt fits, the output does not")
    assert request_problem([prefill, decode], "m", 100, 61) is None
    # one output token: the prefill client's alone, the decode client is not needed
    assert request_problem([prefill, decode], "m", 2000, 1) is None
    # a decode client takes the prompt's KV as transferred: its budget does not apply
    assert request_problem([prefill, ClientLimits.of("d1", "m", ("decode",), scheduler, 10**6)], "m", 2048, 5000) \
        is None
    part, why = request_problem([prefill, decode], "m", 3000, 5) or ("", "")
    assert part == "prompt" and "client 'p0'" in why


def test_request_must_fit_every_client_the_router_may_pick() -> None:
    small = ClientLimits.of("small", "m", ("prefill", "decode"), SchedulerConfig(), kv_blocks=10)
    large = ClientLimits.of("large", "m", ("prefill", "decode"), SchedulerConfig(), kv_blocks=10_000)
    part, why = request_problem([large, small], "m", 1000, 100) or ("", "")
    assert part == "prompt" and "client 'small'" in why  # round robin would hold it there forever
    assert request_problem([large], "m", 1000, 100) is None
    assert request_problem([small], "other", 1000, 100) is None  # the config check reports an unserved model
    # heavy_light sends prompts of 500 tokens or more to the heavy group only
    route = routes(RouterConfig(policy="heavy_light", heavy_clients=["large"], heavy_threshold_tokens=500))
    assert request_problem([large, small], "m", 1000, 100, route=route) is None
    assert request_problem([large, small], "m", 100, 100, route=route) is not None  # light: small, 199 > 160
    assert request_problem([large, small], "m", 100, 50, route=route) is None


def test_rag_context_counts_in_the_prompt_of_every_prefill_client() -> None:
    config = yaml.safe_load((EXAMPLES / "multistage" / "mist-article.yaml").read_text())
    config["base_dir"] = str(EXAMPLES / "multistage")
    config["workload"]["requests"] = 4
    prefill = next(i for i, c in enumerate(config["clients"]) if c.get("role") == "prefill")
    config["clients"][prefill]["scheduler"] = {"batching": "continuous", "max_num_batched_tokens": 8192}
    error = only_error(config)
    assert "retrieved tokens" in error.message and "max_num_batched_tokens 8192" in error.message, error


# -- backends of the wrong kind -------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "where", "says"), [
    ({"backends__analytical": {"kind": "memory"}}, "clients[0].backend", "kind 'memory', which serves memory"),
    ({"backends__analytical": {"kind": "network"}}, "clients[0].backend", "needs a runtime backend"),
    ({"network": {"backend": "empirical"}}, "network.backend", "kind 'regression', which serves runtime"),
    ({"network": {"backend": "analytical"}}, "network.backend", "would serve network sessions here and runtime"),
])
def test_backend_of_the_wrong_kind_is_a_config_error(changes: dict[str, Any], where: str, says: str) -> None:
    errors = cosim.validate(scenario(**changes))
    assert [e.where for e in errors] == [where], errors
    assert says in errors[0].message


def test_memory_levels_out_of_range_name_the_level() -> None:
    config = yaml.safe_load((EXAMPLES / "multistage" / "mist-code.yaml").read_text())
    index = next(i for i, c in enumerate(config["clients"]) if c.get("kind") == "kv_retrieval")
    config["clients"][index]["memory"]["levels"][0]["capacity_bytes"] = -1
    config["base_dir"] = str(EXAMPLES / "multistage")
    errors = cosim.validate(config)
    assert [e.where for e in errors] == [f"clients[{index}].memory.levels[0].capacity_bytes"], errors


def test_cosim_validate_command_reports_what_the_run_would_refuse(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from cosim.hub.cli import main

    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(clients__0__scheduler={"max_num_batched_tokens": 4096},
                                            workload__input_tokens={"dist": "fixed", "value": 5000})))
    assert main(["validate", str(path)]) == 2
    assert "error: workload.input_tokens: request 0 (prompt 5000 tokens" in capsys.readouterr().err
    path.write_text(yaml.safe_dump(scenario(backends__analytical__options={"mfu_prefill": 1e-300})))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "error: clients[0]: backend 'analytical'" in err and "Traceback" not in err, err
    path.write_text(yaml.safe_dump(scenario()))
    assert main(["validate", str(path)]) == 0


def test_a_config_is_copied_as_a_yaml_round_trip_copies_it() -> None:
    """parse_config copies its input without YAML; the copy must be the round trip's, key order
    included (sorted), for every shipped example and values the examples lack."""
    from cosim.hub.config.loading import _yaml_copy

    configs = [yaml.safe_load(path.read_text()) for path in sorted(EXAMPLES.rglob("*.yaml"))]
    configs.append({"b": (1, [2.5, float("inf")]), "a": {"z": None, 3: "x"}, 1: True})
    for config in configs:
        if isinstance(config, dict):
            assert yaml.safe_dump(_yaml_copy(config), sort_keys=False) == \
                yaml.safe_dump(yaml.safe_load(yaml.safe_dump(config)), sort_keys=False)
