"""Goodput search (cosim.goodput): analytic capacity, confidence bounds, verdicts, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

import cosim
from cosim.hub.cli import main
from cosim.hub.errors import ScenarioError
from cosim.hub.studies.search.stats import Bound, Verdict, bounds, confidence_bounds, judge
from tests.scenarios.helpers import client, scenario

STEP_S = 0.01  # one prefill step of the linear backend = the whole service of a one-token request


def queue_config(*, requests: int, process: str, slo_ttft_s: float) -> dict[str, Any]:
    """One client serving one request at a time (static, max_num_seqs=1) in STEP_S each."""
    config = scenario(clients=[client(max_num_seqs=1, batching="static")], step_ns=int(STEP_S * 1e9))
    config["workload"] = {"requests": requests, "arrival": {"process": process, "rate_per_s": 20},
                          "input_tokens": {"dist": "fixed", "value": 100},
                          "output_tokens": {"dist": "fixed", "value": 1}}
    config["slo"] = {"ttft_s": {"p90": slo_ttft_s}}
    return config


def test_goodput_finds_the_analytic_capacity_of_a_deterministic_queue() -> None:
    """D/D/1 with service S: above 1/S request i waits i(S - 1/rate), so the (linear) p90 TTFT over N
    requests is S + 0.9 (N - 1)(S - 1/rate) and the SLO T holds up to 1 / (S - (T - S) / (0.9 (N - 1)))."""
    n, target = 101, 0.02
    exact = 1 / (STEP_S - (target - STEP_S) / (0.9 * (n - 1)))  # 101.1236 requests/s
    result = cosim.goodput(queue_config(requests=n, process="uniform", slo_ttft_s=target), replications=2,
                           tolerance=0.002)
    assert result.single_request_s == pytest.approx(STEP_S)
    assert result.interval_rps[0] <= exact <= result.interval_rps[1]
    assert result.interval_rps[1] - result.interval_rps[0] <= 0.002 * exact * 1.01
    assert result.goodput_rps == pytest.approx(exact, rel=0.002)
    assert result.estimate_rps == pytest.approx(exact, rel=1e-4)
    assert result.num_runs == 1 + result.replications * len(result.points)


def test_goodput_uses_the_same_seeds_at_every_rate() -> None:
    config = queue_config(requests=60, process="poisson", slo_ttft_s=0.05)
    result = cosim.goodput(config, replications=3, tolerance=0.1, seed=11)
    assert result.seeds == [11, 12, 13]
    assert result.num_runs == 1 + 3 * len(result.points)
    verdicts = [p.verdict for p in result.points]
    # Common random numbers keep the verdicts ordered along the rate axis here.
    assert verdicts == sorted(verdicts, key=[Verdict.FEASIBLE, Verdict.UNDECIDED, Verdict.INFEASIBLE].index)


def test_poisson_goodput_is_below_capacity_and_its_interval_holds_the_estimate() -> None:
    result = cosim.goodput(queue_config(requests=150, process="poisson", slo_ttft_s=0.05), replications=4,
                           tolerance=0.05)
    low, high = result.interval_rps
    assert 0 < low <= result.estimate_rps <= high
    assert low < 1 / STEP_S  # an M/D/1 queue cannot keep p90 TTFT bounded beyond its service rate
    at_goodput = next(p for p in result.points if p.rate_per_s == result.goodput_rps)
    assert at_goodput.verdict is Verdict.FEASIBLE
    assert all(b.upper <= b.target for b in at_goodput.bounds)


def test_goodput_is_zero_when_a_lone_request_misses_the_slo() -> None:
    result = cosim.goodput(queue_config(requests=20, process="poisson", slo_ttft_s=STEP_S / 2), replications=2)
    assert result.goodput_rps == 0.0
    assert "not shown to hold" in result.note


def test_goodput_needs_a_rate_and_an_slo() -> None:
    with pytest.raises(ScenarioError, match="constant"):
        cosim.goodput(queue_config(requests=10, process="poisson", slo_ttft_s=0.1) | {
            "workload": {"requests": 4, "arrival": {"process": "constant"},
                         "input_tokens": {"dist": "fixed", "value": 8},
                         "output_tokens": {"dist": "fixed", "value": 2}}})
    with pytest.raises(ScenarioError, match="needs an SLO"):
        cosim.goodput(queue_config(requests=10, process="poisson", slo_ttft_s=0.1) | {"slo": {}})


def test_confidence_bounds_are_student_t_intervals() -> None:
    mean, lower, upper = confidence_bounds([1.0, 2.0, 3.0], 0.95)
    half = 2.919986 / math.sqrt(3)  # t(0.95, 2 dof) * s / sqrt(n), s = 1
    assert (mean, lower, upper) == pytest.approx((2.0, 2.0 - half, 2.0 + half), rel=1e-6)
    assert confidence_bounds([4.0], 0.9) == (4.0, 4.0, 4.0)
    assert confidence_bounds([1.0, math.inf], 0.9) == (math.inf, math.inf, math.inf)


def test_bounds_split_the_confidence_over_constraints() -> None:
    """Two constraints at joint 0.9 use one-sided 0.95 bounds each (Bonferroni)."""
    samples = {("ttft_s", "p90"): [1.0, 2.0, 3.0], ("tpot_s", "p90"): [1.0, 2.0, 3.0]}
    found = bounds(samples, {"ttft_s": {"p90": 5.0}, "tpot_s": {"p90": 5.0}}, 0.9)
    assert found[0].upper == pytest.approx(confidence_bounds([1.0, 2.0, 3.0], 0.95)[2])


def test_judge_separates_feasible_undecided_and_infeasible() -> None:
    def one(lower: float, upper: float) -> list[Bound]:
        return [Bound("ttft_s", "p90", 1.0, (lower + upper) / 2, lower, upper)]

    assert judge(one(0.5, 0.9)) is Verdict.FEASIBLE
    assert judge(one(0.9, 1.1)) is Verdict.UNDECIDED
    assert judge(one(1.1, 1.3)) is Verdict.INFEASIBLE


def test_cli_goodput_prints_the_result_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump(queue_config(requests=101, process="uniform", slo_ttft_s=0.02)))
    assert main(["goodput", str(path), "--replications", "2", "--tolerance", "0.01", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["goodput_rps"] == pytest.approx(101.12, rel=0.01)
    assert data["confidence"] == 0.9 and data["replications"] == 2
    assert data["points"][0]["verdict"] == "feasible"
    assert main(["goodput", str(path), "--replications", "2", "--tolerance", "0.05"]) == 0
    assert "goodput:" in capsys.readouterr().out
