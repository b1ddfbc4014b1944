"""plots/*.png with matplotlib's Agg canvas (no pyplot, so no global figure state).

Files: ``latency_cdf.png`` (TTFT, TPOT, E2E of completed requests and ITL per
token, with the SLO bounds: a dashed line at each threshold, dotted at a
percentile's level; green met, red missed),
``breakdown.png`` (mean latency per stage component, per template; HERMES
Fig. 9), ``throughput.png`` (completed requests/s and output tokens/s over simulated
time), ``queue.png``, ``kv_usage.png`` and ``batch_size.png`` (per client over
time; timelines are downsampled to at most :data:`MAX_POINTS` points each,
keeping maxima for queue and KV, means for batch size; with more than
:data:`MAX_LINES` clients, a heatmap with a row per client instead of lines).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..sim.records import ClientInfo, ClientTimeline, RequestRecord
from .breakdown import plot_breakdown
from .figures import ITL_PANEL, LATENCY_PANELS, LEGEND_PT, LatencyPanel, panel_label, save, slo_label
from .itl import merged_gaps
from .request_table import RequestTable
from .stats import NS_PER_S
from .tables import downsample

MAX_POINTS = 2_000
NUM_BINS = 100
MAX_LINES = 8  # per-client plots with more clients are heatmaps
HEATMAP_BINS = 200
MAX_CLIENT_LABELS = 60


# The CDF panels; ITL is per token.
CDF_PANELS = (*LATENCY_PANELS[:2], ITL_PANEL, LATENCY_PANELS[2])
# SLO metrics drawn on a panel other than their own: a request's longest gap bounds each of its ITLs.
SLO_PANEL = {"tbt_max_s": "itl_s"}


def _draw_slo(ax: Any, slo: Mapping[str, Any], panel: LatencyPanel) -> None:
    """Each SLO bound of the panel's metric: a vertical line at the threshold and, for a percentile, a
    dotted line at its level, so the CDF must pass left of their crossing; green met, red missed."""
    for slo_metric, limits in sorted(slo.items()):
        if SLO_PANEL.get(slo_metric, slo_metric) != panel.metric:
            continue
        for stat, entry in sorted(limits.items()):
            target = float(entry.get("target", 0.0))
            color = "tab:green" if entry.get("met") else "tab:red"
            what = slo_metric.removesuffix("_s") if slo_metric != panel.metric else ""
            verdict = "met" if entry.get("met") else "missed"
            ax.axvline(target * panel.scale, color=color, linestyle="--", linewidth=1.2,
                       label=slo_label(stat, target, panel, what=what, verdict=verdict))
            if stat.startswith("p"):
                ax.axhline(float(stat[1:]) / 100, color=color, linestyle=":", linewidth=1.0)


def plot_latency_cdf(path: Path, table: RequestTable, timelines: Mapping[str, ClientTimeline],
                     slo: Mapping[str, Any] | None = None) -> None:
    """Empirical CDFs of TTFT, TPOT, ITL (per token) and E2E over completed requests, with the
    SLO bounds of ``slo`` (summary.json's ``slo`` block: metric -> statistic -> target, met)."""
    metrics = table.metrics()
    gaps, counts = merged_gaps(t.gap_counts() for t in timelines.values())
    fig = Figure(figsize=(16, 3.8))
    for i, panel in enumerate(CDF_PANELS):
        name = panel.metric
        ax = fig.add_subplot(1, len(CDF_PANELS), i + 1)
        if name == "itl_s":
            values, weights = gaps / NS_PER_S * panel.scale, counts
        else:
            column = metrics.column(name)[metrics.finished]
            values = np.sort(column[~np.isnan(column)]) * panel.scale
            weights = np.ones(values.size, dtype=np.int64)
        if values.size:
            cumulative = np.cumsum(weights)
            ax.step(values, cumulative / cumulative[-1], where="post")
            if name == "itl_s" and values[0] > 0 and values[-1] > 30 * values[0]:
                ax.set_xscale("log")  # a few long gaps (a prefill in the batch) would squash the rest
        _draw_slo(ax, slo or {}, panel)
        ax.set_xlabel(panel_label(panel))
        ax.set_ylabel("fraction of tokens" if name == "itl_s" else "fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        if len(ax.lines) > 1:
            ax.legend(loc="lower right", fontsize=LEGEND_PT)
    save(fig, path)


def plot_throughput(path: Path, table: RequestTable,
                    timelines: Mapping[str, ClientTimeline], sim_time_ns: int) -> None:
    """Completed requests/s and output tokens/s (first tokens plus decode tokens) in time bins."""
    finish, first = table.columns["finish_ns"], table.columns["first_token_ns"]
    finish = finish[finish >= 0]
    token_times = [first[first >= 0]]
    token_weights = [np.ones(token_times[0].size)]
    for timeline in timelines.values():
        cols = timeline.columns()
        token_times.append(cols["end_ns"])
        token_weights.append(cols["decode_tokens"].astype(float))
    end_ns = max([sim_time_ns, 1] + [int(t.max()) for t in token_times if t.size])
    edges = np.linspace(0, end_ns, NUM_BINS + 1)
    width_s = (edges[1] - edges[0]) / NS_PER_S
    centers = (edges[:-1] + edges[1:]) / 2 / NS_PER_S
    reqs, _ = np.histogram(finish, edges)
    toks, _ = np.histogram(np.concatenate(token_times), edges, weights=np.concatenate(token_weights))
    fig = Figure(figsize=(8, 5))
    for i, (series, label) in enumerate(((reqs, "completed requests/s"), (toks, "output tokens/s"))):
        ax = fig.add_subplot(2, 1, i + 1)
        ax.plot(centers, series / width_s)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    ax.set_xlabel("simulated time (s)")
    save(fig, path)


def _series(name: str, column: str, timelines: Mapping[str, ClientTimeline],
            capacity: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(start times in s, values) of one client's column, downsampled; KV as a fraction when known."""
    cols = downsample(timelines[name].columns(), MAX_POINTS)
    values = cols[column].astype(float)
    if column == "kv_blocks_used" and capacity.get(name, 0) > 0:
        values = values / capacity[name]
    return cols["start_ns"] / NS_PER_S, values


def _heatmap(fig: Figure, column: str, ylabel: str, shown: Sequence[str], timelines: Mapping[str, ClientTimeline],
             capacity: Mapping[str, int]) -> None:
    """One row per client, one column per time bin: the bin's maximum (its mean for batch size)."""
    end_ns = max(int(timelines[n].columns()["end_ns"].max()) for n in shown)
    edges = np.linspace(0, max(end_ns, 1), HEATMAP_BINS + 1) / NS_PER_S
    grid = np.full((len(shown), HEATMAP_BINS), np.nan)
    for row, name in enumerate(shown):
        times, values = _series(name, column, timelines, capacity)
        bins = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, HEATMAP_BINS - 1)
        if column == "num_seqs":
            sums, hits = np.bincount(bins, values, HEATMAP_BINS), np.bincount(bins, None, HEATMAP_BINS)
            with np.errstate(invalid="ignore"):
                grid[row] = np.where(hits > 0, sums / np.maximum(hits, 1), np.nan)
        else:
            peak = np.full(HEATMAP_BINS, -np.inf)
            np.maximum.at(peak, bins, values)
            grid[row] = np.where(np.isfinite(peak), peak, np.nan)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", interpolation="nearest", cmap="viridis",
                      extent=(edges[0], edges[-1], len(shown) - 0.5, -0.5))
    step = max(1, -(-len(shown) // MAX_CLIENT_LABELS))
    ax.set_yticks(range(0, len(shown), step), [shown[i] for i in range(0, len(shown), step)], fontsize="x-small")
    ax.set_xlabel("simulated time (s); blank: no step")
    ax.set_ylabel("client")
    fig.colorbar(image, ax=ax, label=ylabel)


def plot_client_series(path: Path, column: str, ylabel: str, clients: Sequence[ClientInfo],
                       names: Sequence[str], timelines: Mapping[str, ClientTimeline]) -> str:
    """A timeline column of every client over simulated time; returns the layout drawn.

    Up to :data:`MAX_LINES` clients: one line each, the legend beside the axes
    (``"lines"``). More: a heatmap, a row per client (``"heatmap"``), which stays
    readable with hundreds of clients. ``kv_blocks_used`` is shown as a fraction
    of the client's capacity when known.
    """
    capacity = {c.name: c.kv_capacity_blocks for c in clients}
    shown = [n for n in names if n in timelines and len(timelines[n])]
    if len(shown) > MAX_LINES:
        fig = Figure(figsize=(10, min(16.0, 2.0 + 0.16 * len(shown))))
        _heatmap(fig, column, ylabel, shown, timelines, capacity)
        save(fig, path)
        return "heatmap"
    fig = Figure(figsize=(9, 4))
    ax = fig.add_subplot(1, 1, 1)
    for name in shown:
        times, values = _series(name, column, timelines, capacity)
        ax.step(times, values, where="post", label=name)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=LEGEND_PT)
    save(fig, path)
    return "lines"


def write_plots(folder: Path, requests: Sequence[RequestRecord] | RequestTable, clients: Sequence[ClientInfo],
                names: Sequence[str], timelines: Mapping[str, ClientTimeline], sim_time_ns: int,
                slo: Mapping[str, Any] | None = None) -> None:
    """Writes every plot of the module docstring into ``folder`` (``requests``: the records, or their
    :class:`RequestTable`; ``slo``: summary.json's block)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = requests if isinstance(requests, RequestTable) else RequestTable.of(requests)
    plot_latency_cdf(folder / "latency_cdf.png", table, timelines, slo)
    plot_breakdown(folder / "breakdown.png", {name: table.breakdown(name) for name in table.templates()},
                   title="where the time goes (mean per request)")
    plot_throughput(folder / "throughput.png", table, timelines, sim_time_ns)
    has_capacity = all(c.kv_capacity_blocks > 0 for c in clients if c.name in timelines)
    kv_label = "KV usage (fraction of blocks)" if clients and has_capacity else "KV blocks used"
    for column, label, file in (("num_waiting", "waiting requests (max)", "queue.png"),
                                ("kv_blocks_used", kv_label, "kv_usage.png"),
                                ("num_seqs", "batch size (mean)", "batch_size.png")):
        plot_client_series(folder / file, column, label, clients, names, timelines)
