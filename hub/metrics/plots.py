"""plots/*.png with matplotlib's Agg canvas (no pyplot, so no global figure state).

Files: ``latency_cdf.png`` (TTFT, TPOT, E2E of completed requests),
``breakdown.png`` (mean latency per stage component, per template; HERMES
Fig. 9), ``throughput.png`` (completed requests/s and output tokens/s over simulated
time), ``queue.png``, ``kv_usage.png`` and ``batch_size.png`` (per client over
time; timelines are downsampled to at most :data:`MAX_POINTS` points each,
keeping maxima for queue and KV, means for batch size).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..records import ClientInfo, ClientTimeline, RequestRecord
from .breakdown import plot_breakdown, stage_breakdown
from .stats import NS_PER_S, request_metrics
from .tables import downsample

MAX_POINTS = 2_000
NUM_BINS = 100


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})


def plot_latency_cdf(path: Path, requests: Sequence[RequestRecord]) -> None:
    """Empirical CDFs of TTFT, TPOT and E2E over completed requests."""
    metrics = request_metrics(requests)
    fig = Figure(figsize=(12, 3.6))
    for i, (name, label) in enumerate((("ttft_s", "TTFT (s)"), ("tpot_s", "TPOT (s)"), ("e2e_s", "E2E (s)"))):
        ax = fig.add_subplot(1, 3, i + 1)
        values = metrics.column(name)[metrics.finished]
        values = np.sort(values[~np.isnan(values)])
        if values.size:
            ax.step(values, np.arange(1, values.size + 1) / values.size, where="post")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    _save(fig, path)


def plot_throughput(path: Path, requests: Sequence[RequestRecord],
                    timelines: Mapping[str, ClientTimeline], sim_time_ns: int) -> None:
    """Completed requests/s and output tokens/s (first tokens plus decode tokens) in time bins."""
    finish = np.array([r.finish_ns for r in requests if r.finish_ns >= 0], dtype=np.int64)
    token_times = [np.array([r.first_token_ns for r in requests if r.first_token_ns >= 0], dtype=np.int64)]
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
    _save(fig, path)


def plot_client_series(path: Path, column: str, ylabel: str, clients: Sequence[ClientInfo],
                       names: Sequence[str], timelines: Mapping[str, ClientTimeline]) -> None:
    """One line per client of a timeline column over simulated time.

    ``kv_blocks_used`` is shown as a fraction of the client's capacity when known.
    """
    capacity = {c.name: c.kv_capacity_blocks for c in clients}
    fig = Figure(figsize=(8, 4))
    ax = fig.add_subplot(1, 1, 1)
    for name in names:
        if name not in timelines or not len(timelines[name]):
            continue
        cols = downsample(timelines[name].columns(), MAX_POINTS)
        values = cols[column].astype(float)
        if column == "kv_blocks_used" and capacity.get(name, 0) > 0:
            values = values / capacity[name]
        ax.step(cols["start_ns"] / NS_PER_S, values, where="post", label=name)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(loc="best", fontsize="small")
    _save(fig, path)


def write_plots(folder: Path, requests: Sequence[RequestRecord], clients: Sequence[ClientInfo],
                names: Sequence[str], timelines: Mapping[str, ClientTimeline], sim_time_ns: int) -> None:
    """Writes every plot of the module docstring into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    plot_latency_cdf(folder / "latency_cdf.png", requests)
    by_template: dict[str, list[RequestRecord]] = {}
    for request in requests:
        by_template.setdefault(request.template, []).append(request)
    plot_breakdown(folder / "breakdown.png", {name: stage_breakdown(group) for name, group in by_template.items()},
                   title="where the time goes (mean per request)")
    plot_throughput(folder / "throughput.png", requests, timelines, sim_time_ns)
    has_capacity = all(c.kv_capacity_blocks > 0 for c in clients if c.name in timelines)
    kv_label = "KV usage (fraction of blocks)" if clients and has_capacity else "KV blocks used"
    for column, label, file in (("num_waiting", "waiting requests (max)", "queue.png"),
                                ("kv_blocks_used", kv_label, "kv_usage.png"),
                                ("num_seqs", "batch size (mean)", "batch_size.png")):
        plot_client_series(folder / file, column, label, clients, names, timelines)
