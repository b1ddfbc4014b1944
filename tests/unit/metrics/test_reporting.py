"""Reporting as vLLM's benchmark users expect it: per-token ITL, milliseconds, SLO lines, many clients, report.html."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

import cosim.hub.studies.runner as runner
from cosim.hub.metrics import benchmark_text, write_run_folder
from cosim.hub.metrics.figures import ITL_PANEL, LATENCY_PANELS
from cosim.hub.metrics.itl import counted_statistic, merged_gaps
from cosim.hub.metrics.plots import _draw_slo, plot_client_series
from cosim.hub.metrics.stats import stat_block, statistic, statistics
from cosim.hub.sim.records import ClientInfo, ClientTimeline
from tests.scenarios.helpers import scenario
from tests.unit.metrics.test_metrics import make_clients, make_requests, make_summary

WORKLOAD = {"requests": 60, "arrival": {"process": "poisson", "rate_per_s": 3000},
            "input_tokens": {"dist": "uniform", "low": 10, "high": 300},
            "output_tokens": {"dist": "uniform", "low": 2, "high": 40}}


@pytest.mark.parametrize("seed", range(5))
def test_counted_statistics_equal_numpy_on_the_repeated_values(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = np.unique(rng.integers(1, 10_000, size=int(rng.integers(1, 40))))
    counts = rng.integers(1, 50, size=values.size)
    repeated = np.repeat(values, counts)
    for q in (0, 1, 33.3, 50, 90, 95, 99, 99.9, 100):
        assert counted_statistic(values, counts, f"p{q}") == pytest.approx(np.percentile(repeated, q), rel=1e-12)
    assert counted_statistic(values, counts, "median") == pytest.approx(np.median(repeated), rel=1e-12)
    assert counted_statistic(values, counts, "mean") == pytest.approx(np.mean(repeated), rel=1e-12)
    assert counted_statistic(values, counts, "std") == pytest.approx(np.std(repeated), rel=1e-9)
    assert counted_statistic(values, counts, "max") == repeated.max()
    assert counted_statistic(values[:0], counts[:0], "p99") is None


def test_merged_gaps_sum_each_gap_over_clients_sorted() -> None:
    values, counts = merged_gaps([{30: 2, 10: 1}, {}, {10: 4, 20: 5, 1 << 40: 1}])
    assert values.dtype == counts.dtype == np.int64
    assert values.tolist() == [10, 20, 30, 1 << 40] and counts.tolist() == [5, 5, 2, 1]
    empty = merged_gaps(iter([]))
    assert empty[0].dtype == empty[1].dtype == np.int64 and empty[0].size == empty[1].size == 0


@pytest.mark.parametrize("seed", range(5))
def test_a_stat_block_equals_each_statistic_taken_alone_ignoring_nans(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.lognormal(size=int(rng.integers(1, 300)))
    values[rng.random(values.size) < 0.2] = np.nan
    kept = values[~np.isnan(values)]
    block = stat_block(values)
    assert list(block) == ["mean", "p50", "p90", "p99", "max"]
    assert block == {"mean": float(np.mean(kept)), "max": float(np.max(kept)),
                     **{f"p{q}": float(np.percentile(kept, q)) for q in (50, 90, 99)}}
    assert statistics(values, ("p99", "mean")) == {"p99": block["p99"], "mean": block["mean"]}
    assert statistic(values, "p90") == block["p90"]
    assert stat_block(np.full(3, np.nan)) == dict.fromkeys(block)
    with pytest.raises(ValueError, match="unknown statistic 'median'"):
        statistic(values, "median")


def _run_with_gaps(lookahead: bool) -> tuple[runner.RunResult, dict[int, int]]:
    config = scenario(workload=WORKLOAD, per_token_ns=3)
    config["backends"]["lin"]["lookahead"] = lookahead  # off: no decode runs, every step recorded one by one
    captured: dict[str, dict[str, ClientTimeline]] = {}
    original = runner.Simulation.summarize

    def summarize(self: runner.Simulation, wall_time_s: float) -> dict:
        captured["timelines"] = self.timelines()
        return original(self, wall_time_s)

    runner.Simulation.summarize = summarize  # type: ignore[method-assign]
    try:
        result = runner.run(config)
    finally:
        runner.Simulation.summarize = original  # type: ignore[method-assign]
    values, counts = merged_gaps(t.token_gaps for t in captured["timelines"].values())
    return result, dict(zip(values.tolist(), counts.tolist()))


def test_itl_counts_every_token_gap_exactly() -> None:
    """The gaps of each request add up to its last token minus its first, one gap per later token,
    and decode runs (taken in bulk) record the same gaps as steps recorded one by one."""
    result, gaps = _run_with_gaps(lookahead=True)
    requests = result.requests
    assert sum(g * n for g, n in gaps.items()) == sum(r.last_token_ns - r.first_token_ns for r in requests)
    assert sum(gaps.values()) == sum(r.generated_tokens - 1 for r in requests)
    assert max(gaps) == max(r.max_tbt_ns for r in requests)
    assert _run_with_gaps(lookahead=False)[1] == gaps
    itl = result.summary["latency"]["itl_s"]
    repeated = np.repeat(np.array(sorted(gaps)), [gaps[g] for g in sorted(gaps)]) / 1e9
    assert itl["p99"] == pytest.approx(np.percentile(repeated, 99), rel=1e-9)
    bench = result.summary["benchmark"]
    assert bench["p99_itl_ms"] == pytest.approx(1000 * np.percentile(repeated, 99), rel=1e-9)
    assert bench["median_ttft_ms"] == pytest.approx(1000 * result.summary["latency"]["ttft_s"]["p50"], rel=1e-9)
    assert bench["completed"] == 60 and bench["request_goodput"] is None


def test_benchmark_block_reads_as_vllm_bench_serve_prints_it() -> None:
    summary = make_summary()
    text = benchmark_text(summary["benchmark"])
    lines = text.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert f"{'Successful requests:':<40} {3:<10}" in lines
    assert "---------------Time to First Token----------------" in lines
    assert "-----Time per Output Token (excl. 1st token)------" in lines
    assert "---------------Inter-token Latency----------------" in lines
    # TTFT of the three completed requests: 1.0, 0.8, 0.2 s -> mean 666.67 ms, median 800 ms.
    assert f"{'Mean TTFT (ms):':<40} {666.67:<10.2f}" in lines
    assert f"{'Median TTFT (ms):':<40} {800.0:<10.2f}" in lines
    assert f"{'Request goodput (req/s):':<40} {1 / 3:<10.2f}" in lines
    assert lines[-1] == "=" * 50


def test_slo_lines_mark_threshold_and_percentile_level() -> None:
    slo = {"ttft_s": {"p90": {"target": 0.5, "observed": 0.3, "met": True}},
           "tbt_max_s": {"max": {"target": 0.2, "observed": 0.4, "met": False}}}
    ax = Figure().add_subplot(1, 1, 1)
    _draw_slo(ax, slo, LATENCY_PANELS[0])
    (vertical, level) = ax.lines
    assert list(vertical.get_xdata()) == [500.0, 500.0] and list(level.get_ydata()) == [0.9, 0.9]
    assert vertical.get_label() == "SLO p90 <= 500 ms (met)" and vertical.get_color() == "tab:green"
    itl = Figure().add_subplot(1, 1, 1)
    _draw_slo(itl, slo, ITL_PANEL)  # a request's longest gap bounds each of its gaps
    assert [line.get_label() for line in itl.lines] == ["SLO tbt_max max <= 200 ms (missed)"]
    assert itl.lines[0].get_color() == "tab:red"


def _clients(n: int) -> tuple[list[ClientInfo], dict[str, ClientTimeline]]:
    infos, timelines = [], {}
    for i in range(n):
        name = f"decode-{i:02d}"
        infos.append(ClientInfo(name=name, role="decode", model="m", backend="b", fidelity="f", device="H100",
                                num_devices=1, kv_capacity_blocks=100))
        timelines[name] = ClientTimeline()
        for k in range(50):
            timelines[name].append(k * 1000, (k + 1) * 1000, 1 + (k + i) % 7, 0, 1, min(100, k + i), 0)
    return infos, timelines


def test_many_clients_are_drawn_as_a_heatmap(tmp_path: Path) -> None:
    from matplotlib.image import imread

    infos, timelines = _clients(40)
    names = [c.name for c in infos]
    assert plot_client_series(tmp_path / "few.png", "num_seqs", "batch", infos[:8], names[:8], timelines) == "lines"
    assert plot_client_series(tmp_path / "many.png", "kv_blocks_used", "KV", infos, names, timelines) == "heatmap"
    assert imread(tmp_path / "many.png").shape[0] > imread(tmp_path / "few.png").shape[0]  # a row per client


def test_report_html_is_self_contained(tmp_path: Path) -> None:
    clients, timelines = make_clients()
    write_run_folder(tmp_path, make_summary(), make_requests(), clients, timelines)
    page = (tmp_path / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page), "the page must fetch nothing"
    assert page.count('src="data:image/png;base64,') == len(list((tmp_path / "plots").glob("*.png"))) == 6
    for text in ("Serving Benchmark Result", "Mean TTFT (ms):", "ITL (per token)", "960.00", "missed", "d0"):
        assert text in page, text
