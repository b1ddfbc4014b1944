"""The validation suite: every real serving run cosim ships, rerun and scored (``cosim validate-runs``).

:func:`run_suite` runs the runs of the index (:mod:`.runs`; the data under
``hub/studies/validation_runs/``) on one backend, in-process, and returns a :class:`SuiteResult`:
the rows of the table (:mod:`.table`), how long each run took, and the runs left out (a backend a
run cannot use, or an error, with its message). The blis-h100 experiments are configs written
from their settings (:mod:`.blis`); LLMServingSim's runs are replays (:mod:`.llmss`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ...errors import CosimError, ScenarioError
from ..runner import run
from . import blis, llmss
from .runs import INDEX, RunEntry, load_index
from .table import Row, format_markdown, format_text, medians

__all__ = ["BACKEND_CHOICES", "Row", "SuiteResult", "format_markdown", "format_text", "medians", "run_suite",
           "select_runs"]

log = logging.getLogger(__name__)

#: --backend: ``auto`` is each run's own (an LLMServingSim run's profile bundle, a blis run's bare roofline).
BACKEND_CHOICES = ("auto", "roofline", "aiconfigurator", "profile")


@dataclass
class SuiteResult:
    """What a suite run gave: its rows, each run's wall and CPU time (s: this process's, which runs
    the simulation and the in-process backends), and the runs left out, with why."""

    backend: str
    fast: bool
    multi_turn: bool = False
    rows: list[Row] = field(default_factory=list)
    wall_s: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """The table, then each run's wall time and the runs left out."""
        chats = "as inference-perf v0.4.0 sends them (--multi-turn)" if self.multi_turn else \
            "each request its user's system prompt and question (the default; --multi-turn: as sent)"
        lines = [format_text(self.rows, backend=self.backend), f"H100 experiments' chats: {chats}", "",
                 "time per run (in-process; wall, CPU):"]
        lines += [f"  {run_id}: {wall:.1f} s, {self.cpu_s[run_id]:.1f} s CPU" for run_id, wall in self.wall_s.items()]
        lines += [f"  {run_id}: not run ({why})" for run_id, why in self.skipped.items()]
        return "\n".join(lines)


def select_runs(entries: Sequence[RunEntry], *, fast: bool, only: Sequence[str] = ()) -> list[RunEntry]:
    """The runs to run: those named (every one, unless ``only``), the fast subset with ``fast``.

    Raises:
        ScenarioError: ``only`` names a run the index does not have.
    """
    known = {e.id for e in entries}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise ScenarioError("--run", f"{unknown} not in the index; runs: {sorted(known)}")
    return [e for e in entries if (not only or e.id in only) and (e.fast or not fast)]


def _backend_for(entry: RunEntry, backend: str) -> tuple[str | None, str]:
    """The backend ``entry`` runs on for --backend ``backend``, or None and why it cannot."""
    own = blis.BACKENDS if entry.kind == "blis-h100" else llmss.BACKENDS
    if backend == "auto":
        return own[0], ""
    if backend not in own:
        return None, f"a {entry.kind} run runs on {' or '.join(own)}, not {backend}"
    return backend, ""


def _run_one(entry: RunEntry, backend: str, *, fast: bool, multi_turn: bool) -> list[Row]:
    if entry.kind == "llmservingsim":
        return llmss.run_and_score(entry, backend=backend)
    experiment = blis.load_experiment(entry.file)
    scale = entry.fast_scale if fast else 1.0
    config = blis.experiment_config(experiment, backend=backend, stage_scale=scale, multi_turn=multi_turn)
    result = run(config, base_dir=entry.file.parent, in_process=True)
    return blis.score(experiment, entry.id, result.summary, shortened=scale < 1.0)


def run_suite(*, backend: str = "auto", fast: bool = False, only: Sequence[str] = (), multi_turn: bool = False,
              on_run: Callable[[str, float], None] | None = None) -> SuiteResult:
    """Runs the index's runs (those named by ``only``, the fast subset with ``fast``) on ``backend``;
    ``multi_turn``: the H100 experiments' chats as inference-perf v0.4.0 sends them (see
    :func:`.blis.inference_perf_section`).

    A run that cannot use the backend, or that fails with a :class:`~cosim.hub.errors.CosimError`
    (a scenario the backend refuses: no tables for that GPU, ...), is left out with the reason;
    ``on_run`` is called with each finished run's id and wall time.

    Raises:
        ScenarioError: an unknown backend, a bad index, or ``only`` naming an unknown run.
    """
    if backend not in BACKEND_CHOICES:
        raise ScenarioError("--backend", f"{backend!r} is not one of {list(BACKEND_CHOICES)}")
    result = SuiteResult(backend=backend, fast=fast, multi_turn=multi_turn)
    for entry in select_runs(load_index(INDEX), fast=fast, only=only):
        chosen, why = _backend_for(entry, backend)
        if chosen is None:
            result.skipped[entry.id] = why
            continue
        start, cpu = time.perf_counter(), time.process_time()
        try:
            result.rows.extend(_run_one(entry, chosen, fast=fast, multi_turn=multi_turn))
        except CosimError as err:
            log.warning("run %s on %s failed: %s", entry.id, chosen, err)
            result.skipped[entry.id] = f"{chosen}: {err}"
            continue
        result.wall_s[entry.id] = time.perf_counter() - start
        result.cpu_s[entry.id] = time.process_time() - cpu
        if on_run is not None:
            on_run(entry.id, result.wall_s[entry.id])
    return result
