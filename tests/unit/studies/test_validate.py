"""``cosim validate`` and validation up front: every problem at once, located by its path, no backend."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml

import cosim
from cosim.hub.cli import main
from cosim.hub.config.loading import ScenarioProblems, load_config, parse_config
from cosim.hub.config.slo import slo_problems, validate_slo
from cosim.hub.errors import ScenarioError
from cosim.hub.studies.validation import resolve_scenario, validate_scenario
from tests.paths import EXAMPLES

QUICKSTART = EXAMPLES / "quickstart.yaml"


def quickstart(**changes: Any) -> dict[str, Any]:
    """The quickstart config (5 requests) with top-level keys replaced."""
    config = yaml.safe_load(QUICKSTART.read_text())
    config["workload"]["requests"] = 5
    config["output"] = {"dir": None, "plots": False}
    return {**config, **changes}


def validate_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any],
                 *extra: str) -> tuple[int, str, str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(config))
    code = main(["validate", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def three_problems() -> dict[str, Any]:
    """An unknown model preset, an unknown device preset and a TP that does not fit, on two clients."""
    config = quickstart()
    config["models"]["other"] = {"preset": "llama-9"}
    config["hardware"]["tpu"] = {"preset": "TPU-v9"}
    good, = config["clients"]
    config["clients"] = [{**good, "hardware": {"device": "a100", "count": 1, "tensor_parallel": 2}},
                         {**good, "name": "c1", "model": "other", "hardware": {"device": "tpu"}}]
    return config


def test_unknown_model_unknown_device_and_tp_are_reported_together(tmp_path, capsys) -> None:
    code, out, err = validate_cli(tmp_path, capsys, three_problems())
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert [line.split(":")[1].strip() for line in lines] == [
        "models.other.preset", "hardware.tpu.preset", "clients[0].hardware.count"], err
    assert all(line.startswith("error: ") for line in lines)
    assert "unknown model 'llama-9'" in lines[0] and "unknown device 'TPU-v9'" in lines[1]
    assert lines[2] == "error: clients[0].hardware.count: 1 devices, fewer than tensor_parallel x " \
                       "pipeline_parallel = 2 x 1 = 2"


def test_parallelism_is_checked_against_the_model_shape() -> None:
    """Llama-3-8B: 32 attention heads, 8 KV heads, 32 layers, dense."""
    config = quickstart()
    config["clients"][0]["hardware"] = {"device": "a100", "count": 15, "tensor_parallel": 3,
                                        "pipeline_parallel": 5, "expert_parallel": 2}
    errors = cosim.validate(config)
    assert [str(e) for e in errors] == [
        "clients[0].hardware.tensor_parallel: 3 does not divide the 32 attention heads of meta-llama/Meta-Llama-3-8B",
        "clients[0].hardware.pipeline_parallel: 5 does not divide the 32 layers of meta-llama/Meta-Llama-3-8B",
        "clients[0].hardware.expert_parallel: 2 needs a mixture-of-experts model; meta-llama/Meta-Llama-3-8B is dense",
    ]


def test_good_config_prints_the_kv_capacity_a_run_uses(tmp_path, capsys) -> None:
    code, out, err = validate_cli(tmp_path, capsys, quickstart())
    # A100-80GB x 0.9 less what vLLM's profiling charges (cosim.hub.config.memory): Llama-3-8B's fp16 weights and
    # rotary cache (8192 positions x 128), the forward pass's peak at 8192 tokens (attention output, residual,
    # gate_up and its activated half, above the sampler's 256 rows), CUDA graphs (260 MiB + 6 MiB for each of
    # 50 more PIECEWISE and 34 more FULL sizes) and 0.25 GiB non-torch; over K and V of 32 layers x 8 heads x
    # 128 x 2 bytes x 16 tokens.
    weights = 8_030_261_248 * 2 + 8192 * 128 * 2
    activation = 8192 * (4096 + 4096 + 3 * 14336) * 2
    graphs = (260 + 6 * (50 + 34)) * 2**20
    kv = int(80 * 2**30 * 0.9 - weights - activation - graphs - 2**30 // 4)
    blocks = kv // (2 * 32 * 8 * 128 * 2 * 16)
    assert blocks == 28_294
    assert (code, err) == (0, "")
    assert f"KV cache {blocks:,} blocks x 16 = {blocks * 16:,} tokens" in out, out
    assert "c0 (mixed): meta-llama/Meta-Llama-3-8B fp16 on A100-80GB x 1, TP 1 PP 1 EP 1" in out
    result = cosim.run(quickstart(workload={**quickstart()["workload"], "requests": 2}))
    assert result.summary["clients"]["c0"]["kv_capacity_blocks"] == blocks


def test_every_pydantic_problem_is_one_line(tmp_path, capsys) -> None:
    code, _, err = validate_cli(tmp_path, capsys, quickstart(), "--set", "clients[0].scheduler.max_num_seqs=0",
                                "--set", "clients[0].scheduler.chunk_size=-5")
    assert code == 2
    assert err.splitlines() == [
        "error: clients[0].scheduler.max_num_seqs: input should be greater than 0, got 0",
        "error: clients[0].scheduler.chunk_size: input should be greater than 0, got -5"]


def test_cross_field_problem_keeps_its_whole_message_on_one_line(tmp_path, capsys) -> None:
    code, _, err = validate_cli(tmp_path, capsys, quickstart(), "--set", "clients[0].backend=nope",
                                "--set", "clients[0].model=gpt5")
    assert code == 2
    assert err.splitlines() == [
        "error: clients[0].model: unknown model 'gpt5'; defined: ['llama3-8b']",
        "error: clients[0].backend: unknown backend 'nope'; defined: ['analytical', 'empirical']"]


def test_bad_overrides_and_dtypes_are_scenario_errors_at_their_path() -> None:
    config = quickstart()
    config["models"]["llama3-8b"] = {"preset": "meta-llama/Meta-Llama-3-8B", "dtype": "fp8",
                                     "overrides": {"num_kv_heads": 3}}
    assert [e.where for e in cosim.validate(config)] == ["models.llama3-8b.overrides"]
    config["models"]["llama3-8b"]["overrides"] = {}
    error, = cosim.validate(config)
    assert str(error) == ("clients[0].hardware.device: A100-80GB lists no fp8 peak (only fp16, bf16, tf32, fp32, "
                          "int8); use one of those dtypes or set hardware.a100.overrides.peak_tflops")


def test_weights_that_do_not_fit_are_located() -> None:
    errors = cosim.validate(quickstart(), overrides=["models.llama3-8b.preset=meta-llama/Llama-2-70b-hf"])
    assert [e.where for e in errors] == ["clients[0].hardware"]
    assert "raise tensor_parallel" in errors[0].message


def mixtral(*clients: dict[str, Any]) -> dict[str, Any]:
    """Mixtral-8x7B (fp16) on H100s, one client per hardware section given."""
    good, = quickstart()["clients"]
    return quickstart(models={"mixtral": {"preset": "mistralai/Mixtral-8x7B-v0.1"}},
                      hardware={"h100": {"preset": "H100-SXM"}},
                      clients=[{**good, "name": f"c{i}", "model": "mixtral", "hardware": {"device": "h100", **hw}}
                               for i, hw in enumerate(clients)])


# Mixtral-8x7B: 46,702,792,704 parameters, of which 32 layers x 8 experts x 3 x 4096 x 14336 are routed experts.
MIXTRAL_EXPERT_BYTES = 2 * 32 * 8 * 3 * 4096 * 14336
MIXTRAL_DENSE_BYTES = 2 * 46_702_792_704 - MIXTRAL_EXPERT_BYTES


def test_expert_parallelism_splits_the_experts_over_the_ep_ranks(tmp_path, capsys) -> None:
    """Mixtral over 2 H100s with EP=2, as vLLM's -dp 2 and -tp 2 with --enable-expert-parallel."""
    per_device = {}
    for name, config in (("dp2", mixtral({"expert_parallel": 2}, {"expert_parallel": 2})),
                         ("tp2", mixtral({"count": 2, "tensor_parallel": 2, "expert_parallel": 2}))):
        resolution = resolve_scenario(parse_config(config))
        assert resolution.errors == []
        per_device[name] = {c.name: c.weight_bytes_per_device for c in resolution.clients}
    # dp2: attention, router and embeddings whole on each device, half of the experts (48.3 GB of 76.5 usable)
    assert per_device["dp2"] == {"c0": MIXTRAL_DENSE_BYTES + MIXTRAL_EXPERT_BYTES // 2,
                                 "c1": MIXTRAL_DENSE_BYTES + MIXTRAL_EXPERT_BYTES // 2}
    assert per_device["dp2"]["c0"] == 48_308_428_800
    assert per_device["tp2"] == {"c0": (MIXTRAL_DENSE_BYTES + MIXTRAL_EXPERT_BYTES) // 2}
    code, out, _ = validate_cli(tmp_path, capsys, mixtral({"expert_parallel": 2}, {"expert_parallel": 2}))
    assert code == 0 and "TP 1 PP 1 EP 2, weights 48.31 GB per device, KV cache" in out, out


def test_mixtral_on_one_h100_does_not_fit() -> None:
    error, = cosim.validate(mixtral({}))
    assert str(error) == ("clients[0].hardware: model mistralai/Mixtral-8x7B-v0.1 needs 93.4 GB of weights per "
                          "device at TP=1 PP=1 EP=1, more than H100-SXM's usable 76.5 GB; raise tensor_parallel "
                          "or expert_parallel or pick a larger device")


def test_devices_the_parallelism_leaves_idle_are_an_error(tmp_path, capsys) -> None:
    """Reported with the other problems by validate; run refuses before starting a backend."""
    config = three_problems()
    config["clients"][0]["hardware"] = {"device": "a100", "count": 8, "tensor_parallel": 2}
    message = ("clients[0].hardware.count: 8 devices, more than tensor_parallel x pipeline_parallel = 2 x 1 = 2 "
               "use; set count to 2 or raise the parallelism (data parallelism is one client per replica)")
    code, _, err = validate_cli(tmp_path, capsys, config)
    lines = err.splitlines()
    assert code == 2 and [line.split(":")[1].strip() for line in lines] == [
        "models.other.preset", "hardware.tpu.preset", "clients[0].hardware.count"], err
    assert lines[2] == f"error: {message}"
    config["backends"] = {"analytical": {"address": "127.0.0.1:1"}}  # unreachable: never contacted
    with pytest.raises(ScenarioProblems) as caught:
        cosim.run(config)
    assert [str(e) for e in caught.value.problems][2] == message


def test_expert_parallelism_adds_no_devices_to_a_client() -> None:
    error, = cosim.validate(mixtral({"count": 2, "expert_parallel": 2}))
    assert str(error) == (
        "clients[0].hardware.count: 2 devices, more than tensor_parallel x pipeline_parallel = 1 x 1 = 1 use; set "
        "count to 1 or raise the parallelism (data parallelism is one client per replica); expert_parallel=2 adds "
        "no devices: experts are split over the TP ranks of this client and of its data-parallel sibling clients "
        "(EP = TP x DP)")


def test_network_topology_must_hold_every_client_device() -> None:
    config = quickstart(backends={**quickstart()["backends"], "net": {"kind": "network"}},
                        network={"backend": "net", "topology": [{"kind": "ring", "npus": 2, "bandwidth_gbps": 50}]})
    config["clients"][0]["hardware"].update(count=4, tensor_parallel=4)
    error, = cosim.validate(config)
    assert str(error).startswith("network.topology: has 2 NPUs, fewer than the 4")


def test_run_raises_every_problem_before_starting_a_backend() -> None:
    """The backend's address is unreachable: reaching it would be a BackendError, not these."""
    config = three_problems()
    config["backends"] = {"analytical": {"address": "127.0.0.1:1"}}
    with pytest.raises(ScenarioProblems) as caught:
        cosim.run(config)
    assert [e.where for e in caught.value.problems] == [
        "models.other.preset", "hardware.tpu.preset", "clients[0].hardware.count"]
    assert str(caught.value).startswith("3 problems: \n  models.other.preset: unknown model 'llama-9'")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert str(copy) == str(caught.value) and len(copy.problems) == 3


def test_one_problem_reads_as_itself() -> None:
    config = quickstart()
    config["clients"][0]["hardware"]["tensor_parallel"] = 2
    with pytest.raises(ScenarioError) as caught:
        cosim.run(config)
    assert str(caught.value) == "clients[0].hardware.count: 1 devices, fewer than tensor_parallel x " \
                                "pipeline_parallel = 2 x 1 = 2"


def test_validate_accepts_a_path_and_a_parsed_config() -> None:
    assert cosim.validate(QUICKSTART) == []
    assert cosim.validate(str(QUICKSTART), overrides=["clients[0].hardware.count=0"])[0].where == \
        "clients[0].hardware.count"
    assert validate_scenario(load_config(QUICKSTART)[0]) == []


BAD_BOUND = "slo.ttft_s.p90: must be > 0, got -1.0"


def test_a_bad_slo_bound_reads_the_same_from_run_validate_goodput_and_search(tmp_path, capsys) -> None:
    config = quickstart(slo={"ttft_s": {"p90": -1.0}})
    assert [str(e) for e in slo_problems(config["slo"])] == [BAD_BOUND]
    with pytest.raises(ScenarioError, match="^slo.ttft_s.p90: must be > 0, got -1.0$"):
        validate_slo(config["slo"])
    assert [str(e) for e in cosim.validate(config)] == [BAD_BOUND]
    code, _, err = validate_cli(tmp_path, capsys, config)
    assert (code, err) == (2, f"error: {BAD_BOUND}\n")
    for call in (lambda: cosim.run(config), lambda: cosim.goodput(config),
                 lambda: cosim.search({"base": config, "devices": ["A100-80GB"]})):
        with pytest.raises(ScenarioProblems) as caught:
            call()
        assert [str(e) for e in caught.value.problems] == [BAD_BOUND]


@pytest.mark.parametrize(("slo", "expected"), [
    ({"ttft_s": {"p95": 1.0}}, "slo.ttft_s.p95: unknown statistic; use one of mean, p50, p90, p99, max"),
    ({"ttfb_s": {"p90": 1.0}}, "slo.ttfb_s: unknown metric; use one of ttft_s, tpot_s, e2e_s, tbt_max_s"),
    ({"ttft_s": {"p90": 0}}, "slo.ttft_s.p90: must be > 0, got 0"),
    ({"ttft_s": {"p90": float("nan")}}, "slo.ttft_s.p90: must be > 0, got nan"),
    ({"ttft_s": 2.0}, "slo.ttft_s: give a threshold per statistic, e.g. {p90: 2.0}; got 2.0"),
])
def test_slo_problems_name_the_bound(slo, expected) -> None:
    assert [str(e) for e in slo_problems(slo)] == [expected]


def test_goodput_needs_some_bound() -> None:
    assert slo_problems({}) == []
    error, = slo_problems({"ttft_s": {}}, needed_by="goodput")
    assert str(error).startswith("slo: goodput needs an SLO")


SPECULATIVE = "{method: %s, num_speculative_tokens: 2, acceptance_rate: 0.7%s}"


@pytest.mark.parametrize(("sets", "expected"), [
    (["clients[0].scheduler.preemption=swap"],
     "error: clients[0].scheduler.swap_space_bytes: preemption: swap needs host memory to swap to; give "
     "swap_space_bytes (vLLM V0's default was 4 GiB, 4294967296), or use preemption: recompute"),
    (["backends.analytical={python: lab.backend}"],
     "error: backends.analytical.python: a backend class as package.module:Class (the class after a colon), "
     "got 'lab.backend'"),
    (["clients[0].speculative=" + SPECULATIVE % ("draft_model", ", draft_model: tiny")],
     "error: clients[0].speculative.draft_model: unknown model 'tiny'; defined: ['llama3-8b']"),
    (["clients[0].hardware={device: a100, count: 2, pipeline_parallel: 2}",
      "clients[0].speculative=" + SPECULATIVE % ("mtp", "")],
     "error: clients[0].speculative.method: mtp drafts with a model of its own, which cosim runs without pipeline "
     "or expert parallelism; this client has hardware.pipeline_parallel: 2 (use ngram, or pipeline_parallel: 1)"),
    (["models.draft={preset: meta-llama/Llama-3.2-1B}", "clients[0].hardware={device: a100, expert_parallel: 2}",
      "clients[0].speculative=" + SPECULATIVE % ("draft_model", ", draft_model: draft")],
     "error: clients[0].speculative.method: draft_model drafts with a model of its own, which cosim runs without "
     "pipeline or expert parallelism; this client has hardware.expert_parallel: 2 (use ngram, or "
     "expert_parallel: 1)"),
    (["hardware.a100.overrides={peak_tflops: 1e-300}"],
     "error: hardware.a100.overrides.peak_tflops: must be in [0.001, 1e+09], got 1e-300"),
])
def test_validate_refuses_what_a_run_could_not_do_by_the_users_own_key(tmp_path, capsys, sets, expected) -> None:
    """Each ran before as something else (swap as recompute) or failed inside a backend (a layer count the
    user never wrote, an overflow, an import error)."""
    code, _, err = validate_cli(tmp_path, capsys, quickstart(), *(arg for s in sets for arg in ("--set", s)))
    assert code == 2
    assert err.splitlines() == [expected]


def test_swap_with_swap_space_and_a_peak_at_the_bottom_of_its_range_run() -> None:
    """The refusals leave the working neighbours alone: swap given its space, and a device of 1 GFLOP/s and
    1 MB/s, whose steps take hours, not an overflow."""
    config = quickstart(hardware={"a100": {"preset": "A100-80GB",
                                           "overrides": {"peak_tflops": 1e-3, "mem_bandwidth_gbps": 1e-3}}})
    config["workload"]["requests"] = 2
    sets = ["clients[0].scheduler.preemption=swap", "clients[0].scheduler.swap_space_bytes=4294967296"]
    summary = cosim.run(config, overrides=sets).summary
    assert summary["requests"]["completed"] == 2
    assert 1e4 < summary["latency"]["ttft_s"]["p50"] < 1e6  # 16 GB of weights at 1 MB/s: 1.6e4 s a step
