"""``cosim compare``: run folders side by side.

Main names: :func:`compare` (``cosim.compare``), :func:`load_run` and
:func:`format_comparison`. Reads each folder's ``summary.json`` and
``requests.csv`` (and the SLO of its ``config.yaml``, when it has one); writes
``compare.csv`` (a row per metric, a column per run), the overlaid CDFs of
:func:`~cosim.hub.metrics.comparison_plots.plot_overlaid_cdfs` and ``report.html`` (both on one page,
:mod:`~cosim.hub.studies.study_report`) into the output folder.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..errors import ScenarioError
from ..metrics.run_folder import require_complete
from .key_metrics import METRIC_ROWS, key_metrics
from .study_report import write_compare_report

COMPARE_CSV = "compare.csv"
CDF_METRICS = ("ttft_s", "tpot_s", "e2e_s")
@dataclass
class RunFolder:
    """What :func:`compare` reads of one run folder."""

    label: str
    path: Path
    summary: dict[str, Any]
    slo: dict[str, dict[str, float]] = field(default_factory=dict)

    def latencies(self) -> dict[str, np.ndarray]:
        """Per-request TTFT, TPOT and E2E in seconds from requests.csv or requests.parquet (NaN where a
        request has none)."""
        parquet = self.path / "requests.parquet"
        if parquet.exists() and not (self.path / "requests.csv").exists():
            from ..metrics.parquet import read_requests_parquet

            cells = read_requests_parquet(parquet, CDF_METRICS)
            return {m: np.array([math.nan if v is None else v for v in cells[m]], dtype=float) for m in CDF_METRICS}
        columns: dict[str, list[float]] = {m: [] for m in CDF_METRICS}
        with (self.path / "requests.csv").open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                for metric in CDF_METRICS:
                    cell = row.get(metric) or ""
                    columns[metric].append(float(cell) if cell else math.nan)
        return {m: np.array(v, dtype=float) for m, v in columns.items()}


@dataclass
class Comparison:
    """Runs side by side: ``table`` is metric label -> one value per run (None where missing)."""

    runs: list[RunFolder]
    table: dict[str, list[float | None]]
    output_dir: Path | None = None


def load_run(folder: str | Path, label: str | None = None) -> RunFolder:
    """Reads a run folder's summary and SLO.

    Raises:
        ScenarioError: naming the folder: no readable summary.json, or a partial run's (see
            :func:`cosim.hub.metrics.run_folder.require_complete`).
    """
    path = Path(folder)
    summary = require_complete(path)
    slo: dict[str, dict[str, float]] = {}
    config = path / "config.yaml"
    if config.is_file():
        data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        slo = data.get("slo") or {}
    elif isinstance(summary.get("slo"), Mapping):  # older folders: the summary's SLO report
        slo = {m: {s: e["target"] for s, e in stats.items()} for m, stats in summary["slo"].items()}
    return RunFolder(label=label or path.name, path=path, summary=summary, slo=slo)


def _labels(folders: Sequence[Path]) -> list[str]:
    """Folder names, or the paths as given where two names clash."""
    names = [f.name or str(f) for f in folders]
    return [str(f) if names.count(n) > 1 else n for f, n in zip(folders, names)]


def compare(folders: Sequence[str | Path], *, output_dir: str | Path | None = None,
            plots: bool = True) -> Comparison:
    """Compares run folders: key metrics side by side, and overlaid latency CDFs.

    Args:
        folders: two or more run folders (one is allowed: a table of one).
        output_dir: where compare.csv, the CDF plots and report.html go (None: nothing written).
        plots: draw the CDFs (needs each folder's requests.csv).

    Raises:
        ScenarioError: a folder that is not a run folder.
    """
    paths = [Path(f) for f in folders]
    if not paths:
        raise ScenarioError("compare", "give at least one run folder")
    runs = [load_run(p, label) for p, label in zip(paths, _labels(paths))]
    metrics = [key_metrics(run.summary) for run in runs]
    table = {label: [None if m[key] is None else float(m[key]) * scale for m in metrics]
             for key, label, scale, _ in METRIC_ROWS}
    result = Comparison(runs=runs, table=table)
    if output_dir is None:
        return result
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with (out / COMPARE_CSV).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["metric", *(run.label for run in runs)])
        for label, values in table.items():
            writer.writerow([label, *("" if v is None else f"{v:.6g}" for v in values)])
    slo = next((run.slo for run in runs if run.slo), {})
    pngs = []
    if plots:
        from ..metrics.comparison_plots import plot_overlaid_cdfs  # late: matplotlib takes 0.3 s

        pngs = plot_overlaid_cdfs(out, {run.label: run.latencies() for run in runs}, slo)
    write_compare_report(out, [(run.label, run.path) for run in runs], comparison_cells(result), slo, pngs)
    result.output_dir = out
    return result


def comparison_cells(comparison: Comparison) -> list[list[str]]:
    """The table's text: a header row, then a row per metric with a column per run; later runs show their
    change from the first in percent."""
    formats = {label: fmt for _, label, _, fmt in METRIC_ROWS}
    rows = [["metric", *(run.label for run in comparison.runs)]]
    for label, values in comparison.table.items():
        first = values[0]
        cells = [label]
        for i, value in enumerate(values):
            text = "-" if value is None else formats[label].format(value)
            if i and value is not None and first:
                text += f" ({(value - first) / abs(first) * 100:+.1f}%)"
            cells.append(text)
        rows.append(cells)
    return rows


def format_comparison(comparison: Comparison) -> str:
    """:func:`comparison_cells` as text, in aligned columns."""
    rows = comparison_cells(comparison)
    header = rows[0]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in rows]
    return "\n".join(lines)
