"""report.html of a sweep folder and of a compare folder: the run report's page, with the study's table.

Main names: :func:`write_sweep_report` (``cosim sweep``) and :func:`write_compare_report` (``cosim compare``).
Both build on :mod:`cosim.hub.metrics.html` (the same style, the plots embedded as ``data:`` URIs, the script
that counts the plots the browser decoded), so a page opens offline as a run's does. Each links the run
folders' own report.html by a relative path.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..metrics.html import figures_html, page_html, slo_targets_html, table_html
from .key_metrics import METRIC_ROWS

REPORT_HTML = "report.html"
SWEEP_CAPTIONS = {
    "latency_vs_load.png": "TTFT, TPOT and E2E against the first varied key (solid: mean, dashed: p90; dash-dotted: "
                           "SLO thresholds), and throughput (wide, pale) with goodput (dashed) over it",
}
COMPARE_CAPTIONS = {
    "ttft_cdf.png": "TTFT of every run (dashed: SLO thresholds, dotted: their percentile)",
    "tpot_cdf.png": "TPOT of every run (dashed: SLO thresholds, dotted: their percentile)",
    "e2e_cdf.png": "E2E latency of every run (dashed: SLO thresholds, dotted: their percentile)",
}
NO_PLOTS = "<p>No plots (<code>--no-plots</code>).</p>"


def _e(value: Any) -> str:
    return html.escape(str(value))


def _link(target: Path, start: Path, text: str) -> str:
    """``text`` linking ``target`` relative to the folder ``start`` (the page's), or plain where it is missing."""
    if not target.is_file():
        return _e(text)
    href = quote(Path(os.path.relpath(target, start)).as_posix(), safe="/=+")
    return f"<a href=\"{_e(href)}\">{_e(text)}</a>"


def _cell(value: Any, scale: float, fmt: str) -> str:
    return "-" if value is None or value == "" else _e(fmt.format(float(value) * scale))


def sweep_report_html(folder: Path, rows: Sequence[Mapping[str, Any]], keys: Sequence[str],
                      slo: Mapping[str, Mapping[str, float]], pngs: Sequence[Path]) -> str:
    """The sweep's page: a row per point (its varied values and key metrics, in the units of their labels),
    the points that failed and why, the config's SLO and the sweep's plots. Metrics no point has (energy
    without power figures) are left out."""
    shown = [(key, label, scale, fmt) for key, label, scale, fmt in METRIC_ROWS
             if any(row.get(key) not in (None, "") for row in rows)]
    header = ["point", *(_e(key) for key in keys), *(_e(label) for _, label, _, _ in shown)]
    body = [[_link(folder / row["point"] / REPORT_HTML, folder, row["point"]), *(_e(row[key]) for key in keys),
             *(_cell(row.get(key), scale, fmt) for key, _, scale, fmt in shown)] for row in rows]
    failed = "".join(f"<li>{_e(row['point'])}: {_e(row['error'])}</li>" for row in rows if row.get("error"))
    varied = " × ".join(f"<code>{_e(key)}</code>" for key in keys)
    sections = [
        f"<p>{len(rows)} points of {varied}; each point's name opens its run's own report.</p>",
        "<h2>Points</h2>", table_html(header, body, numeric_from=1 + len(keys)),
        f"<p class=\"error\">Failed points (their figures are those of the partial run):</p><ul>{failed}</ul>"
        if failed else "",
        "<h2>SLOs</h2>", slo_targets_html(slo),
        "<h2>Plots</h2>", figures_html(pngs, SWEEP_CAPTIONS, empty=NO_PLOTS),
    ]
    return page_html(f"cosim sweep {folder.resolve().name}", sections)


def write_sweep_report(folder: Path, rows: Sequence[Mapping[str, Any]], keys: Sequence[str],
                       slo: Mapping[str, Mapping[str, float]], pngs: Sequence[Path]) -> Path:
    """Writes ``folder/report.html`` (:func:`sweep_report_html`); returns its path."""
    path = folder / REPORT_HTML
    path.write_text(sweep_report_html(folder, rows, keys, slo, pngs), encoding="utf-8")
    return path


def compare_report_html(folder: Path, runs: Sequence[tuple[str, Path]], cells: Sequence[Sequence[str]],
                        slo: Mapping[str, Mapping[str, float]], pngs: Sequence[Path]) -> str:
    """The comparison's page: the runs (each linking its report), the table of key metrics as ``cosim compare``
    prints it (``cells``: the header row, then a row per metric), the SLO the CDFs draw and the CDFs."""
    run_rows = [[_link(path / REPORT_HTML, folder, label), _e(path)] for label, path in runs]
    header, *rows = cells
    sections = [
        "<h2>Runs</h2>", table_html(["run", "folder"], run_rows, numeric_from=2),
        "<h2>Key metrics</h2>", "<p>Later runs with their change from the first.</p>",
        table_html([_e(c) for c in header], [[_e(c) for c in row] for row in rows]),
        "<h2>SLOs</h2>", slo_targets_html(slo),
        "<h2>Plots</h2>", figures_html(pngs, COMPARE_CAPTIONS, empty=NO_PLOTS),
    ]
    return page_html("cosim compare " + " vs ".join(label for label, _ in runs), sections)


def write_compare_report(folder: Path, runs: Sequence[tuple[str, Path]], cells: Sequence[Sequence[str]],
                         slo: Mapping[str, Mapping[str, float]], pngs: Sequence[Path]) -> Path:
    """Writes ``folder/report.html`` (:func:`compare_report_html`); returns its path."""
    path = folder / REPORT_HTML
    path.write_text(compare_report_html(folder, runs, cells, slo, pngs), encoding="utf-8")
    return path
