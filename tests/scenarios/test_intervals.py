"""Prediction intervals (`cosim run --intervals`): reruns at the edges of each backend's declared step error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cosim.hub.cli import main
from cosim.hub.metrics.intervals import NONE_DECLARED
from cosim.hub.studies import runner
from cosim.hub.studies.simulation import Simulation
from cosim.hub.timing.cache import SharedTimings
from tests.paths import EXAMPLES
from tests.scenarios.helpers import scenario

QUICKSTART = EXAMPLES / "quickstart.yaml"
LATENCY = ("ttft_s", "tpot_s", "itl_s", "e2e_s")


def queued(step_ns: int, per_token_ns: int, **options: Any) -> dict[str, Any]:
    """Forty requests on the linear backend, arriving faster than it serves them (so steps queue)."""
    config = scenario(step_ns=step_ns, per_token_ns=per_token_ns, slo={"ttft_s": {"p90": 0.0005}}, workload={
        "requests": 40, "arrival": {"process": "poisson", "rate_per_s": 20_000},
        "input_tokens": {"dist": "uniform", "low": 20, "high": 200},
        "output_tokens": {"dist": "uniform", "low": 2, "high": 12}})
    config["backends"]["lin"]["options"].update(options)
    return config


def test_the_edges_are_the_runs_with_every_step_scaled_by_hand() -> None:
    """±25% on 1000 ns + 4 ns/token: the edges are the runs of 750 + 3/token and 1250 + 5/token."""
    nominal = runner.run(queued(1000, 4, step_error=0.25), overrides=["output.intervals=true"]).summary
    fast = runner.run(queued(750, 3)).summary
    slow = runner.run(queued(1250, 5)).summary
    block = nominal["intervals"]
    assert block["clients"] == {"c0": {"low": -0.25, "high": 0.25, "basis": "linear test backend: option step_error"}}
    for metric in LATENCY:
        for stat in ("mean", "p90", "p99"):
            low, high = block["latency"][metric][stat]
            assert [low, high] == [fast["latency"][metric][stat], slow["latency"][metric][stat]]
            assert low <= nominal["latency"][metric][stat] <= high and low < high
    # The low edge is the fast run: the lower latencies, the higher throughput.
    for key in ("requests_per_s", "output_tokens_per_s"):
        assert block["throughput"][key] == [slow["throughput"][key], fast["throughput"][key]]
    assert block["goodput_requests_per_s"] == sorted([fast["goodput_requests_per_s"],
                                                      slow["goodput_requests_per_s"]])


def test_a_backend_that_declares_no_error_gets_no_interval_and_the_summary_says_so() -> None:
    plain = runner.run(queued(1000, 4)).summary
    asked = runner.run(queued(1000, 4), overrides=["output.intervals=true"]).summary
    assert asked.pop("intervals") == {"what": NONE_DECLARED, "clients": {"c0": None}}
    plain.pop("wall_time_s"), asked.pop("wall_time_s")
    assert asked == plain


def test_a_run_without_intervals_has_no_block_and_a_scaled_run_never_reads_unscaled_timings() -> None:
    config = runner.parse_config(queued(1000, 4, step_error=0.25))
    assert "intervals" not in runner.run(config).summary
    with runner.started_backends(config, ["lin"], in_process=True) as backends:
        alone = Simulation(config, Path.cwd(), backends, step_edge="low")
        assert alone.run() is None
        shared = SharedTimings()  # the nominal run fills it first; the low edge's run must not take from it
        for edge in (None, "low"):
            simulation = Simulation(config, Path.cwd(), backends, shared_timings=shared, step_edge=edge)  # type: ignore[arg-type]
            assert simulation.run() is None
        low, after = alone.summarize(0.0), simulation.summarize(0.0)
    for summary in (low, after):
        summary.pop("backends")  # the shared cache saves calls, and only calls
    assert after == low


def test_cosim_run_intervals_on_the_roofline_prints_writes_and_repeats_byte_for_byte(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", str(QUICKSTART), "--intervals", "--in-process", "--no-progress", "--set", "workload.requests=60",
            "--set", "output.plots=false"]
    assert main([*args, "-o", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    assert "step error  c0: -7.3%/+7.3% (fitted roofline, ampere family, leave-one-model-out" in printed
    assert main([*args, "-o", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    texts = [json.loads((tmp_path / run / "summary.json").read_text()) for run in ("a", "b")]
    for summary in texts:
        summary.pop("wall_time_s")
    assert texts[0] == texts[1]
    block = texts[0]["intervals"]
    low, high = block["latency"]["tpot_s"]["mean"]
    assert low < texts[0]["latency"]["tpot_s"]["mean"] < high
    page = (tmp_path / "a" / "report.html").read_text()
    assert page.count('class="interval"') == len(LATENCY) * 3 + 3  # mean, p90, p99; req/s, tok/s, goodput
    assert "leave-one-model-out step MAPE 7.3%" in page
    assert main(["run", str(QUICKSTART), "--in-process", "--no-progress", "--set", "workload.requests=60",
                 "--set", "output.plots=false", "-o", str(tmp_path / "plain")]) == 0
    assert "interval" not in (tmp_path / "plain" / "report.html").read_text()
    assert "interval (ms)" not in capsys.readouterr().out
