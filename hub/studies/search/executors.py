"""Evaluating many deployments: serially, on a local process pool, or as Ray tasks.

Main names: :func:`evaluate` (one deployment -> one result row; a pure
function of its payload, so every executor gives the same rows),
:func:`run_sweep` (the executors, the progress bar, the checkpoint), :func:`unordered` (the
executors alone, which ``cosim sweep`` shares) and
:class:`Checkpoint` (results appended to ``results.jsonl`` as they finish,
keyed by the candidate's hash, so an interrupted sweep resumes where it was).

Ray is optional (``pip install 'cosim[ray]'``) and imported only when asked for.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs in the venv

from ...errors import CosimError, ScenarioError
from .goodput import goodput
from .pool import worker_pool
from .results import GoodputResult
from .space import Candidate

log = logging.getLogger(__name__)

Row = dict[str, Any]


def payload(candidate: Candidate, base_dir: Path, settings: dict[str, Any], mean_output_tokens: float) -> Row:
    """Everything :func:`evaluate` needs, as plain data (pickled to workers and Ray tasks)."""
    return {"key": candidate.key, "label": candidate.label, "facts": candidate.facts,
            "scenario": candidate.scenario, "base_dir": str(base_dir), "settings": settings,
            "cost_per_hour_usd": candidate.cost_per_hour_usd, "infeasible": candidate.infeasible,
            "mean_output_tokens": mean_output_tokens, "pause_after": None, "state": None}


def done(job: Row, checkpoint: Checkpoint) -> bool:
    """Whether the checkpoint already has what ``job`` would compute: a finished row, or for a job
    that pauses, any row at least as far (its goodput search's runs so far)."""
    row = checkpoint.rows.get(job["key"])
    if row is None:
        return False
    if not row.get("paused"):
        return True
    return job["pause_after"] is not None and row["runs"] > (job["state"] or {}).get("num_runs", 0)


def evaluate(job: Row) -> Row:
    """The goodput of one deployment, what it is worth per dollar, and its output tokens per joule
    at that rate (None when its devices have no power figure).

    A job with ``pause_after`` set pauses its goodput search (see :func:`.goodput.goodput`): its row
    is ``paused``, with the bounds ``goodput_rps`` <= goodput < ``goodput_upper_rps`` and the
    ``state`` a later job (``job["state"]``) resumes from; a search that ends first gives a final row.

    Status ``ok``; ``infeasible`` (does not fit in memory, or the backend
    rejects the cluster) with the reason; or ``error`` with the message.
    """
    row = base_row(job)
    if job["infeasible"]:
        return {**row, "status": "infeasible", "reason": job["infeasible"]}
    settings, started = job["settings"], time.perf_counter()
    try:
        result = goodput(job["scenario"], base_dir=job["base_dir"], confidence=settings["confidence"],
                         replications=settings["replications"], tolerance=settings["tolerance"],
                         requests=settings["requests"], max_runs=settings["max_runs"],
                         refine_upper=settings["refine_upper"], pause_after=job.get("pause_after"),
                         state=job.get("state"))
    except ScenarioError as err:
        return {**row, "status": "infeasible", "reason": str(err)}
    except CosimError as err:
        return {**row, "status": "error", "reason": str(err)}
    return result_row(job, result, time.perf_counter() - started + job.get("wall_s", 0.0))


def base_row(job: Row) -> Row:
    """The columns of a deployment's row that come from the job alone."""
    return {"key": job["key"], "label": job["label"], **job["facts"],
            "cost_per_hour_usd": job["cost_per_hour_usd"], "status": "ok", "reason": ""}


def result_row(job: Row, result: GoodputResult, wall_s: float) -> Row:
    """A deployment's row from its goodput search (``paused``, with its bounds and ``state``, if the
    search paused)."""
    row = base_row(job)
    upper = result.upper_bound_rps if result.paused else result.interval_rps[1]
    per_hour = job["cost_per_hour_usd"]
    rate = result.goodput_rps
    row.update(goodput_rps=rate, goodput_upper_rps=upper if upper != float("inf") else None,
               goodput_estimate_rps=result.estimate_rps,
               goodput_per_usd=rate * 3600 / per_hour if per_hour > 0 else None,
               tokens_per_usd=rate * job["mean_output_tokens"] * 3600 / per_hour if per_hour > 0 else None,
               tokens_per_j=result.tokens_per_j,
               single_request_s=result.single_request_s, runs=result.num_runs, reason=result.note,
               wall_s=round(wall_s, 3))
    if result.paused:
        row.update(paused=True, state=result.state)
    return row


class Checkpoint:
    """Rows finished so far, appended to a JSONL file one line each (a torn last line is ignored)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, Row] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    log.warning("%s: skipping a torn line (an interrupted write)", path)
                    continue
                self.rows[row["key"]] = row

    def add(self, row: Row) -> None:
        """Records a finished row durably (append + flush)."""
        self.rows[row["key"]] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(json.dumps(row, sort_keys=True) + "\n")
            out.flush()


def unordered(fn: Callable[[Row], Row], jobs: Sequence[Row], *, workers: int = 1,
              ray_address: str | None = None) -> Iterator[Row]:
    """``fn`` of each job, as they finish: in this process (``workers`` 1), on a pool of ``workers`` local
    processes, or as Ray tasks on the cluster at ``ray_address`` (see :func:`ray_remote`). ``fn`` is a
    module-level function of plain data, so that it pickles to workers and tasks."""
    return _ray(fn, jobs, ray_address) if ray_address else _local(fn, jobs, workers)


def _local(fn: Callable[[Row], Row], jobs: Sequence[Row], workers: int) -> Iterator[Row]:
    if workers <= 1:
        yield from map(fn, jobs)
        return
    with worker_pool(workers) as pool:
        pending: set[Future[Row]] = {pool.submit(fn, job) for job in jobs}
        while pending:  # an interruption here, or where the rows are consumed, stops the workers
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()


def ray_remote(fn: Callable[[Row], Row], address: str) -> Any:
    """``fn`` as a Ray task of one CPU, on the cluster at ``address`` (``local``: start Ray here; a Ray
    session already initialized is used as it is)."""
    try:
        import ray  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise ScenarioError("--ray", "Ray is not installed; pip install 'cosim[ray]' (or ray) to run sweeps "
                                     "on a Ray cluster") from None
    if not ray.is_initialized():
        ray.init(address=None if address == "local" else address, log_to_driver=False)
    return ray.remote(num_cpus=1)(fn)


def _ray(fn: Callable[[Row], Row], jobs: Sequence[Row], address: str) -> Iterator[Row]:
    task = ray_remote(fn, address)  # says so when Ray is not installed
    import ray  # type: ignore[import-not-found,import-untyped,unused-ignore]

    pending = [task.remote(job) for job in jobs]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield ray.get(ref)
    finally:
        for ref in pending:
            ray.cancel(ref)


def run_sweep(jobs: Sequence[Row], checkpoint: Checkpoint, *, workers: int = 1, ray_address: str | None = None,
              progress: bool | None = None, on_row: Callable[[Row], None] | None = None) -> list[Row]:
    """Evaluates the jobs the checkpoint lacks; returns every job's row, in job order.

    Args:
        jobs: payloads from :func:`payload`.
        checkpoint: rows already finished (skipped) and where new ones go.
        workers: local processes (1: in this process).
        ray_address: run as Ray tasks on this cluster (``auto``, ``host:port``, ``ray://...``; ``local``
            starts one here); a Ray session already initialized is used as it is.
        progress: show a bar with ETA (None: when stderr is a terminal).
        on_row: called with each new row.
    """
    todo = [job for job in jobs if not done(job, checkpoint)]
    if len(todo) < len(jobs):
        log.info("resuming: %d of %d deployments already evaluated", len(jobs) - len(todo), len(jobs))
    # Infeasible ones need no simulation: record them here, without a worker.
    for job in [j for j in todo if j["infeasible"]]:
        checkpoint.add(evaluate(job))
    todo = [job for job in todo if not job["infeasible"]]
    # tqdm's disable=None: draw only when stderr is a terminal.
    with tqdm(total=len(jobs), initial=len(jobs) - len(todo), desc="deployments", unit="cfg",
              disable=None if progress is None else not progress, leave=False, dynamic_ncols=True) as bar:
        for row in unordered(evaluate, todo, workers=workers, ray_address=ray_address):
            checkpoint.add(row)
            bar.update(1)
            if on_row:
                on_row(row)
    return [checkpoint.rows[job["key"]] for job in jobs]
