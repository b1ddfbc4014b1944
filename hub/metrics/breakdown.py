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

from ..sim.records import RequestRecord
from .figures import LEGEND_PT, save
from .stats import NS_PER_S

LEGEND_COLUMNS = 4


# A stage's fields as one tuple (:meth:`StageRecord.values`): its fields are read from the compiled
# record once, not once per use.
Stage = tuple[str, str, int, int, int, int]  # kind, client, enqueue_ns, start_ns, end_ns, transfer_ns


def stage_values(record: RequestRecord) -> list[Stage]:
    """A request's stages as tuples of their fields."""
    return [stage.values() for stage in record.stages]


def add_breakdown(totals: dict[str, int], stages: Sequence[Stage]) -> None:
    """Adds a finished request's components, ns (``queue`` and ``communication`` first), from its
    :func:`stage_values`."""
    split = {stage[0].split(":")[0] for stage in stages if ":" in stage[0]}
    totals.setdefault("queue", 0)
    totals.setdefault("communication", 0)
    queue_ns = communication_ns = 0
    for kind, _, enqueue_ns, start_ns, end_ns, transfer_ns in stages:
        if end_ns < 0:
            continue
        if ":" not in kind:
            queue_ns += start_ns - enqueue_ns
            communication_ns += transfer_ns
            if kind in split:
                continue
        totals[kind] = totals.get(kind, 0) + end_ns - start_ns
    totals["queue"] += queue_ns
    totals["communication"] += communication_ns


def add_stage_sums(sums: dict[str, list[int]], stages: Sequence[Stage]) -> None:
    """Adds the count, queue, service and transfer ns of a request's ended top-level stages, per kind,
    from its :func:`stage_values`."""
    for kind, _, enqueue_ns, start_ns, end_ns, transfer_ns in stages:
        if end_ns < 0 or ":" in kind:
            continue
        entry = sums.setdefault(kind, [0, 0, 0, 0])
        entry[0] += 1
        entry[1] += start_ns - enqueue_ns
        entry[2] += end_ns - start_ns
        entry[3] += transfer_ns


def stage_breakdown(requests: Sequence[RequestRecord]) -> dict[str, float]:
    """Mean seconds per component over completed requests (components in pipeline order)."""
    done = [r for r in requests if r.is_finished]
    totals: dict[str, int] = {}
    for request in done:
        add_breakdown(totals, stage_values(request))
    return {kind: total / len(done) / NS_PER_S for kind, total in totals.items()} if done else {}


def stage_table(requests: Sequence[RequestRecord]) -> dict[str, dict[str, float]]:
    """Per stage kind: how many ran, and mean queue, service and transfer seconds (summary.json ``stages``)."""
    sums: dict[str, list[int]] = {}
    for request in requests:
        add_stage_sums(sums, stage_values(request))
    return {kind: {"count": n, "queue_s": q / n / NS_PER_S, "service_s": s / n / NS_PER_S,
                   "transfer_s": t / n / NS_PER_S} for kind, (n, q, s, t) in sums.items()}


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
