"""Measured versus simulated per-request outcomes of a replay.

Measured runs come as vLLM timestamps per request (``requests.jsonl`` of
LLMServingSim's bench: ``queued_ts``, ``first_token_ts``, ``last_token_ts``,
``output_toks``). Both sides use the same definitions:
``TTFT = first token - queue entry``, ``TPOT = (last - first) / max(1, out - 1)``,
``E2E = last token - queue entry``, percentiles by linear interpolation, and
``output_tokens_per_s`` = output tokens / (last token - first queue entry).
Main names: :func:`load_measured`, :func:`outcomes_from_records`, :func:`compare`,
:func:`format_comparison`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ScenarioError
from ...sim.records import RequestRecord

METRICS = ("ttft_s", "tpot_s", "e2e_s")
STATISTICS = ("mean", "p50", "p90", "p99")
_PERCENTILES = {"p50": 50, "p90": 90, "p99": 99}


@dataclass
class Outcomes:
    """Per-request times in seconds, relative to the first request's queue entry, in request order."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    last_token_s: np.ndarray
    output_tokens: np.ndarray

    @property
    def ttft_s(self) -> np.ndarray:
        return np.asarray(self.first_token_s - self.arrival_s)

    @property
    def tpot_s(self) -> np.ndarray:
        return np.asarray((self.last_token_s - self.first_token_s) / np.maximum(1, self.output_tokens - 1))

    @property
    def e2e_s(self) -> np.ndarray:
        return np.asarray(self.last_token_s - self.arrival_s)

    @property
    def output_tokens_per_s(self) -> float:
        span = float(np.max(self.last_token_s) - np.min(self.arrival_s))
        return float(np.sum(self.output_tokens)) / span if span > 0 else 0.0


def load_measured(path: str | Path) -> Outcomes:
    """Reads a measured ``requests.jsonl`` (one request per line, in trace order).

    Raises:
        ScenarioError: unreadable file or a line without the vLLM timestamps.
    """
    path = Path(path)
    rows: list[dict[str, Any]] = []
    try:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                row = json.loads(line)
                missing = [k for k in ("queued_ts", "first_token_ts", "last_token_ts", "output_toks") if k not in row]
                if missing:
                    raise ScenarioError(f"{path}:{number}", f"missing {missing}; expected vLLM request timestamps")
                rows.append(row)
    except (OSError, json.JSONDecodeError) as err:
        raise ScenarioError(str(path), f"cannot read measured requests: {err}") from None
    if not rows:
        raise ScenarioError(str(path), "no measured requests")
    t0 = float(rows[0]["queued_ts"])
    return Outcomes(arrival_s=np.array([r["queued_ts"] - t0 for r in rows], dtype=float),
                    first_token_s=np.array([r["first_token_ts"] - t0 for r in rows], dtype=float),
                    last_token_s=np.array([r["last_token_ts"] - t0 for r in rows], dtype=float),
                    output_tokens=np.array([r["output_toks"] for r in rows], dtype=np.int64))


def outcomes_from_records(requests: Sequence[RequestRecord]) -> Outcomes:
    """The simulated outcomes of a run's request records (finished ones, in id order)."""
    done = sorted((r for r in requests if r.is_finished), key=lambda r: r.id)
    t0 = min(r.arrival_ns for r in done) if done else 0
    return Outcomes(arrival_s=np.array([(r.arrival_ns - t0) / 1e9 for r in done]),
                    first_token_s=np.array([(r.first_token_ns - t0) / 1e9 for r in done]),
                    last_token_s=np.array([(r.last_token_ns - t0) / 1e9 for r in done]),
                    output_tokens=np.array([r.generated_tokens for r in done], dtype=np.int64))


def statistics(outcomes: Outcomes) -> dict[str, Any]:
    """``{metric: {mean, p50, p90, p99}}`` plus ``output_tokens_per_s``."""
    table: dict[str, Any] = {}
    for metric in METRICS:
        values = getattr(outcomes, metric)
        table[metric] = {"mean": float(np.mean(values)),
                         **{k: float(np.percentile(values, q)) for k, q in _PERCENTILES.items()}}
    table["output_tokens_per_s"] = outcomes.output_tokens_per_s
    return table


def _entry(simulated: float, measured: float) -> dict[str, float]:
    error = (simulated - measured) / measured * 100.0 if measured else float("nan")
    return {"simulated": simulated, "measured": measured, "error_pct": round(error, 3)}


def compare(simulated: Outcomes, measured: Outcomes) -> dict[str, Any]:
    """comparison.json content: each statistic as ``{simulated, measured, error_pct}`` (signed)."""
    sim, meas = statistics(simulated), statistics(measured)
    result: dict[str, Any] = {metric: {stat: _entry(sim[metric][stat], meas[metric][stat]) for stat in STATISTICS}
                              for metric in METRICS}
    result["output_tokens_per_s"] = _entry(sim["output_tokens_per_s"], meas["output_tokens_per_s"])
    result["num_requests"] = {"simulated": int(len(simulated.arrival_s)), "measured": int(len(measured.arrival_s))}
    return result


def format_comparison(comparison: dict[str, Any]) -> str:
    """A side-by-side text table of a comparison."""
    lines = [f"{'metric':<22}{'simulated':>12}{'measured':>12}{'error %':>10}"]
    for metric in METRICS:
        for stat in STATISTICS:
            e = comparison[metric][stat]
            label = f"{metric} {stat}"
            lines.append(f"{label:<22}{e['simulated']:>12.4f}{e['measured']:>12.4f}{e['error_pct']:>+10.2f}")
    e = comparison["output_tokens_per_s"]
    lines.append(f"{'output_tokens_per_s':<22}{e['simulated']:>12.1f}{e['measured']:>12.1f}{e['error_pct']:>+10.2f}")
    return "\n".join(lines)


def format_predicted(simulated: Outcomes) -> str:
    """A text table of simulated outcomes alone (no measurement given)."""
    sim = statistics(simulated)
    lines = [f"{'metric':<10}" + "".join(f"{s:>10}" for s in STATISTICS)]
    for metric in METRICS:
        lines.append(f"{metric:<10}" + "".join(f"{sim[metric][s]:>10.4f}" for s in STATISTICS))
    lines.append(f"output_tokens_per_s {sim['output_tokens_per_s']:.1f}")
    return "\n".join(lines)
