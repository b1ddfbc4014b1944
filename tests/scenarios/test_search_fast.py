"""Fast goodput and search: early stop keeps every run's SLO verdict, pruning keeps the top rows, a paused
goodput search resumes to the uninterrupted result."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import cosim
from cosim.hub.metrics.stats import request_metrics, statistic
from cosim.hub.studies.runner import run
from cosim.hub.studies.search import goodput
from cosim.hub.studies.search.early_stop import SloWatch, StopRun
from cosim.hub.studies.search.goodput import ladder, prepare, replay
from tests.paths import EXAMPLES

from .test_search import SPACE, ranking

# One client, requests of varied size, an SLO near its capacity (verdicts of both kinds across the rates).
SCENARIO: dict[str, Any] = {
    "seed": 1,
    "models": {"m": {"preset": "meta-llama/Llama-2-13b-hf"}},
    "hardware": {"h": {"preset": "L40S"}},
    "backends": {"lin": {"python": "cosim.adapters.sdk.testing:LinearBackend",
                         "options": {"step_ns": 5_000_000, "per_seq_ns": 100_000}}},
    "clients": [{"name": "c0", "model": "m", "backend": "lin", "hardware": {"device": "h"},
                 "scheduler": {"max_num_seqs": 8}}],
    "workload": {"requests": 60, "arrival": {"process": "poisson", "rate_per_s": 10},
                 "input_tokens": {"dist": "lognormal", "mean": 64, "sigma": 0.5, "max": 512},
                 "output_tokens": {"dist": "lognormal", "mean": 12, "sigma": 0.7, "min": 1, "max": 64}},
    "slo": {"ttft_s": {"p90": 0.05, "p50": 0.02}, "tpot_s": {"mean": 0.02}, "e2e_s": {"max": 1.5}},
}


def full_verdict(scenario: dict[str, Any]) -> tuple[bool, dict[str, float]]:
    """The SLO verdict of the whole run, from its summary, and each statistic."""
    slo = run(scenario).summary["slo"]
    return all(e["met"] for stats in slo.values() for e in stats.values()), {
        f"{m}.{s}": e["observed"] for m, stats in slo.items() for s, e in stats.items()}


@pytest.mark.parametrize("slo", [SCENARIO["slo"], {"ttft_s": {"p90": 0.05}}, {"ttft_s": {"p50": 0.03, "p99": 0.2}}])
def test_early_stop_verdict_is_the_full_runs_on_many_seeds_and_rates(slo: dict[str, Any]) -> None:
    stopped = decided = 0
    for rate in (5, 20, 40, 60, 90, 150):
        for seed in range(4):
            scenario = copy.deepcopy(SCENARIO)
            scenario.update(seed=seed, slo=slo)
            scenario["workload"]["arrival"]["rate_per_s"] = rate
            met, observed = full_verdict(scenario)
            watch = SloWatch(slo, scenario["workload"]["requests"])
            try:
                run(scenario, on_request=watch.add)
            except StopRun as stop:
                stopped += 1
                assert stop.passed == met, (rate, seed, observed)
                assert watch.done < scenario["workload"]["requests"]
            else:
                assert watch.verdict == met, (rate, seed, observed)
            decided += 1
            # The bounds contain the full run's statistic whenever the run stopped.
            for metric, stat, _ in watch.targets:
                lo, hi = watch.bounds(metric, stat)
                value = observed[f"{metric}.{stat}"] or 0.0
                assert lo <= value * (1 + 1e-8) and value <= hi * (1 + 1e-8)  # summary.json rounds to 9 digits
    assert 0 < stopped <= decided


def test_watch_bounds_match_numpy_once_every_request_is_known() -> None:
    result = run(SCENARIO)
    watch = SloWatch(SCENARIO["slo"], len(result.requests), stop_on=())
    for record in sorted(result.requests, key=lambda r: r.finish_ns):
        watch.add(record)
    metrics = request_metrics(list(result.requests))
    for metric, stat, _ in watch.targets:
        lo, hi = watch.bounds(metric, stat)
        expected = statistic(metrics.column(metric)[metrics.finished], stat)
        assert lo == pytest.approx(expected, rel=1e-12) and hi == pytest.approx(expected, rel=1e-12)


def test_one_replication_goodput_with_early_stop_equals_the_full_runs() -> None:
    fast = goodput(SCENARIO, replications=1, tolerance=0.1)
    full = goodput(SCENARIO, replications=1, tolerance=0.1, early_stop=False)
    assert (fast.goodput_rps, fast.interval_rps, fast.num_runs) == (full.goodput_rps, full.interval_rps, full.num_runs)
    assert [(p.rate_per_s, p.verdict) for p in fast.points] == [(p.rate_per_s, p.verdict) for p in full.points]
    assert fast.tokens_per_j == full.tokens_per_j


def test_a_paused_goodput_search_resumes_to_the_uninterrupted_result() -> None:
    whole = goodput(SCENARIO, replications=2, tolerance=0.05, refine_upper=False)
    part = goodput(SCENARIO, replications=2, tolerance=0.05, refine_upper=False, pause_after=0)
    assert part.paused and part.lower_bound_rps <= whole.goodput_rps < part.upper_bound_rps
    steps = 0
    while part.paused:
        part = goodput(SCENARIO, replications=2, tolerance=0.05, refine_upper=False, pause_after=1,
                       state=part.state)
        assert part.paused or part.to_dict() == whole.to_dict()
        if part.paused:
            assert part.lower_bound_rps <= whole.goodput_rps < part.upper_bound_rps
        steps += 1
    assert steps >= 2


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_pruned_search_ranks_the_top_rows_as_the_exhaustive_one(keep: int) -> None:
    exhaustive = cosim.search(SPACE, exhaustive=True)
    fast = cosim.search({**SPACE, "keep_top": keep})
    top = [r for r in exhaustive.rows if r["rank"] is not None][:keep]
    assert ranking(fast.rows[:keep]) == ranking(top)
    assert [r["runs"] for r in fast.rows[:keep]] == [r["runs"] for r in top]
    pruned = [r for r in fast.rows if r.get("pruned")]
    assert all(r["rank"] > keep and r["reason"].startswith("pruned:") for r in pruned)
    assert sum(r.get("runs") or 0 for r in fast.rows) <= sum(r.get("runs") or 0 for r in exhaustive.rows)
    if keep == 1:
        assert pruned  # this space prunes something at keep 1


def test_exhaustive_search_resumes_the_rounds_a_pruned_one_left(tmp_path: Any) -> None:
    pruned = cosim.search({**SPACE, "keep_top": 1}, output_dir=tmp_path)
    assert any(r.get("pruned") for r in pruned.rows)
    resumed = cosim.search(SPACE, output_dir=tmp_path, exhaustive=True)
    exhaustive = cosim.search(SPACE, exhaustive=True)
    assert ranking(resumed.rows) == ranking(exhaustive.rows)
    assert [r.get("runs") for r in resumed.rows] == [r.get("runs") for r in exhaustive.rows]
    assert np.isfinite([r["wall_s"] for r in resumed.rows if r["status"] == "ok"]).all()


def _memo(result: Any) -> dict[float, list[dict[str, float]]]:
    return {float(e["rate_per_s"]): e["runs"] for e in result.state["rates"]}


def test_replay_of_a_finished_search_is_that_search() -> None:
    """The planner's replay makes goodput's decisions: against all of a search's runs it ends where it ended."""
    data, _, _, seeds = prepare(SCENARIO, replications=2)
    full = goodput(SCENARIO, replications=2, tolerance=0.05, refine_upper=False)
    runs = goodput(SCENARIO, replications=2, tolerance=0.05, refine_upper=False, pause_after=0)
    memo = _memo(runs)
    while True:
        again = replay(data, t_min=full.single_request_s, memo=memo, seeds=seeds, confidence=0.9, tolerance=0.05)
        if again.needed is None:
            break
        assert again.lower_rps <= full.goodput_rps < again.upper_rps
        memo[again.needed] = _runs_at(again.needed, data, seeds)
    assert again.result.to_dict() == full.to_dict()
    assert again.lower_rps == again.upper_rps == full.goodput_rps


def _runs_at(rate: float, data: dict[str, Any], seeds: list[int]) -> list[dict[str, float]]:
    from cosim.hub.studies.search import scenario as sc
    replicator = sc.Replicator(sc.with_rate(data, rate), ".")
    return [replicator(seed) for seed in seeds]


@pytest.mark.parametrize("start", [1, 2, 3, 4])
def test_a_conditional_replay_bounds_the_goodput_from_above(start: int) -> None:
    """Bisecting above the bracket's lower rates before running them (taking them as feasible) never
    bounds the goodput below its true value, and ends in the true search when they are feasible."""
    full = goodput(SCENARIO, replications=2, tolerance=0.05, refine_upper=False)
    data, _, _, seeds = prepare(SCENARIO, replications=2)
    rungs = ladder(full.single_request_s, tolerance=0.05)
    known = {p.rate_per_s: _runs_at(p.rate_per_s, data, seeds) for p in full.points}
    first = rungs[start]
    memo = {r: runs for r, runs in known.items() if r >= first}
    assumed = frozenset(r for r in rungs if r < first)
    while True:
        step = replay(data, t_min=full.single_request_s, memo=memo, seeds=seeds, confidence=0.9, tolerance=0.05,
                      assume_feasible=assumed)
        assert full.goodput_rps < step.upper_rps or step.needed is None
        if step.needed is None:
            break
        memo[step.needed] = known.get(step.needed) or _runs_at(step.needed, data, seeds)
    if all(p.verdict.value == "feasible" for p in full.points if p.rate_per_s < first):
        assert step.result.goodput_rps == full.goodput_rps
        assert step.result.interval_rps == full.interval_rps


def test_replications_share_step_timings_and_get_the_same_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search's runs share step timings across runs (scenario.SHARED_TIMINGS): a later run asks
    the backend only for batches no earlier one timed, and every statistic is a run's own."""
    from cosim.hub.backends.inprocess import InProcessRuntimeClient
    from cosim.hub.studies.search import scenario as sc
    from cosim.hub.timing import cache as proxy
    data, _, _, seeds = prepare(SCENARIO, replications=2)
    shared = proxy.SharedTimings()
    predicted: list[int] = []
    predict_steps = InProcessRuntimeClient.predict_steps

    def counting(self: Any, session_id: str, batches: list[Any], **kwargs: Any) -> Any:
        predicted.append(len(batches))
        return predict_steps(self, session_id, batches, **kwargs)

    monkeypatch.setattr(InProcessRuntimeClient, "predict_steps", counting)
    monkeypatch.setattr(sc, "SHARED_TIMINGS", shared)
    together = [sc.Replicator(sc.with_rate(data, rate), ".")(seed) for rate in (2.0, 4.0) for seed in seeds]
    assert len(shared) == 1
    timed_together = sum(predicted)
    predicted.clear()
    monkeypatch.setattr(sc, "SHARED_TIMINGS", None)
    apart = [sc.Replicator(sc.with_rate(data, rate), ".")(seed) for rate in (2.0, 4.0) for seed in seeds]
    assert together == apart
    assert timed_together < 0.7 * sum(predicted)


@pytest.mark.parametrize("example, requests, extra", [
    ("quickstart.yaml", 60, {}),
    ("disaggregated.yaml", 60, {}),  # two clients' energy summed
    ("autoscaling.yaml", 1200, {}),  # replicas come and go: their lives, recorded first, bound their idle energy
    ("energy-batching.yaml", 60, {}),
    ("multistage/mist-code.yaml", 60, {}),  # a pipeline with a KV memory stage
    ("quickstart.yaml", 60, {"frontend": {"tokenizer_batch_wait_s": 0.002, "tokenize_s_per_token": 1e-6}}),
])
def test_a_search_judges_a_run_by_its_summary_figures(example: str, requests: int, extra: dict[str, Any]) -> None:
    """What a search's run reports (Simulation.judged, without the whole summary) is the summary's own:
    completed requests, the SLO block and the energy block, cleaned alike."""
    from cosim.hub.studies.search.scenario import as_mapping, backend_names, parse_config, started_backends
    from cosim.hub.studies.simulation import Simulation

    data, folder = as_mapping(EXAMPLES / example, overrides=[f"workload.requests={requests}"])
    config = parse_config(data | extra)
    with started_backends(config, backend_names(config), in_process=True) as backends:
        simulation = Simulation(config, folder, backends)
        assert simulation.run(progress=False) is None
        judged, summary = simulation.judged(), simulation.summarize(0.0)
        simulation.close()
    assert summary["slo"] and summary["requests"]["completed"] == requests
    assert judged == {"requests": {"completed": requests}, "slo": summary["slo"]} | (
        {"energy": summary["energy"]} if "energy" in summary else {})
