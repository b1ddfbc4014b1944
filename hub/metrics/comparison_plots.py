"""Plots across runs: a sweep's latency against load, and overlaid CDFs of several run folders.

Main names: :func:`plot_latency_vs_load` (``cosim sweep``'s ``plots/latency_vs_load.png``) and
:func:`plot_overlaid_cdfs` (``cosim compare``'s ``ttft_cdf.png``, ``tpot_cdf.png``, ``e2e_cdf.png``).
Both draw the SLO thresholds of the config (``slo:`` of a scenario, seconds) as dashed lines.
Matplotlib's Agg canvas, no pyplot (no global figure state).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from matplotlib.figure import Figure

from .figures import LATENCY_PANELS, LEGEND_PT, panel_label, save, slo_label

SLO_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:gray")
# Throughput and goodput: goodput equals throughput wherever every request meets its SLOs, so it is drawn
# over it thin and dashed, with a small hollow marker, in a wide pale band of throughput that shows around it.
THROUGHPUT_STYLE: dict[str, Any] = {"linestyle": "-", "linewidth": 5.0, "alpha": 0.35, "marker": "o", "markersize": 11,
                                    "zorder": 2}
GOODPUT_STYLE: dict[str, Any] = {"linestyle": "--", "linewidth": 1.5, "marker": "s", "markersize": 5,
                                 "markerfacecolor": "white", "zorder": 3}


def _number(text: Any) -> float | None:
    """A cell of a sweep row as a float, or None (missing, or not a number)."""
    if text is None or text == "":
        return None
    try:
        value = yaml.safe_load(text) if isinstance(text, str) else text
        return None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError, yaml.YAMLError):
        return None


def _float(text: Any) -> float:
    """:func:`_number`, NaN for None (a gap in a line)."""
    value = _number(text)
    return float("nan") if value is None else value


def slo_bounds(slo: Mapping[str, Mapping[str, float]], metric: str) -> list[tuple[str, float]]:
    """(statistic, threshold in s) of each SLO bound on ``metric``, in statistic order."""
    return sorted((stat, float(value)) for stat, value in slo.get(metric, {}).items())


def _leaf(key: str) -> str:
    """The last name of a dotted key (``max_num_seqs`` of ``clients[0].scheduler.max_num_seqs``)."""
    return re.split(r"[.\]]", key)[-1] or key


def _series(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, list[Mapping[str, Any]]]:
    """Rows grouped by the values of every varied key but the first (one line each)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        label = ", ".join(f"{_leaf(k)}={row[k]}" for k in keys[1:])
        groups.setdefault(label, []).append(row)
    return groups


def plot_latency_vs_load(path: Path, rows: Sequence[Mapping[str, Any]], keys: Sequence[str],
                         slo: Mapping[str, Mapping[str, float]]) -> Figure:
    """TTFT, TPOT and E2E (mean solid, p90 dashed) and throughput against the first varied key.

    Each panel is titled with its metric and unit; each SLO line's label gives its threshold in that unit.
    Goodput is drawn over throughput (:data:`GOODPUT_STYLE`), so both show where they are equal.

    Args:
        path: the PNG.
        rows: sweep.csv's rows (values of the varied keys as written; metrics in seconds).
        keys: the varied keys; the first is the x axis (numeric, else one tick per value), each
            combination of the others a line.
        slo: the config's SLO; each bound is a horizontal line on its metric's panel.

    Returns:
        The figure (tests read its lines).
    """
    x_key = keys[0]
    x_texts = list(dict.fromkeys(str(row[x_key]) for row in rows))
    numeric = all(_number(t) is not None for t in x_texts)
    position = {t: (_float(t) if numeric else float(i)) for i, t in enumerate(x_texts)}
    fig = Figure(figsize=(11, 7.5))
    panels = [fig.add_subplot(2, 2, i + 1) for i in range(4)]
    for color_index, (label, group) in enumerate(_series(rows, keys).items()):
        color = f"C{color_index % 10}"
        xs = [position[str(row[x_key])] for row in group]
        for ax, panel in zip(panels, LATENCY_PANELS):
            for stat, style in (("mean", "-"), ("p90", "--")):
                ys = [_float(row.get(f"{panel.metric}_{stat}")) * panel.scale for row in group]
                ax.plot(xs, ys, style, marker="o", color=color, label=f"{stat} {label}".strip())
        for column, look, what in (("throughput_requests_per_s", THROUGHPUT_STYLE, "throughput"),
                                   ("goodput_requests_per_s", GOODPUT_STYLE, "goodput")):
            ys = [_float(row.get(column)) for row in group]
            panels[3].plot(xs, ys, color=color, label=f"{what} {label}".strip(), **look)
    for ax, panel in zip(panels, LATENCY_PANELS):
        for i, (stat, value) in enumerate(slo_bounds(slo, panel.metric)):
            ax.axhline(value * panel.scale, color=SLO_COLORS[i % len(SLO_COLORS)], linestyle="-.", linewidth=1.2,
                       label=slo_label(stat, value, panel))
        ax.set_title(panel_label(panel))
        ax.set_ylabel(panel_label(panel))
    panels[3].set_title("throughput and goodput (requests/s)")
    panels[3].set_ylabel("requests/s")
    for ax in panels:
        ax.set_xlabel(x_key)
        if not numeric:
            ax.set_xticks(range(len(x_texts)), x_texts)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=LEGEND_PT)
    save(fig, path)
    return fig


def plot_overlaid_cdfs(folder: Path, runs: Mapping[str, Mapping[str, np.ndarray]],
                       slo: Mapping[str, Mapping[str, float]]) -> list[Path]:
    """One PNG per latency metric with each run's empirical CDF, and the SLO bounds.

    Args:
        folder: where ``<metric>_cdf.png`` go (``ttft_cdf.png``, ``tpot_cdf.png``, ``e2e_cdf.png``).
        runs: run label -> metric (``ttft_s``, ...) -> per-request values in seconds (NaN: none).
        slo: SLO bounds drawn on every panel of their metric.

    Returns:
        The files written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for panel in LATENCY_PANELS:
        metric, scale = panel.metric, panel.scale
        fig = Figure(figsize=(6.4, 4.2))
        ax = fig.add_subplot(1, 1, 1)
        for label, columns in runs.items():
            values = np.sort(columns[metric][~np.isnan(columns[metric])]) * scale
            if values.size:
                ax.step(values, np.arange(1, values.size + 1) / values.size, where="post", label=label)
        for i, (stat, value) in enumerate(slo_bounds(slo, metric)):
            ax.axvline(value * scale, color=SLO_COLORS[i % len(SLO_COLORS)], linestyle="--", linewidth=1.2,
                       label=slo_label(stat, value, panel))
            if stat.startswith("p") and stat[1:].isdigit():
                ax.axhline(float(stat[1:]) / 100, color=SLO_COLORS[i % len(SLO_COLORS)], linestyle=":", linewidth=1)
        ax.set_xlabel(panel_label(panel))
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=LEGEND_PT)
        path = folder / f"{metric.removesuffix('_s')}_cdf.png"
        save(fig, path)
        written.append(path)
    return written
