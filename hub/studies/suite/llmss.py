"""LLMServingSim's vLLM 0.19 runs in the suite: replayed (:mod:`cosim.hub.studies.replay`) and scored.

A run is a scenario file (``validation_runs/llmservingsim/scenarios/<id>.json``) and, where its
outcomes are public, vLLM's per-request ``requests.jsonl``; arrivals are then the measured queue
entries. These runs were driven in-process (no HTTP): TTFT, TPOT and E2E are engine-side, which is
what cosim's figures are. ``published.json`` beside the scenarios holds LLMServingSim's own
published errors on them, as bounds.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ...errors import ScenarioError
from ..replay import replay
from ..replay.outcomes import STATISTICS, statistics
from .runs import RunEntry
from .table import Row

#: What times the steps, by --backend: the run's own profile bundle, or aiconfigurator's tables.
BACKENDS = ("profile", "aiconfigurator")
_METRICS = (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("e2e_s", "e2e"))
_SHOWN = tuple(s for s in STATISTICS if s != "p50")  # mean, p90, p99: as the H100 benchmark's table


def _bounds(entry: RunEntry) -> dict[str, dict[str, str]]:
    """LLMServingSim's published error bounds that apply to this run, by metric."""
    path = entry.file.parent.parent / "published.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if entry.file.stem not in data.get("applies_to", []):
        return {}
    by_metric: dict[str, dict[str, str]] = {}
    for simulator, bounds in data.get("bounds", {}).items():
        for metric, text in bounds.items():
            by_metric.setdefault(metric, {})[simulator] = str(text)
    return by_metric


def run_and_score(entry: RunEntry, *, backend: str) -> list[Row]:
    """Replays the run on ``backend`` (in-process) and returns its rows: every metric with the
    measured figure where the outcomes are public, cosim's alone where they are held out.

    Raises:
        ScenarioError: an unknown backend, or a scenario the replay refuses.
    """
    if backend not in BACKENDS:
        raise ScenarioError("--backend", f"{backend!r}: an LLMServingSim run replays on one of {list(BACKENDS)}")
    with tempfile.TemporaryDirectory(prefix="cosim-suite-") as folder:
        result = replay(entry.file, measured=entry.measured, output_dir=Path(folder) / entry.id, plots=False,
                        backend=backend, in_process=True)
    simulated = statistics(result.simulated)
    bounds = _bounds(entry)
    rows = []
    for key, name in _METRICS:
        for stat in _SHOWN:
            metric = f"{name}_{stat}"
            measured = result.comparison[key][stat]["measured"] * 1e3 if result.comparison else None
            rows.append(Row(run=entry.id, scope="run", metric=metric, unit="ms", measured=measured,
                            cosim=simulated[key][stat] * 1e3, bounds=bounds.get(metric, {})))
    return rows
