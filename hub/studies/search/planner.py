"""Branch and bound over deployments: the top rows of an exhaustive search for a fraction of its runs.

Main names: :func:`search_bounded` (what ``cosim search`` runs unless ``--exhaustive``),
:func:`capacity_rps` (the step model's guess at a deployment's sustainable rate) and
:func:`run_task` (one unit of work, on any executor).

Every deployment's result is the exhaustive search's own: its goodput search
(:func:`.goodput.goodput`) is *replayed* (:func:`.goodput.replay`) against the
replications run so far, so it makes the same decisions on the same verdicts,
and a row is final only when the replay finishes. What changes is the order in
which rates are simulated, and which deployments are never finished:

1. **Probe.** One task per deployment runs T_min, guesses its sustainable rate from the step
   model (:func:`capacity_rps`) and simulates the bracket rate (:func:`.goodput.ladder`) at or
   above the guess. High rates are cheap to simulate (few, large steps); the bracket's low
   rates, one request at a time, are the expensive ones.
2. **Bound from above.** A *conditional* replay takes the bracket's untested lower rates as
   feasible, so its bisection can run before them; its upper end bounds the real goodput
   whatever those rates turn out to be (see :func:`.goodput.replay`). An infeasible bracket rate
   bounds it too (the bracket stops at or below the first one).
3. **Verify from below.** Once its conditional bisection is done, a deployment whose upper bound
   ranks among the best ``keep`` has its lower rates simulated; the real replay then bounds the
   goodput from below.
4. **Prune** (:func:`.prune.prunable`): a deployment that ``keep`` others beat for sure is not in
   the top ``keep``; it stops, with its bounds.

Steps 2 and 3 go best first: only the deployments whose upper bounds rank among the best
``keep`` are simulated in a round, so that the others are mostly pruned on their probes.

Work runs in rounds (every task of a round, then the decisions), so which
deployments are pruned depends only on seeded results: the rows are the same
serially, on a process pool and on Ray.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config.loading import parse_config
from ...config.resolve import kv_capacity_blocks, resolve_hardware, resolve_model
from ...errors import CosimError, ScenarioError
from . import scenario as sc
from .executors import Checkpoint, Row, base_row, result_row
from .goodput import judge_runs, ladder, prepare, replay
from .pool import worker_pool
from .prune import mark_pruned, prunable
from .results import GoodputResult
from .stats import Verdict

log = logging.getLogger(__name__)

Memo = dict[float, list[dict[str, float]]]
Runner = Callable[[list[Row]], list[Row]]


def capacity_rps(data: Mapping[str, Any], base_dir: Path, t_min: float) -> float:
    """A guess at the highest rate a deployment sustains, from the step model: each client that decodes
    runs as many requests at once as its batch and KV cache allow (``max_num_seqs``, KV tokens over a
    mean request's), each taking about T_min. Only orders the work; no result depends on it."""
    config = parse_config(data)
    specs = sc.single_request(data, base_dir)["workload"]
    per_request = specs["input_tokens"]["value"] + specs["output_tokens"]["value"]
    total = 0.0
    for i, client in enumerate(config.clients):
        if client.kind != "llm" or client.role == "prefill" or not client.model:
            continue
        model = resolve_model(config, client.model)
        blocks = kv_capacity_blocks(client, model, resolve_hardware(config, client, f"clients[{i}]"), f"clients[{i}]")
        batch = min(client.scheduler.max_num_seqs, max(1, blocks * client.scheduler.block_size // per_request))
        total += batch / t_min
    return total


def run_task(task: Row) -> Row:
    """One unit of work: ``probe`` (T_min, the capacity guess, the bracket rates around it) or ``seed``
    (one replication at one rate). Returns the replications by rate, or the deployment's status."""
    started = time.perf_counter()
    data, base_dir = task["data"], Path(task["base_dir"])
    out: Row = {"key": task["key"], "runs": {}}
    try:
        rates: list[float] = []
        if task["kind"] == "probe":
            out["t_min"] = t_min = sc.single_request_s(data, base_dir)
            rungs = ladder(t_min, tolerance=task["tolerance"], max_doublings=task["max_doublings"])[1:]
            guess = capacity_rps(data, base_dir, t_min)
            top = next((j for j, r in enumerate(rungs) if r >= guess), len(rungs) - 1)
            rates = rungs[top:top + 1]
        for rate in rates:
            scenario = sc.with_rate(data, rate, trace_rate=task["trace_rate"])
            replicator = sc.Replicator(scenario, base_dir)
            out["runs"][rate] = [replicator(seed, tuple(task["stop_on"])) for seed in task["seeds"]]
        if task["kind"] == "seed":  # one replication of a rate (the others run beside it)
            scenario = sc.with_rate(data, task["rate"], trace_rate=task["trace_rate"])
            out["seed"] = seed = task["seed"]
            out["runs"] = {task["rate"]: [sc.Replicator(scenario, base_dir)(seed, tuple(task["stop_on"]))]}
    except ScenarioError as err:
        out.update(status="infeasible", reason=str(err))
    except CosimError as err:
        out.update(status="error", reason=str(err))
    out["wall_s"] = time.perf_counter() - started
    return out


@dataclass
class _Deployment:
    """One deployment's search: its job, the scenario it varies, and the replications run so far."""

    job: Row
    data: dict[str, Any]
    base_dir: Path
    trace_rate: float | None
    seeds: list[int]
    t_min: float | None = None
    memo: Memo = field(default_factory=dict)
    wall_s: float = 0.0
    row: Row | None = None  # final (finished, infeasible, error) or pruned
    lower: float = 0.0
    upper: float = math.inf
    needed: set[float] = field(default_factory=set)  # rates the conditional replay needs now
    verify: set[float] = field(default_factory=set)  # rates the real replay needs (the bracket's lower ones)
    pending: dict[float, dict[int, dict[str, float]]] = field(default_factory=dict)  # a rate's runs by seed
    result: GoodputResult | None = None


def _judge(dep: _Deployment, settings: Mapping[str, Any]) -> None:
    """Replays the deployment's search against its replications: bounds, and what it needs next."""
    assert dep.t_min is not None
    common = {"t_min": dep.t_min, "seeds": dep.seeds, "confidence": settings["confidence"],
              "tolerance": settings["tolerance"], "refine_upper": settings["refine_upper"],
              "max_runs": settings["max_runs"], "max_doublings": settings["max_doublings"]}
    real = replay(dep.data, memo=dep.memo, **common)
    dep.result, dep.lower = real.result, real.lower_rps
    if real.needed is None:
        dep.row = result_row(dep.job, real.result, dep.wall_s)
        return
    rates = ladder(dep.t_min, tolerance=settings["tolerance"], max_doublings=settings["max_doublings"])
    tested = [r for r in rates if r in dep.memo]
    below = frozenset(r for r in rates if r not in dep.memo and tested and r < tested[-1])
    conditional = replay(dep.data, memo=dep.memo, assume_feasible=below, **common)
    # A failing bracket rate bounds the goodput too: the bracket stops there or below (goodput.ladder).
    failed = [r for r in tested if judge_runs(dep.data["slo"], r, dep.memo[r], settings["confidence"]).verdict
              is Verdict.INFEASIBLE]
    dep.upper = min(real.upper_rps, conditional.upper_rps, *failed[:1])
    dep.needed = {conditional.needed} if conditional.needed is not None else set()
    dep.verify = set(below) | {real.needed}


def _worth(dep: _Deployment, rate: float, objective: str) -> float:
    per_hour = float(dep.job["cost_per_hour_usd"])
    if objective == "goodput":
        return rate
    if per_hour <= 0:
        return 0.0
    scale = float(dep.job["mean_output_tokens"]) if objective == "tokens_per_usd" else 1.0
    return rate * scale * 3600 / per_hour


def _bound_row(dep: _Deployment) -> Row:
    """A live deployment's row for :func:`.prune.prunable`: its bounds as a paused row."""
    assert dep.result is not None
    return {**base_row(dep.job), "goodput_rps": dep.lower, "paused": True,
            "goodput_upper_rps": dep.upper if math.isfinite(dep.upper) else None}


def _plan(deps: list[_Deployment], objective: str, keep: int, settings: Mapping[str, Any]) -> list[Row]:
    """The next round's tasks; prunes what cannot reach the top ``keep`` first."""
    live = [d for d in deps if d.row is None and d.t_min is not None]
    rows = [d.row for d in deps if d.row is not None] + [_bound_row(d) for d in live]
    pruned = prunable(rows, objective, keep, live[0].job["mean_output_tokens"] if live else 0.0)
    for dep in live:
        if dep.job["key"] in pruned:
            # Its bounds, and every simulation it took (the probes and the conditional bisection's too).
            bounds = {"goodput_rps": dep.lower, "goodput_upper_rps": dep.upper if math.isfinite(dep.upper) else None,
                      "runs": 1 + sum(len(runs) for runs in dep.memo.values())}
            dep.row = mark_pruned({**_state(dep), **bounds}, pruned[dep.job["key"]], keep, objective)
    live = [d for d in live if d.row is None]
    # Verify from below the deployments that may rank among the best `keep` (by their upper bounds).
    best = sorted(live, key=lambda d: (-_worth(d, d.upper, objective), d.job["key"]))
    finals = sorted((_worth_row(r, objective) for r in rows if r.get("status") == "ok" and not r.get("paused")),
                    reverse=True)
    tasks = [_probe(d, settings) for d in deps if d.row is None and d.t_min is None]
    for dep in live:
        ahead = sum(1 for v in finals if v > _worth(dep, dep.upper, objective)) + best.index(dep)
        if ahead >= keep:
            # Best first: `keep` others may be worth more; their searches go on first, and theirs may
            # prune this one unsimulated (or lower their bounds below it, when it goes on).
            continue
        # The lower rates are the costly ones: they wait until the cheap conditional bisection has
        # brought the upper bound down as far as it goes, which may drop the deployment from the top.
        rates = set(dep.needed) or (dep.verify if math.isfinite(dep.upper) else set())
        tasks += [t for r in sorted(rates - dep.memo.keys()) for t in _rate_tasks(dep, r, settings)]
    if not tasks and best:  # every live search waits on its lower rates: the most promising goes on
        tasks = [t for r in sorted(best[0].verify - best[0].memo.keys()) for t in _rate_tasks(best[0], r, settings)]
    return tasks


def _worth_row(row: Row, objective: str) -> float:
    key = {"goodput": "goodput_rps"}.get(objective, objective)
    return float(row.get(key) or 0.0)


def _common(dep: _Deployment, settings: Mapping[str, Any]) -> Row:
    return {"key": dep.job["key"], "data": dep.data, "base_dir": str(dep.base_dir), "trace_rate": dep.trace_rate,
            "seeds": dep.seeds, "tolerance": settings["tolerance"], "max_doublings": settings["max_doublings"],
            # one replication's verdict is its run's: that run may stop once it fails (goodput's early_stop)
            "stop_on": ["fail"] if len(dep.seeds) == 1 else []}


def _probe(dep: _Deployment, settings: Mapping[str, Any]) -> Row:
    return {**_common(dep, settings), "kind": "probe"}


def _rate_tasks(dep: _Deployment, rate: float, settings: Mapping[str, Any]) -> list[Row]:
    """A rate's replications, a task each (so that one rate's runs spread over the workers)."""
    return [{**_common(dep, settings), "kind": "seed", "rate": rate, "seed": seed} for seed in dep.seeds]


def _apply(dep: _Deployment, out: Row) -> None:
    dep.wall_s += out["wall_s"]
    if "status" in out:
        dep.row = dep.row or {**base_row(dep.job), "status": out["status"], "reason": out["reason"]}
        return
    if "t_min" in out:
        dep.t_min = out["t_min"]
    if "seed" not in out:
        dep.memo.update(out["runs"])
        return
    for rate, (run,) in out["runs"].items():  # a rate's runs, in the order of the seeds, once all are in
        dep.pending.setdefault(rate, {})[out["seed"]] = run
        if len(dep.pending[rate]) == len(dep.seeds):
            by_seed = dep.pending.pop(rate)
            dep.memo[rate] = [by_seed[seed] for seed in dep.seeds]


def _state(dep: _Deployment) -> Row:
    """The row the checkpoint keeps for a live deployment: its replications so far (goodput's ``state``)."""
    assert dep.t_min is not None and dep.result is not None
    state = {"t_min": dep.t_min, "num_runs": dep.result.num_runs, "seeds": dep.seeds,
             "rates": [{"rate_per_s": r, "runs": dep.memo[r]} for r in sorted(dep.memo)]}
    return {**result_row(dep.job, dep.result, dep.wall_s), "paused": True, "state": state}


def search_bounded(jobs: Sequence[Row], checkpoint: Checkpoint, *, objective: str, keep: int,
                   workers: int = 1, ray_address: str | None = None) -> tuple[list[Row], int, set[str]]:
    """Every job's row, the top ``keep`` exactly as the exhaustive search's, the rest pruned where they
    cannot reach it; how many simulations ran, and the keys of the deployments simulated. Resumes from
    (and writes) ``checkpoint``."""
    deps: list[_Deployment] = []
    for job in jobs:
        data, folder, trace_rate, seeds = prepare(job["scenario"], base_dir=job["base_dir"],
                                                  requests=job["settings"]["requests"],
                                                  replications=job["settings"]["replications"])
        dep = _Deployment(job, data, folder, trace_rate, seeds)
        known = checkpoint.rows.get(job["key"])
        if job["infeasible"]:
            dep.row = {**base_row(job), "status": "infeasible", "reason": job["infeasible"]}
        elif known is not None and not known.get("paused"):
            dep.row = known
        elif known is not None and known.get("state"):
            dep.t_min, dep.wall_s = float(known["state"]["t_min"]), float(known.get("wall_s") or 0.0)
            dep.memo = {float(e["rate_per_s"]): e["runs"] for e in known["state"]["rates"]}
        deps.append(dep)
    settings = {**jobs[0]["settings"], "max_doublings": 12} if jobs else {}
    simulations, evaluated = 0, set()
    with _runner(workers, ray_address) as run_all:
        while True:
            for dep in deps:
                if dep.row is None and dep.t_min is not None:
                    _judge(dep, settings)
            tasks = _plan(deps, objective, keep, settings)
            if not tasks:
                break
            by_key = {d.job["key"]: d for d in deps}
            outs = run_all(tasks)
            for out in outs:  # in task order: the same decisions on every executor
                simulations += sum(len(runs) for runs in out["runs"].values()) + ("t_min" in out)
                _apply(by_key[out["key"]], out)
                evaluated.add(out["key"])
            for key in dict.fromkeys(out["key"] for out in outs):
                dep = by_key[key]
                if dep.row is None:
                    _judge(dep, settings)
                checkpoint.add(dep.row if dep.row is not None else _state(dep))
            log.info("round: %d tasks; %d deployments final or pruned of %d", len(tasks),
                     sum(d.row is not None for d in deps), len(deps))
    for dep in deps:
        assert dep.row is not None
        if dep.row.get("pruned") or checkpoint.rows.get(dep.job["key"]) != dep.row:
            checkpoint.add(dep.row)
    return [d.row for d in deps if d.row is not None], simulations, evaluated


@contextmanager
def _runner(workers: int, ray_address: str | None) -> Iterator[Runner]:
    """Runs a round's tasks and returns their results in task order: here, on a process pool kept for
    every round, or as Ray tasks. Costlier tasks (lower rates) start first."""
    def order(tasks: list[Row]) -> list[int]:
        return sorted(range(len(tasks)), key=lambda i: (tasks[i]["kind"] != "probe", tasks[i].get("rate", 0.0)))

    if ray_address:
        from .executors import ray_remote
        remote = ray_remote(run_task, ray_address)

        def on_ray(tasks: list[Row]) -> list[Row]:
            import ray  # type: ignore[import-not-found,import-untyped,unused-ignore]
            refs = {i: remote.remote(tasks[i]) for i in order(tasks)}
            return [ray.get(refs[i]) for i in range(len(tasks))]
        yield on_ray
    elif workers <= 1:
        yield lambda tasks: [run_task(t) for t in tasks]
    else:
        with worker_pool(workers) as pool:
            def on_pool(tasks: list[Row]) -> list[Row]:
                futures = {i: pool.submit(run_task, tasks[i]) for i in order(tasks)}
                return [futures[i].result() for i in range(len(tasks))]
            yield on_pool
