"""Workload generator: distributions, arrival processes, traces and their errors."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cosim.hub.errors import ScenarioError
from cosim.hub.sim.workload import RequestSpec, RequestSpecs, generate_requests, parse_workload
from tests.paths import EXAMPLES

TRACES = EXAMPLES / "traces"
CONV = TRACES / "azure_conv_2023_10k.csv"
CODE = TRACES / "azure_code_2023_2k.csv"


def make_workload(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "requests": 2000,
        "arrival": {"process": "poisson", "rate_per_s": 5},
        "input_tokens": {"dist": "fixed", "value": 100},
        "output_tokens": {"dist": "fixed", "value": 10},
    }
    return base | overrides


def generate(data: dict[str, Any], seed: int = 1, base_dir: Path = TRACES) -> RequestSpecs:
    return generate_requests(parse_workload(data), np.random.default_rng(seed), base_dir=base_dir)


def inputs(requests: Sequence[RequestSpec]) -> np.ndarray:
    return np.array([r.input_tokens for r in requests])


def gaps_s(requests: Sequence[RequestSpec]) -> np.ndarray:
    return np.diff([0] + [r.arrival_ns for r in requests]) / 1e9


def read_azure(path: Path) -> list[tuple[int, int]]:
    with path.open(encoding="utf-8") as handle:
        return [(int(row["ContextTokens"]), int(row["GeneratedTokens"])) for row in csv.DictReader(handle)]


@pytest.mark.parametrize(("dist", "mean"), [
    ({"dist": "fixed", "value": 512}, 512),
    ({"dist": "uniform", "low": 100, "high": 300}, 200),
    ({"dist": "normal", "mean": 1000, "std": 200}, 1000),
    ({"dist": "lognormal", "mean": 1024, "sigma": 0.5}, 1024),
])
def test_length_sample_mean_matches_configured_mean(dist: dict[str, Any], mean: float) -> None:
    values = inputs(generate(make_workload(requests=20000, input_tokens=dist)))
    assert values.mean() == pytest.approx(mean, rel=0.02)
    assert values.dtype.kind == "i" and values.min() >= 1


def test_uniform_lengths_include_both_ends() -> None:
    values = inputs(generate(make_workload(input_tokens={"dist": "uniform", "low": 3, "high": 5})))
    assert set(values.tolist()) == {3, 4, 5}


def test_lognormal_sigma_is_of_the_underlying_normal() -> None:
    dist = {"dist": "lognormal", "mean": 1024, "sigma": 0.5}
    values = inputs(generate(make_workload(requests=20000, input_tokens=dist)))
    assert np.log(values).std() == pytest.approx(0.5, rel=0.03)


def test_lengths_are_clipped_to_min_and_max() -> None:
    dist = {"dist": "normal", "mean": 100, "std": 100, "min": 50, "max": 120}
    values = inputs(generate(make_workload(input_tokens=dist)))
    assert values.min() == 50 and values.max() == 120


def test_poisson_inter_arrival_mean_is_inverse_rate() -> None:
    gaps = gaps_s(generate(make_workload(requests=20000, arrival={"process": "poisson", "rate_per_s": 8})))
    assert gaps.mean() == pytest.approx(1 / 8, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_inter_arrivals_have_configured_rate_and_cv(cv: float) -> None:
    arrival = {"process": "gamma", "rate_per_s": 4, "cv": cv}
    gaps = gaps_s(generate(make_workload(requests=40000, arrival=arrival)))
    assert gaps.mean() == pytest.approx(0.25, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)


def test_uniform_arrivals_are_evenly_spaced() -> None:
    requests = generate(make_workload(requests=5, arrival={"process": "uniform", "rate_per_s": 4, "start_s": 1}))
    assert [r.arrival_ns for r in requests] == [1_000_000_000, 1_250_000_000, 1_500_000_000,
                                                1_750_000_000, 2_000_000_000]


def test_uniform_arrivals_with_jitter_keep_order_and_rate() -> None:
    requests = generate(make_workload(requests=1000, arrival={"process": "uniform", "rate_per_s": 10, "jitter": 1}))
    slots = np.array([r.arrival_ns for r in requests]) // 100_000_000
    assert slots.tolist() == list(range(1000))  # each arrival stays in its own 0.1 s slot


def test_constant_arrivals_all_at_once() -> None:
    requests = generate(make_workload(requests=10, arrival={"process": "constant", "at_s": 2.5}))
    assert {r.arrival_ns for r in requests} == {2_500_000_000}
    assert [r.id for r in requests] == list(range(10))


def test_azure_conversation_trace_replays_rows_in_order() -> None:
    data = {"trace": {"path": "azure_conv_2023_10k.csv", "format": "azure"},
            "arrival": {"process": "trace"},
            "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}}
    requests = generate(data)
    assert len(requests) == 10000
    assert [(r.input_tokens, r.output_tokens) for r in requests] == read_azure(CONV)
    # 2023-11-16 18:15:46.6805900 -> 18:15:50.9951690, kept to the 100 ns of the file
    assert (requests[0].arrival_ns, requests[1].arrival_ns) == (0, 4_314_579_000)


def test_trace_arrival_speedup_compresses_time() -> None:
    data = {"requests": 100, "trace": {"path": "azure_code_2023_2k.csv", "format": "azure"},
            "arrival": {"process": "trace", "speedup": 2},
            "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}}
    normal = generate(data | {"arrival": {"process": "trace"}})
    fast = generate(data)
    assert fast[-1].arrival_ns == pytest.approx(normal[-1].arrival_ns / 2, abs=1)


def test_trace_lengths_with_poisson_arrivals_like_chat_10k() -> None:
    """The chat-10k benchmark: Azure conversation lengths, synthetic arrivals."""
    data = make_workload(requests=10000, trace={"path": "azure_conv_2023_10k.csv", "format": "azure"},
                         input_tokens={"dist": "trace"}, output_tokens={"dist": "trace"})
    requests = generate(data)
    assert [(r.input_tokens, r.output_tokens) for r in requests] == read_azure(CONV)
    assert np.mean(gaps_s(requests)) == pytest.approx(0.2, rel=0.05)


def test_random_trace_sampling_draws_joint_rows() -> None:
    trace = {"path": "azure_code_2023_2k.csv", "format": "azure", "sample": "random"}
    requests = generate(make_workload(requests=5000, trace=trace, input_tokens={"dist": "trace"},
                                      output_tokens={"dist": "trace"}))
    rows = set(read_azure(CODE))
    assert all((r.input_tokens, r.output_tokens) in rows for r in requests)
    assert len({(r.input_tokens, r.output_tokens) for r in requests}) > 500


def test_requests_default_to_all_rows_of_a_sequential_trace() -> None:
    data = make_workload(trace={"path": "azure_code_2023_2k.csv", "format": "azure", "start_row": 500},
                         input_tokens={"dist": "trace"})
    del data["requests"]
    assert len(generate(data)) == 1500


def test_splitwise_and_jsonl_formats(tmp_path: Path) -> None:
    (tmp_path / "s.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n0.5,20,3\n")
    (tmp_path / "t.jsonl").write_text('{"t_ms": 0, "p": 7, "o": 1}\n\n{"t_ms": 250, "p": 8, "o": 2}\n')
    split = {"trace": {"path": "s.csv", "format": "splitwise"}, "arrival": {"process": "trace"},
             "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}}
    got = [(r.arrival_ns, r.input_tokens, r.output_tokens) for r in generate(split, base_dir=tmp_path)]
    assert got == [(0, 10, 2), (500_000_000, 20, 3)]
    jsonl = split | {"trace": {"path": "t.jsonl", "format": "jsonl", "arrival_column": "t_ms", "time_unit": "ms",
                               "input_column": "p", "output_column": "o"}}
    got = [(r.arrival_ns, r.input_tokens, r.output_tokens) for r in generate(jsonl, base_dir=tmp_path)]
    assert got == [(0, 7, 1), (250_000_000, 8, 2)]


def trace_workload(path: str, fmt: str = "csv") -> dict[str, Any]:
    return {"trace": {"path": path, "format": fmt}, "arrival": {"process": "trace"},
            "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}}


@pytest.mark.parametrize(("text", "match"), [
    ("arrival_s,input_tokens,output_tokens\n0,10,2\n1,abc,3\n", r"bad\.csv:3: input_tokens='abc' is not a number"),
    ("arrival_s,input_tokens,output_tokens\n0,10,2\n1,5\n", r"bad\.csv:3: expected 3 fields"),
    ("arrival_s,input_tokens,output_tokens\n0,10,2\n1,-4,1\n", r"bad\.csv:3: input_tokens='-4' must be >= 0"),
    ("arrival_s,input_tokens,output_tokens\n0,10,2.5\n", r"bad\.csv:2: output_tokens='2.5' is not an integer"),
    ("arrival_s,input_tokens,output_tokens\n0,1,1\nnan,10,2\n", r"bad\.csv:3: arrival_s='nan' is not a finite"),
    ("time,input_tokens,output_tokens\n0,10,2\n", r"bad\.csv:1: no column 'arrival_s'"),
    ("", r"bad\.csv:1: empty trace file"),
])
def test_bad_trace_row_names_file_and_line(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ScenarioError, match=match):
        generate(trace_workload("bad.csv"), base_dir=tmp_path)


def test_bad_jsonl_row_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}\n{oops\n')
    with pytest.raises(ScenarioError, match=r"bad\.jsonl:2: not valid JSON"):
        generate(trace_workload("bad.jsonl", "jsonl"), base_dir=tmp_path)


def test_missing_trace_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"nope\.csv: trace file not found"):
        generate(trace_workload("nope.csv"), base_dir=tmp_path)


def test_too_few_trace_rows_for_requests() -> None:
    data = make_workload(requests=3000, trace={"path": "azure_code_2023_2k.csv", "format": "azure"},
                         input_tokens={"dist": "trace"})
    with pytest.raises(ScenarioError, match="has 2000 data rows .* fewer than the 3000 requests"):
        generate(data)


def test_same_seed_gives_identical_requests() -> None:
    data = make_workload(arrival={"process": "gamma", "rate_per_s": 3, "cv": 2},
                         input_tokens={"dist": "lognormal", "mean": 800, "sigma": 1},
                         prefix={"num_prefixes": 4, "tokens": 64, "share": 0.5}, models={"a": 1, "b": 1})
    assert list(generate(data, seed=11)) == list(generate(data, seed=11))
    assert generate(data, seed=11) != generate(data, seed=12)


def test_arrivals_do_not_depend_on_length_settings() -> None:
    a = generate(make_workload(output_tokens={"dist": "fixed", "value": 10}))
    b = generate(make_workload(output_tokens={"dist": "uniform", "low": 1, "high": 99}))
    assert [r.arrival_ns for r in a] == [r.arrival_ns for r in b]


def test_requests_are_sorted_and_numbered() -> None:
    requests = generate(make_workload(arrival={"process": "gamma", "rate_per_s": 100, "cv": 3}))
    assert [r.id for r in requests] == list(range(len(requests)))
    assert all(a.arrival_ns <= b.arrival_ns for a, b in itertools.pairwise(requests))


def test_prefixes_are_shared_and_added_to_the_input() -> None:
    prefix = {"num_prefixes": 10, "tokens": 512, "share": 0.5}
    requests = generate(make_workload(requests=10000, prefix=prefix))
    with_prefix = [r for r in requests if r.prefix_id is not None]
    assert len(with_prefix) / len(requests) == pytest.approx(0.5, abs=0.02)
    assert len({r.prefix_id for r in with_prefix}) == 10
    assert all(r.prefix_tokens == 512 and r.input_tokens == 612 for r in with_prefix)
    assert all(r.prefix_tokens == 0 and r.input_tokens == 100 for r in requests if r.prefix_id is None)


def test_zipf_prefix_popularity_favours_the_first() -> None:
    prefix = {"num_prefixes": 5, "tokens": 8, "popularity": "zipf", "zipf_s": 1.5}
    ids = [r.prefix_id for r in generate(make_workload(requests=5000, prefix=prefix))]
    assert ids.count("prefix-0") > ids.count("prefix-1") > ids.count("prefix-4")


def test_model_mix_follows_weights() -> None:
    requests = generate(make_workload(requests=10000, models={"a": 0.7, "b": 0.3}))
    share_a = sum(r.model == "a" for r in requests) / len(requests)
    assert share_a == pytest.approx(0.7, abs=0.02)
    assert generate(make_workload(requests=3))[0].model is None


@pytest.mark.parametrize(("override", "where", "match"), [
    ({"arrival": {"process": "poisson", "rate_per_s": -5}}, "workload.arrival.rate_per_s", "must be > 0, got -5"),
    ({"input_tokens": {"dist": "lognormal", "mean": 1024}}, "workload.input_tokens.sigma", "Field required"),
    ({"input_tokens": {"dist": "uniform", "low": 9, "high": 2}}, "workload.input_tokens", "high must be >= low=9"),
    ({"output_tokens": {"dist": "zipf"}}, "workload.output_tokens", "'zipf'"),
    ({"arrival": {"process": "trace"}}, "workload", "neither arrival.trace nor workload.trace"),
    ({"models": {"a": 0}}, "workload", "weight > 0"),
])
def test_validation_error_names_path_and_value(override: dict[str, Any], where: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=match) as info:
        parse_workload(make_workload(**override))
    assert info.value.where == where


def test_shipped_traces_are_small_and_licensed() -> None:
    for path in (CONV, CODE):
        assert path.stat().st_size < 1_000_000
    assert (TRACES / "LICENSE-azure").read_text(encoding="utf-8-sig").startswith("Attribution 4.0 International")
    assert len(read_azure(CONV)) == 10000 and len(read_azure(CODE)) == 2000
