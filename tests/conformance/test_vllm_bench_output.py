"""summary.json's ``benchmark`` block and its printed text against recorded ``vllm bench serve`` runs.

``vllm_bench/`` holds what vLLM 0.18 printed and what ``--save-result`` wrote for four runs
(``scripts/record_vllm_bench.py``; its README lists them): vLLM's defaults, ``--save-detailed``,
other percentiles and metrics with ``--goodput``, and all at once with ``--max-concurrency``.
cosim's block must have exactly the keys of the run with the same options, in the same order, each
of the same JSON type (``date`` aside: null, for byte-identical runs), and :func:`benchmark_text`
must print each run's numbers as vLLM printed them, byte for byte, its rows in vLLM's order.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cosim.hub.studies.runner as runner
from cosim.hub.errors import ScenarioError
from cosim.hub.metrics import benchmark_text
from cosim.hub.metrics.benchmark import peak_concurrency
from tests.scenarios.helpers import scenario

RECORDED = Path(__file__).parent / "vllm_bench"
RUNS = ("serve_result", "serve_result_detailed", "serve_result_options", "serve_result_closed")
# The recorded runs' workload: 20 random prompts of 200 tokens, 16 out, at 10 requests per second (Poisson).
VLLM_BENCH = {"dataset-name": "random", "num-prompts": 20, "random-input-len": 200, "random-output-len": 16,
              "request-rate": 10}
# The options of serve_result_options as cosim's (--goodput ttft:1000 as an SLO every request meets).
OPTIONS = {"output": {"metric_percentiles": "50,99.9", "percentile_metrics": "e2el,ttft"},
           "slo": {"ttft_s": {"p90": 1.0}}}


def _recorded(run: str = "serve_result") -> tuple[dict[str, Any], str]:
    block = json.loads((RECORDED / f"{run}.json").read_text())
    return block, (RECORDED / f"{run}.txt").read_text()


def _run(bench: dict[str, Any] | None = None, **sections: Any) -> runner.RunResult:
    output = {"plots": False, **sections.pop("output", {})}
    workload = {"vllm_bench": VLLM_BENCH | (bench or {})}
    return runner.run(scenario(workload=workload, per_token_ns=2000, output=output, **sections))


def _json_type(value: Any) -> str:
    return "number" if isinstance(value, float) else type(value).__name__


@pytest.mark.parametrize("run", RUNS)
def test_text_reproduces_the_recorded_block_byte_for_byte(run: str) -> None:
    block, text = _recorded(run)
    assert benchmark_text(block) + "\n" == text


# The keys that say what was asked and what completed: cosim's run of the same workload writes vLLM's values.
WORKLOAD_KEYS = ("num_prompts", "request_rate", "burstiness", "max_concurrency", "completed", "failed",
                 "total_input_tokens", "total_output_tokens")


@pytest.mark.parametrize(("run", "sections"), [("serve_result", {}), ("serve_result_options", OPTIONS)])
def test_block_has_exactly_the_recorded_keys_in_order_and_types(run: str, sections: dict[str, Any]) -> None:
    recorded, _ = _recorded(run)
    bench = json.loads(json.dumps(_run(**sections).summary["benchmark"]))
    assert list(bench) == list(recorded)
    types = {key: _json_type(value) for key, value in bench.items()}
    assert types == {key: _json_type(value) for key, value in recorded.items()} | {"date": "NoneType"}
    assert bench["model_id"] == bench["tokenizer_id"] == "meta-llama/Meta-Llama-3-8B"
    assert {key: bench[key] for key in WORKLOAD_KEYS} == {key: recorded[key] for key in WORKLOAD_KEYS}
    assert (bench["num_prompts"], bench["completed"], bench["total_input_tokens"]) == (20, 20, 20 * 200)


def test_details_add_save_detailed_arrays_and_change_no_result() -> None:
    """``output.benchmark_details``: the per-request arrays agree with the block's own statistics, each
    request's gaps add up to its decode time, and every other figure equals the run's without them."""
    recorded, _ = _recorded()
    detailed, _ = _recorded("serve_result_detailed")
    plain = _run().summary
    result = _run(output={"benchmark_details": True, "metric_percentiles": "50,99"})
    bench = json.loads(json.dumps(result.summary["benchmark"]))
    assert list(bench) == list(detailed)
    # What vLLM's --save-detailed keeps in the result (benchmarks/serve.py drops these without it).
    arrays = set(detailed) - set(recorded) - {"p50_ttft_ms", "p50_tpot_ms", "p50_itl_ms"}
    assert arrays == {"input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors"}
    assert all(isinstance(bench[key], list) and len(bench[key]) == len(detailed[key]) == 20 for key in arrays)
    assert {_json_type(bench["itls"][0][0]), _json_type(detailed["itls"][0][0])} == {"number"}
    assert sum(bench["output_lens"]) == bench["total_output_tokens"] and bench["input_lens"] == [200] * 20
    gaps = [gap for request in bench["itls"] for gap in request]
    assert len(gaps) == bench["total_output_tokens"] - 20
    assert bench["p99_itl_ms"] == pytest.approx(1000 * np.percentile(gaps, 99), rel=1e-8)
    assert bench["median_itl_ms"] == pytest.approx(1000 * np.median(gaps), rel=1e-8)
    assert bench["mean_ttft_ms"] == pytest.approx(1000 * np.mean(bench["ttfts"]), rel=1e-8)
    for record, itls, start in zip(result.requests, bench["itls"], bench["start_times"], strict=True):
        assert sum(itls) == pytest.approx((record.finish_ns - record.first_token_ns) / 1e9, rel=1e-8)
        assert start == pytest.approx(record.arrival_ns / 1e9, rel=1e-8)
    assert set(bench["errors"]) == set(bench["generated_texts"]) == {""}
    drop = {"benchmark", "wall_time_s"}
    assert {k: v for k, v in result.summary.items() if k not in drop} == \
        {k: v for k, v in plain.items() if k not in drop}
    assert {k: bench[k] for k in plain["benchmark"]} == plain["benchmark"] | {
        k: bench[k] for k in ("p50_ttft_ms", "p50_tpot_ms", "p50_itl_ms") if k in plain["benchmark"]}


def test_details_over_http_are_what_the_client_saw() -> None:
    """With the API server (``frontend``), the arrays are client-side, as the tool measures them."""
    frontend = {"tokenizer_batch_wait_s": 0.002, "output_s_per_step": 30e-6, "output_s_per_token": 15e-6}
    result = _run(frontend=frontend, output={"benchmark_details": True})
    bench = result.summary["benchmark"]
    for record, itls, start, ttft in zip(result.requests, bench["itls"], bench["start_times"], bench["ttfts"],
                                         strict=True):
        assert sum(itls) == pytest.approx((record.client_last_token_ns - record.client_first_token_ns) / 1e9,
                                          rel=1e-8)
        assert start == pytest.approx(record.client_send_ns / 1e9, rel=1e-8, abs=1e-12)
        assert ttft == pytest.approx((record.client_first_token_ns - record.client_send_ns) / 1e9, rel=1e-8)


@pytest.mark.parametrize(("run", "sections"), [
    ("serve_result", {}), ("serve_result_options", OPTIONS),
    ("serve_result_closed", {"bench": {"request-rate": "inf"}}),
])
def test_cosim_prints_the_recorded_rows_in_order(run: str, sections: dict[str, Any]) -> None:
    """The labels, rules and headers of each run's block, in order (cosim has no --max-concurrency:
    the closed run's concurrency line is the one row it does not print)."""
    _, text = _recorded(run)
    printed = benchmark_text(_run(**sections).summary["benchmark"]).splitlines()
    recorded = [line for line in text.splitlines() if not line.startswith("Maximum request concurrency:")]
    assert [line[:41] for line in printed] == [line[:41] for line in recorded]


def test_percentiles_and_metrics_follow_the_options() -> None:
    """``output.metric_percentiles`` and ``output.percentile_metrics`` as vLLM's flags: keys and rows."""
    result = _run(output={"metric_percentiles": "50,99.9", "percentile_metrics": "e2el,ttft"})
    bench = result.summary["benchmark"]
    stats = sorted(key for key in bench if key.endswith("_ms"))
    assert stats == sorted(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p50", "p99.9") for m in ("ttft", "e2el"))
    e2e_s = [(r.finish_ns - r.arrival_ns) / 1e9 for r in result.requests]
    assert bench["p99.9_e2el_ms"] == pytest.approx(1000 * np.percentile(e2e_s, 99.9), rel=1e-8)
    assert bench["std_ttft_ms"] == pytest.approx(
        1000 * np.std([(r.first_token_ns - r.arrival_ns) / 1e9 for r in result.requests]), rel=1e-8)
    lines = benchmark_text(bench).splitlines()
    recorded_block, recorded_text = _recorded("serve_result_options")
    assert stats == sorted(key for key in recorded_block if key.endswith("_ms"))
    headers = [line for line in lines if line.startswith("-")]
    assert headers == [line for line in recorded_text.splitlines() if line.startswith("-")] == [
        "{:-^50}".format("Time to First Token"), "{:-^50}".format("End-to-end Latency")]
    assert [line.split("  ")[0] for line in lines if re.match(r"P\d", line)] == [
        "P50 TTFT (ms):", "P99.9 TTFT (ms):", "P50 E2EL (ms):", "P99.9 E2EL (ms):"]


def test_goodput_only_when_an_slo_is_asked() -> None:
    asked = _run(slo={"ttft_s": {"p90": 10.0}}).summary["benchmark"]
    assert asked["request_goodput"] == pytest.approx(asked["request_throughput"])  # every request meets 10 s
    assert any(line.startswith("Request goodput (req/s):") for line in benchmark_text(asked).splitlines())
    plain = _run().summary["benchmark"]
    assert plain["request_goodput"] is None
    assert not any(line.startswith("Request goodput") for line in benchmark_text(plain).splitlines())


def test_rate_line_only_for_a_finite_rate() -> None:
    """All at once: ``request_rate`` is "inf", as vLLM writes it, and no rate line is printed; a
    concurrency limit prints its line fourth, where vLLM's closed run has it."""
    closed, text = _recorded("serve_result_closed")
    bench = _run(bench={"request-rate": "inf"}).summary["benchmark"]
    assert bench["request_rate"] == closed["request_rate"] == "inf"
    assert not any(line.startswith("Request rate configured") for line in benchmark_text(bench).splitlines())
    lines = benchmark_text(bench | {"max_concurrency": 8}).splitlines()
    assert lines[3] == f"{'Maximum request concurrency:':<40} {8:<10}"
    assert lines[3][:41] == text.splitlines()[3][:41]


def _run_trace(tmp_path: Path, rows: str, **sections: Any) -> runner.RunResult:
    """A run of the requests of ``rows`` (CSV: arrival_s,input,output) on 0.25 s steps."""
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input,output\n" + rows)
    workload = {"trace": {"path": str(trace), "format": "csv", "arrival_column": "arrival_s",
                          "input_column": "input", "output_column": "output"},
                "arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}}
    return runner.run(scenario(workload=workload, step_ns=250_000_000, **sections))


def test_peak_output_tokens_per_second_counts_from_the_first_send() -> None:
    """Two requests sent at 0.6 s ask for 3 tokens each: tokens at 0.85, 1.1 and 1.35 s. Seconds count
    from the first send, as vLLM's buckets: all 6 fall in its first second (whole seconds would hold 2, 4)."""
    workload = {"requests": 2, "arrival": {"process": "constant", "at_s": 0.6},
                "input_tokens": {"dist": "fixed", "value": 100}, "output_tokens": {"dist": "fixed", "value": 3}}
    result = runner.run(scenario(workload=workload, step_ns=250_000_000))
    assert [(r.first_token_ns, r.finish_ns) for r in result.requests] == [(850_000_000, 1_350_000_000)] * 2
    bench = result.summary["benchmark"]
    assert (bench["max_output_tokens_per_s"], bench["max_concurrent_requests"]) == (6.0, 2)
    assert (bench["request_rate"], bench["burstiness"]) == ("inf", 1.0)


def test_peak_output_tokens_per_second_starts_at_the_first_request(tmp_path: Path) -> None:
    """r0 is sent at 0 and asks for 1 token; r1 at 0.6 s asks for 4: tokens at 0.25 s (r0), then 0.85,
    1.1, 1.35, 1.6 s (r1): [0, 1) holds 2, [1, 2) holds 3. They never overlap, but both are in flight
    within the first second, which vLLM counts as 2 concurrent requests."""
    result = _run_trace(tmp_path, "0,100,1\n0.6,100,4\n")
    assert [r.finish_ns for r in result.requests] == [250_000_000, 1_600_000_000]
    bench = result.summary["benchmark"]
    assert (bench["max_output_tokens_per_s"], bench["max_concurrent_requests"]) == (3.0, 2)
    assert f"{'Peak output token throughput (tok/s):':<40} {3.0:<10.2f}" in benchmark_text(bench).splitlines()


def test_peak_concurrency_counts_requests_by_the_second_as_vllm() -> None:
    """vLLM counts a request in every one-second bucket (from the first send) from its send's to its end's:
    three requests one after another inside the first second count 3; one sent at 0.9 s and ending at 1.2 s
    is in buckets 0 and 1."""
    second = 1_000_000_000
    start, end = np.array([0, 300, 600]) * 1_000_000, np.array([250, 550, 850]) * 1_000_000
    assert peak_concurrency(start, end) == 3
    assert peak_concurrency(np.array([0, 900_000_000, 1_500_000_000]),
                            np.array([950_000_000, 1_200_000_000, 2 * second + 1])) == 2
    assert peak_concurrency(np.array([5 * second]), np.array([5 * second])) == 1
    assert peak_concurrency(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0


def test_peak_concurrency_of_the_recorded_run_is_vllms() -> None:
    """From the recorded --save-detailed run's own sends and token gaps (end = send + TTFT + the gaps),
    cosim's count is the max_concurrent_requests vLLM wrote."""
    detailed, _ = _recorded("serve_result_detailed")
    start = np.array(detailed["start_times"])
    end = start + np.array(detailed["ttfts"]) + np.array([sum(gaps) for gaps in detailed["itls"]])
    to_ns = 1e9
    assert peak_concurrency(np.round(start * to_ns).astype(np.int64), np.round(end * to_ns).astype(np.int64)) \
        == detailed["max_concurrent_requests"]


@pytest.mark.parametrize(("output", "expected"), [
    ({"metric_percentiles": "99,abc"}, "output.metric_percentiles: 'abc' is not a number"),
    ({"metric_percentiles": [50, 101]}, "output.metric_percentiles: percentile 101 is outside"),
    ({"percentile_metrics": "ttft,queue"}, "output.percentile_metrics: unknown metric 'queue'"),
])
def test_bad_options_name_their_key(output: dict[str, Any], expected: str) -> None:
    with pytest.raises(ScenarioError, match=expected):
        _run(output=output)
