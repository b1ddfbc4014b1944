"""The search's outputs: the ranked table (data, CSV, markdown) and the Pareto plot.

Main names: :func:`rank`, :func:`pareto_front`, :func:`write_report`.

Ranking: deployments that ran, by the objective (descending), then goodput,
then label, so ties order the same on every machine (a pruned deployment by
its lower bound); deployments with zero goodput follow, then infeasible ones
and errors, each with its reason.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Row = dict[str, Any]

COLUMNS = ("rank", "label", "status", "goodput_rps", "goodput_upper_rps", "goodput_estimate_rps",
           "cost_per_hour_usd", "goodput_per_usd", "tokens_per_usd", "tokens_per_j", "prefill_device",
           "decode_device", "tp", "pp",
           "deployment", "shape", "batching", "chunk_size", "max_num_seqs", "num_devices", "runs", "pareto",
           "reason", "key")
_MARKDOWN = ("rank", "label", "goodput_rps", "goodput_upper_rps", "cost_per_hour_usd", "goodput_per_usd",
             "tokens_per_usd", "tokens_per_j", "runs", "pareto", "status", "reason")
_STATUS_ORDER = {"ok": 0, "infeasible": 1, "error": 2}


def _objective(row: Row, objective: str) -> float:
    key = {"goodput": "goodput_rps"}.get(objective, objective)
    return float(row.get(key) or 0.0)


def pareto_front(rows: Sequence[Row]) -> set[str]:
    """Keys of the deployments no other beats on both goodput (higher) and cost per hour (lower)."""
    live = sorted((r for r in rows if r["status"] == "ok" and (r.get("goodput_rps") or 0) > 0),
                  key=lambda r: (r["cost_per_hour_usd"], -r["goodput_rps"], r["label"]))
    front, best = set(), 0.0
    for row in live:
        if row["goodput_rps"] > best:
            front.add(row["key"])
            best = row["goodput_rps"]
    return front


def rank(rows: Sequence[Row], objective: str) -> list[Row]:
    """Rows in table order with ``rank`` (1.. for deployments with goodput) and ``pareto`` set."""
    front = pareto_front(rows)

    def is_alive(row: Row) -> bool:  # a pruned row is ranked by its lower bound, which may still be 0
        return row["status"] == "ok" and ((row.get("goodput_rps") or 0) > 0 or bool(row.get("pruned")))

    def order(row: Row) -> tuple[Any, ...]:
        alive = is_alive(row)
        return (0 if alive else 1, _STATUS_ORDER.get(row["status"], 3), -_objective(row, objective),
                -(row.get("goodput_rps") or 0.0), row["label"])

    ranked = []
    for i, row in enumerate(sorted(rows, key=order)):
        ranked.append({**row, "rank": i + 1 if is_alive(row) else None, "pareto": row["key"] in front})
    return ranked


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "/").replace("\n", " ")


def write_csv(path: Path, rows: Sequence[Row]) -> None:
    """The ranked table, one deployment per line (every column)."""
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS} for row in rows)


def markdown(rows: Sequence[Row]) -> str:
    """The ranked table as GitHub markdown (main columns)."""
    lines = ["| " + " | ".join(_MARKDOWN) + " |", "|" + "---|" * len(_MARKDOWN)]
    lines += ["| " + " | ".join(_cell(row.get(k)) for k in _MARKDOWN) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plot_pareto(path: Path, rows: Sequence[Row], title: str = "") -> None:
    """Goodput against cost per hour, one marker per deployment kind, the Pareto front joined."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # late: only searches that write plot
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    live = [r for r in rows if r["status"] == "ok"]
    for kind, marker in (("collocated", "o"), ("disaggregated", "s")):
        some = [r for r in live if r["deployment"] == kind]
        if some:
            ax.scatter([r["cost_per_hour_usd"] for r in some], [r.get("goodput_rps") or 0 for r in some],
                       marker=marker, alpha=0.6, label=kind)
    front = sorted((r for r in live if r.get("pareto")), key=lambda r: r["cost_per_hour_usd"])
    if front:
        ax.plot([r["cost_per_hour_usd"] for r in front], [r["goodput_rps"] for r in front], "k--", lw=1,
                label="Pareto front")
        for r in front:
            ax.annotate(r["label"], (r["cost_per_hour_usd"], r["goodput_rps"]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("deployment cost ($/hour)")
    ax.set_ylabel("goodput (requests/s)")
    ax.set_title(title or "goodput vs cost")
    ax.grid(alpha=0.3)
    if live:
        ax.legend(fontsize=8)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})


def write_report(folder: Path, rows: Sequence[Row], title: str = "") -> dict[str, Path]:
    """results.csv, results.md and pareto.png in ``folder``; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"csv": folder / "results.csv", "markdown": folder / "results.md", "plot": folder / "pareto.png"}
    write_csv(paths["csv"], rows)
    paths["markdown"].write_text((f"# {title}\n\n" if title else "") + markdown(rows))
    plot_pareto(paths["plot"], rows, title)
    return paths
