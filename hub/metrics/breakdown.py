"""Where a request's time goes, stage by stage (HERMES Fig. 9).

Per completed request, the latency splits into components: ``queue`` (every
top-level stage's wait between hand-over and start), ``communication``
(transfers of KV and retrieved context into a stage), and the service time
of each stage kind (``rag:embedding``, ``rag:retrieval``, ``prefill``,
``decode``, ...). A stage split into sub-stages (``rag`` into ``rag:*``) is
counted through its sub-stages. The means of these components add up to the
mean end-to-end latency when the pipeline has no gaps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cosim_core import StageSums

from ..sim.records import RequestRecord
from .figures import LEGEND_PT, save
from .stats import NS_PER_S

LEGEND_COLUMNS = 4
# The one template a breakdown of all requests together sums them under (StageSums.add).
ALL = ""


def stage_breakdown(requests: Sequence[RequestRecord]) -> dict[str, float]:
    """Mean seconds per component over completed requests (``queue`` and ``communication`` first, then
    the stage kinds as they first came), summed by the compiled core (:class:`cosim_core.StageSums`,
    core/src/stage_sums.rs)."""
    sums = StageSums()
    for request in requests:
        sums.add(request, template=ALL)
    done = sums.finished().get(ALL, 0)
    return {kind: total / done / NS_PER_S for kind, total in sums.breakdown()[ALL].items()} if done else {}


def stage_table(requests: Sequence[RequestRecord]) -> dict[str, dict[str, float]]:
    """Per stage kind: how many ran, and mean queue, service and transfer seconds (summary.json ``stages``)."""
    sums = StageSums()
    for request in requests:
        sums.add(request)
    return {kind: {"count": n, "queue_s": q / n / NS_PER_S, "service_s": s / n / NS_PER_S,
                   "transfer_s": t / n / NS_PER_S} for kind, (n, q, s, t) in sums.stages().items()}


def plot_breakdown(path: Path, breakdowns: Mapping[str, Mapping[str, float]], *, title: str = "") -> None:
    """Stacked horizontal bars of mean latency per component, one bar per run (or template).

    The legend sits below the axis label, in rows of four, in space the constrained layout keeps for
    it (a legend placed at a fixed offset under the axes covers the label when the bars are few).
    """
    from matplotlib.figure import Figure  # late: importing matplotlib takes 0.3 s

    components: list[str] = []
    for parts in breakdowns.values():
        components += [c for c in parts if c not in components]
    legend_rows = -(-len(components) // LEGEND_COLUMNS)
    fig = Figure(figsize=(9, 1.6 + 0.5 * len(breakdowns) + 0.3 * legend_rows), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    labels = list(breakdowns)
    left = [0.0] * len(labels)
    for component in components:
        widths = [breakdowns[label].get(component, 0.0) for label in labels]
        ax.barh(labels, widths, left=left, label=component)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("mean latency (s)")
    ax.invert_yaxis()
    if components:
        # A legend fills its columns first; handed over column by column, it reads row by row in stacking order.
        columns = min(LEGEND_COLUMNS, len(components))
        handles, names = ax.get_legend_handles_labels()
        order = [row * columns + col for col in range(columns) for row in range(legend_rows)
                 if row * columns + col < len(components)]
        fig.legend([handles[i] for i in order], [names[i] for i in order], loc="outside lower center",
                   fontsize=LEGEND_PT, ncols=columns, frameon=False)
    if title:
        ax.set_title(title)
    save(fig, path)
