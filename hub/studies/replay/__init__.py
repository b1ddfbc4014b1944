"""Replaying measured vLLM serving runs (LLMServingSim's validation scenarios) in cosim.

:func:`replay` builds the config of a scenario file (:mod:`.scenario`), runs it
and writes the usual run folder; given the measured ``requests.jsonl`` it also
writes ``comparison.json`` and the replay plots (:mod:`.compare`, :mod:`.plots`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..provenance import check_run_folder
from ..runner import RunResult, run
from .outcomes import Outcomes, compare, format_comparison, format_predicted, load_measured, outcomes_from_records
from .scenario import ReplayScenario, build_config, load_scenario, scenario_summary

log = logging.getLogger(__name__)

__all__ = ["ReplayResult", "build_config", "compare", "format_comparison", "load_measured", "load_scenario",
           "replay"]


@dataclass
class ReplayResult:
    """A replay's run, its simulated outcomes and, with a measurement, the comparison."""

    scenario: ReplayScenario
    run: RunResult
    simulated: Outcomes
    comparison: dict[str, Any] | None

    def table(self) -> str:
        """The side-by-side table (or the predicted one without a measurement)."""
        return format_comparison(self.comparison) if self.comparison else format_predicted(self.simulated)


def _measured_trace(scenario: ReplayScenario, measured: Outcomes, folder: Path) -> Path:
    """The scenario's trace with arrivals at the measured queue entries (the engine's clock)."""
    rows = [json.loads(line) for line in scenario.trace.read_text().splitlines() if line.strip()]
    if len(rows) != len(measured.arrival_s):
        log.warning("trace has %d requests, measurement %d; keeping the trace's arrivals", len(rows),
                    len(measured.arrival_s))
        return scenario.trace
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "replay_trace.jsonl"
    with path.open("w") as handle:
        for row, arrival in zip(rows, measured.arrival_s):
            handle.write(json.dumps({**row, "arrival_time_ns": int(round(arrival * 1e9))}) + "\n")
    return path


def replay(scenario_file: str | Path, *, measured: str | Path | None = None, output_dir: str | Path | None = None,
           overrides: tuple[str, ...] = (), plots: bool = True, overwrite: bool = False,
           backend: str = "profile", in_process: bool = False) -> ReplayResult:
    """Replays one scenario file.

    Args:
        scenario_file: ``scenarios/<id>.json``; the paths it names resolve from its folder upwards.
        measured: vLLM's per-request ``requests.jsonl``; arrivals then follow its queue
            entries, and ``comparison.json`` is written.
        output_dir: run folder (none: nothing written).
        overrides: ``key=value`` config overrides, as ``cosim run --set``.
        plots: write plots.
        overwrite: replace the files of a run folder that exists and is not empty (else refused).
        backend: what times the steps: ``profile`` (the scenario's profile bundle) or ``aiconfigurator``.
        in_process: call the built-in backends in this thread, without gRPC (same results, faster).

    Raises:
        ScenarioError: unreadable scenario, trace, bundle or measurement; a taken run folder; an unknown backend.
    """
    scenario = load_scenario(scenario_file)
    out = Path(output_dir) if output_dir is not None else None
    if out is not None:
        check_run_folder(out, overwrite=overwrite)  # before the measured trace goes in
    measured_outcomes = load_measured(measured) if measured is not None else None
    trace = None
    if measured_outcomes is not None and out is not None:
        trace = _measured_trace(scenario, measured_outcomes, out)
    config = build_config(scenario, trace=trace, backend=backend)
    config["output"]["plots"] = plots
    result = run(config, overrides=overrides, output_dir=out, overwrite=True,  # checked above
                 in_process=in_process)
    simulated = outcomes_from_records(result.requests)
    comparison = None
    if measured_outcomes is not None:
        comparison = {"scenario": dict(scenario_summary(scenario)), **compare(simulated, measured_outcomes)}
    if out is not None:
        (out / "replay_config.json").write_text(json.dumps(config, indent=2))
        if comparison is not None:
            (out / "comparison.json").write_text(json.dumps(comparison, indent=2))
        if plots and measured_outcomes is not None:
            from .plots import plot_latency, plot_queue  # late: importing matplotlib takes 0.3 s

            (out / "plots").mkdir(exist_ok=True)
            plot_latency(simulated, measured_outcomes, out / "plots" / "replay_latency.png")
            timeseries = Path(str(measured)).parent / "timeseries.csv"
            if timeseries.is_file():
                plot_queue(out / "clients.csv", timeseries, out / "plots" / "replay_queue.png")
    return ReplayResult(scenario=scenario, run=result, simulated=simulated, comparison=comparison)

