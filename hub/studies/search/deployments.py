"""``cosim search``: rank the deployments of a space by goodput, per dollar or per joule.

Main names: :func:`search` (``cosim.search``) and :class:`SearchResult`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...config.loading import parse_config
from ...sim.workload import generate_requests
from .executors import Checkpoint, Row, payload, run_sweep
from .planner import search_bounded
from .prune import MONOTONE
from .report import rank, write_report
from .space import SearchSpace, enumerate_candidates, load_space

log = logging.getLogger(__name__)

CHECKPOINT = "results.jsonl"


@dataclass
class SearchResult:
    """What a search found.

    Attributes:
        rows: one dict per deployment in ranked order (the columns of results.csv): ``rank`` (None
            unless it has goodput), ``label``, ``status`` (ok, infeasible, error), ``reason``,
            ``goodput_rps`` and its interval's upper end, ``cost_per_hour_usd``, ``goodput_per_usd``
            (requests per dollar at the goodput rate), ``tokens_per_usd``, ``tokens_per_j`` (output
            tokens per joule at the goodput rate), the knobs, ``pareto``.
        objective: what ``rows`` is ranked by.
        output_dir: the folder with results.csv, results.md, pareto.png and results.jsonl, if any.
        num_evaluated: deployments simulated in this call (the rest came from the checkpoint or were infeasible).
        num_simulations: simulations this call ran (T_min runs included).
    """

    rows: list[dict[str, Any]]
    objective: str
    output_dir: Path | None = None
    num_evaluated: int = 0
    num_simulations: int = 0
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def best(self) -> dict[str, Any] | None:
        """The top-ranked deployment, if any has goodput."""
        return self.rows[0] if self.rows and self.rows[0]["rank"] == 1 else None

    @property
    def infeasible(self) -> list[dict[str, Any]]:
        """Deployments that could not run, each with its reason."""
        return [r for r in self.rows if r["status"] != "ok"]


def _mean_output_tokens(base: Mapping[str, Any], base_dir: Path) -> float:
    config = parse_config(base)
    specs = generate_requests(config.workload, np.random.default_rng(config.seed), base_dir=base_dir)
    return float(np.mean(specs.ints["output_tokens"]))


def search(space: str | Path | Mapping[str, Any] | SearchSpace, *, output_dir: str | Path | None = None,
           workers: int = 1, ray: str | None = None, progress: bool | None = False,
           resume: bool = True, exhaustive: bool = False) -> SearchResult:
    """Evaluates every deployment of a space and ranks them (``cosim search``).

    Args:
        space: a SPACE.yaml path, a mapping, or a parsed :class:`SearchSpace`.
        output_dir: folder for the table, plot and checkpoint (default: the space's ``output.dir``;
            none writes nothing and cannot resume).
        workers: local processes evaluating deployments in parallel (1: this process).
        ray: run the evaluations as Ray tasks: ``auto``, ``host:port``, ``ray://...``, or ``local`` to
            start Ray here; an already initialized Ray session is used as it is.
        progress: progress bar with ETA (None: when stderr is a terminal).
        resume: reuse rows in the folder's results.jsonl whose configuration hash matches.
        exhaustive: bisect every deployment to the tolerance; by default a deployment that cannot reach
            the space's ``keep_top`` best is pruned after its bracket (:mod:`.prune`): the top rows are the
            same, value for value, and the pruned ones show bounds.

    Returns:
        The ranked rows (the same whatever the executor: every evaluation is seeded).

    Raises:
        ScenarioError: the space or its base scenario is invalid.
    """
    parsed, folder = load_space(space)
    candidates, base_dir = enumerate_candidates(parsed, folder)
    out = output_dir if output_dir is not None else parsed.output.get("dir")
    out_dir = Path(out) if out is not None else None
    checkpoint_path = (out_dir / CHECKPOINT) if out_dir is not None else None
    if checkpoint_path is not None and not resume and checkpoint_path.exists():
        checkpoint_path.unlink()
    checkpoint = Checkpoint(checkpoint_path) if checkpoint_path is not None else _MemoryCheckpoint()
    mean_out = _mean_output_tokens(candidates[0].scenario, base_dir) if candidates else 0.0
    settings = parsed.goodput.model_dump()
    jobs = [payload(c, base_dir, settings, mean_out) for c in candidates]
    already = sum(1 for j in jobs if j["key"] in checkpoint.rows)
    log.info("%d deployments (%d infeasible in memory, %d from the checkpoint)", len(jobs),
             sum(1 for c in candidates if c.infeasible), already)
    simulated: set[str] = set()

    def count(row: dict[str, Any]) -> None:
        simulated.add(row["key"])

    keep = 0 if exhaustive else parsed.keep_top
    options: dict[str, Any] = {"workers": workers, "ray_address": ray, "progress": progress, "on_row": count}
    if keep <= 0 or parsed.objective not in MONOTONE:
        rows = run_sweep([_continued(job, checkpoint) for job in jobs], checkpoint, **options)
        simulations = sum(r.get("runs") or 0 for r in rows if r["key"] in simulated)
    else:
        rows, simulations, evaluated = search_bounded(jobs, checkpoint, objective=parsed.objective, keep=keep,
                                                      workers=workers, ray_address=ray)
        simulated.update(evaluated)
    ranked = rank([{k: v for k, v in row.items() if k not in ("state", "paused")} for row in rows],
                  parsed.objective)
    result = SearchResult(rows=ranked, objective=parsed.objective, output_dir=out_dir, num_evaluated=len(simulated),
                          num_simulations=simulations)
    if out_dir is not None:
        title = f"deployments ranked by {parsed.objective}"
        result.files = write_report(out_dir, ranked, title)
    return result


def _continued(job: Row, checkpoint: Checkpoint, pause_after: int | None = None) -> Row:
    """The job, resuming the goodput search its checkpoint row paused, if it did."""
    row = checkpoint.rows.get(job["key"])
    if row is not None and row.get("paused"):
        return {**job, "state": row["state"], "wall_s": row["wall_s"], "pause_after": pause_after}
    return {**job, "pause_after": pause_after}


class _MemoryCheckpoint(Checkpoint):
    """A checkpoint that keeps rows in memory only (no output folder)."""

    def __init__(self) -> None:
        self.path = Path()
        self.rows = {}

    def add(self, row: dict[str, Any]) -> None:
        self.rows[row["key"]] = row
