"""Pruning deployments that cannot reach the top of the ranking, without changing the top.

Main names: :func:`prunable` and :func:`mark_pruned`.

``cosim search`` evaluates in rounds. First every deployment's goodput search
runs up to its bracket (T_min, the low end, the high end doubled until an SLO
fails), then each round tests one more bisection rate of every deployment still
in the running. The bisection only tests rates between the highest feasible
rate found so far (``goodput_rps``) and the next rate tested above it
(``goodput_upper_rps``), so at any pause the finished search's goodput g
satisfies ``goodput_rps <= g < goodput_upper_rps`` (see
:attr:`cosim.hub.studies.search.GoodputResult.upper_bound_rps`). Every ranking objective
but tokens per joule grows with the rate (goodput, rate x 3600 / $ per hour,
rate x mean output tokens x 3600 / $ per hour), so the same bounds hold for it.

A deployment is pruned when at least ``keep`` others are already worth strictly
more at their lower bound than it can be worth at its upper bound: whatever
the bisections find, those ``keep`` rank above it, so it is not in the top
``keep`` and its bisection would change no row there. Only the others are
bisected further. The decisions use only the rounds' rows, which are seeded,
so they are the same on every executor and machine; the top ``keep`` rows are
the exhaustive search's, value for value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Row = dict[str, Any]

# Objectives that grow with the goodput rate (tokens per joule need not: it is not pruned on).
MONOTONE = ("goodput", "goodput_per_usd", "tokens_per_usd")


def worth(rate: float, row: Row, objective: str, mean_output_tokens: float) -> float:
    """What a deployment would be worth at ``rate`` under ``objective``, computed as :func:`.sweep.evaluate`
    computes it (the same float operations, so bounds compare exactly)."""
    per_hour = float(row["cost_per_hour_usd"])
    if objective == "goodput":
        return rate
    if per_hour <= 0:
        return 0.0
    if objective == "goodput_per_usd":
        return rate * 3600 / per_hour
    return rate * mean_output_tokens * 3600 / per_hour


def prunable(rows: Sequence[Row], objective: str, keep: int, mean_output_tokens: float) -> dict[str, float]:
    """The paused rows that cannot reach the top ``keep``, by key, each with the value (under the
    objective) that ``keep`` others exceed.

    Args:
        rows: every deployment's row: ``paused`` ones with bounds, final ones (infeasible, error, or a
            finished search) with their value.
        objective: what the table is ranked by; only :data:`MONOTONE` objectives prune.
        keep: how many top rows must stay exact (0: none is pruned).
        mean_output_tokens: the workload's mean output length (tokens per dollar).
    """
    if keep <= 0 or objective not in MONOTONE:
        return {}
    lower = sorted((worth(r.get("goodput_rps") or 0.0, r, objective, mean_output_tokens) for r in rows
                    if r["status"] == "ok"), reverse=True)
    pruned = {}
    for row in rows:
        upper = row.get("goodput_upper_rps")
        if row["status"] != "ok" or not row.get("paused") or upper is None or not math.isfinite(upper):
            continue
        bound = worth(upper, row, objective, mean_output_tokens)
        # Its own lower bound is below its upper one, so it is never among the `keep` counted.
        priced = objective == "goodput" or row["cost_per_hour_usd"] > 0
        if priced and len(lower) >= keep and lower[keep - 1] > bound:
            pruned[row["key"]] = lower[keep - 1]
    return pruned


def mark_pruned(row: Row, exceeded: float, keep: int, objective: str) -> Row:
    """A pruned deployment's result row: its bounds, and why its bisection stopped there."""
    return {**row, "pruned": True,
            "reason": f"pruned: goodput in [{row['goodput_rps']:.4g}, {row['goodput_upper_rps']:.4g}) requests/s; "
                      f"{keep} deployments have {objective} above {exceeded:.4g}, more than it can reach, so it is not "
                      f"in the top {keep}"}
