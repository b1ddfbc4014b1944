"""The replica count of autoscaled pools in the run folder: trace.json counters and plots/replicas.png.

Both read summary.json's ``autoscaling`` block (:mod:`cosim.hub.metrics.autoscaling_block`):
its ``timeline`` has the count at each change (ready, provisioning, draining).

- :func:`replica_trace_events`: a process ``autoscaling`` with one counter track
  per pool, ``replicas <pool>``, whose series are the ready, provisioning and
  draining replicas (Perfetto stacks them: the total is what is paid for).
- :func:`plot_replicas`: the load (arrivals per second, and completions) above
  each pool's replica count over simulated time, the count as a step line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .request_table import RequestTable
from .stats import NS_PER_S

Event = dict[str, Any]
NUM_BINS = 100
SERIES = ("ready", "provisioning", "draining")


def replica_trace_events(pid: int, autoscaling: Mapping[str, Any]) -> Iterator[Event]:
    """The counter events of every pool's replica count, under process ``pid``."""
    yield {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "autoscaling"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}
    for pool, block in sorted(autoscaling.items()):
        timeline = block["timeline"]
        for i, t_s in enumerate(timeline["t_s"]):
            yield {"ph": "C", "name": f"replicas {pool}", "pid": pid, "ts": t_s * 1e6,
                   "args": {name: timeline[name][i] for name in SERIES}}


def plot_replicas(path: Path, table: RequestTable, autoscaling: Mapping[str, Any], sim_time_ns: int) -> None:
    """Arrivals and completions per second (above) and each pool's replicas (below) over simulated time."""
    from matplotlib.figure import Figure  # late: importing matplotlib takes 0.3 s

    from .figures import LEGEND_PT, save

    arrivals, finish = table.columns["arrival_ns"], table.columns["finish_ns"]
    end_ns = max(sim_time_ns, 1)
    edges = np.linspace(0, end_ns, NUM_BINS + 1)
    width_s = (edges[1] - edges[0]) / NS_PER_S
    centers = (edges[:-1] + edges[1:]) / 2 / NS_PER_S
    fig = Figure(figsize=(9, 6))
    load = fig.add_subplot(2, 1, 1)
    for times, label in ((arrivals, "arrivals/s"), (finish[finish >= 0], "completed requests/s")):
        counts, _ = np.histogram(times, edges)
        load.plot(centers, counts / width_s, label=label)
    load.set_ylabel("requests/s")
    load.legend(loc="upper right", fontsize=LEGEND_PT)
    load.grid(alpha=0.3)
    ax = fig.add_subplot(2, 1, 2, sharex=load)
    top = 1
    for pool, block in sorted(autoscaling.items()):
        timeline = block["timeline"]
        ready = np.asarray(timeline["ready"])
        total = ready + np.asarray(timeline["provisioning"]) + np.asarray(timeline["draining"])
        line = ax.step(timeline["t_s"], total, where="post", label=f"{pool}: replicas (paid)")[0]
        ax.step(timeline["t_s"], ready, where="post", linestyle="--", color=line.get_color(),
                label=f"{pool}: ready")
        ax.axhline(block["max"], color=line.get_color(), linestyle=":", linewidth=0.8)
        top = max(top, int(block["max"]))
    ax.set_ylim(0, top + 0.5)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("replicas (dotted: max)")
    ax.legend(loc="upper right", fontsize=LEGEND_PT)
    ax.grid(alpha=0.3)
    save(fig, path)
