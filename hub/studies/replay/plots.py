"""Replay plots: measured versus simulated, with matplotlib's Agg canvas (no pyplot).

Files (in the run folder's ``plots/``): ``replay_latency.png`` (per-request
TTFT and E2E, simulated against measured, with the y = x line) and
``replay_queue.png`` (running and waiting requests per second, simulated
against vLLM's ``timeseries.csv``, drawn only when that file is given).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ...metrics.figures import save
from .outcomes import Outcomes


def plot_latency(simulated: Outcomes, measured: Outcomes, path: Path) -> None:
    """Per-request TTFT and E2E, simulated (y) against measured (x)."""
    fig = Figure(figsize=(10, 4.5))
    n = min(len(simulated.arrival_s), len(measured.arrival_s))
    for i, metric in enumerate(("ttft_s", "e2e_s")):
        ax = fig.add_subplot(1, 2, i + 1)
        x, y = getattr(measured, metric)[:n], getattr(simulated, metric)[:n]
        ax.scatter(x, y, s=6, alpha=0.6)
        top = float(max(np.max(x), np.max(y))) if n else 1.0
        ax.plot([0, top], [0, top], color="gray", linewidth=1, linestyle="--")
        ax.set_xlabel(f"measured {metric}")
        ax.set_ylabel(f"simulated {metric}")
        ax.set_title(f"per-request {metric.removesuffix('_s').upper()}")
    save(fig, path)


def simulated_queue(clients_csv: Path, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running and waiting requests at each of ``seconds`` from a run's clients.csv
    (summed over clients; the last step row started at or before each second)."""
    per_client: dict[str, list[tuple[float, float, float]]] = {}
    with clients_csv.open(newline="") as handle:
        for row in csv.DictReader(handle):
            per_client.setdefault(row["client"], []).append(
                (float(row["start_s"]), float(row["num_seqs"]), float(row["num_waiting"])))
    running, waiting = np.zeros(len(seconds)), np.zeros(len(seconds))
    for rows in per_client.values():
        data = np.array(rows)
        idx = np.searchsorted(data[:, 0], seconds, side="right") - 1
        valid = idx >= 0
        running[valid] += data[idx[valid], 1]
        waiting[valid] += data[idx[valid], 2]
    return running, waiting


def read_timeseries(path: Path) -> dict[str, np.ndarray]:
    """vLLM's per-second ``timeseries.csv`` (t, running, waiting, ...) as float columns."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {key: np.array([float(r[key]) for r in rows]) for key in rows[0]} if rows else {}


def plot_queue(clients_csv: Path, timeseries: Path, path: Path) -> None:
    """Running and waiting requests over time: simulated steps against vLLM's log."""
    measured = read_timeseries(timeseries)
    if not measured:
        return
    seconds = measured["t"]
    running, waiting = simulated_queue(clients_csv, seconds)
    fig = Figure(figsize=(10, 4.5))
    for i, (name, sim) in enumerate((("running", running), ("waiting", waiting))):
        ax = fig.add_subplot(1, 2, i + 1)
        ax.plot(seconds, measured[name], label="measured (vLLM)", linewidth=1)
        ax.plot(seconds, sim, label="simulated", linewidth=1)
        ax.set_xlabel("time since start (s)")
        ax.set_ylabel(f"{name} requests")
        ax.legend()
    save(fig, path)
