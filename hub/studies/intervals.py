"""Prediction intervals (``cosim run --intervals``, ``output.intervals``): a run's reruns at the
edges of the step error its backends declare, and summary.json's ``intervals`` from them.

The runs share the run's seed, so the workload, the routing and every draw are the same; only the
step durations of the sessions whose backend declared a step error differ (scaled in the timing
layer, :class:`cosim.hub.timing.cache.RuntimeSessionProxy`). docs/intervals.md says what the
interval is and is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..backends import BackendClient
from ..config.scenario import ScenarioConfig
from ..metrics.intervals import intervals_block
from ..timing.step_error import EDGES
from .interrupts import RunStop
from .simulation import Simulation


def run_intervals(scenario: ScenarioConfig, base_dir: Path, backends: Mapping[str, BackendClient],
                  nominal: Simulation, summary: Mapping[str, Any], stop: RunStop | None = None) -> dict[str, Any]:
    """The ``intervals`` block of a finished run (``nominal``, whose summary is ``summary``): reruns
    it at the low and the high edge, on the same backends, unless no backend declared a step error.
    A rerun that stops early leaves the block without intervals, saying why; ``stop`` stops a rerun
    as it does the run (Simulation.run)."""
    bands = {client: None if band is None else {"low": band.low, "high": band.high, "basis": band.basis}
             for client, band in nominal.runtime.step_errors.items()}
    if all(band is None for band in bands.values()):
        return intervals_block(summary, [], bands)
    edges = []
    for edge in EDGES:
        simulation = Simulation(scenario, base_dir, backends, step_edge=edge)
        error = simulation.run(progress=False, stop=stop)
        if error is not None:
            return {**intervals_block(summary, [], bands), "error": f"the rerun at the {edge} edge stopped: {error}"}
        edges.append(simulation.summarize(0.0))
    return intervals_block(summary, edges, bands)
