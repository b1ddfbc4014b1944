"""``output.metric_percentiles`` and ``output.percentile_metrics``: what the ``benchmark`` block reports.

They are ``vllm bench serve``'s ``--metric-percentiles`` and ``--percentile-metrics`` (vLLM's
``benchmarks/serve.py``), written as that tool takes them: a comma-separated string (``"50,90,99"``,
``"ttft,tpot,itl,e2el"``), or a YAML list. Defaults are the tool's: the 99th percentile of TTFT,
TPOT and ITL. :func:`percentiles` and :func:`percentile_metrics` parse them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: The metrics ``--percentile-metrics`` may name here, in the order vLLM prints them. vLLM's
#: ``client_queue_time`` and ``e2el_including_client_queue`` need ``--max-concurrency``, which cosim
#: does not take.
METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_PERCENTILES = "99"
DEFAULT_METRICS = "ttft,tpot,itl"


def _items(value: str | Sequence[float | str]) -> list[str]:
    parts = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [p.strip() for p in parts]


def percentiles(value: str | Sequence[float | str]) -> tuple[float, ...]:
    """The percentiles of ``metric_percentiles``, in the order given.

    Raises:
        ValueError: an item that is not a number in [0, 100], a repeat, or none at all.
    """
    out: list[float] = []
    for item in _items(value):
        try:
            p = float(item)
        except ValueError:
            raise ValueError(f"{item!r} is not a number; give percentiles as \"50,90,99\"") from None
        if not (math.isfinite(p) and 0 <= p <= 100):
            raise ValueError(f"percentile {percentile_word(p)} is outside [0, 100]")
        if p in out:
            raise ValueError(f"percentile {percentile_word(p)} is given twice")
        out.append(p)
    if not out:
        raise ValueError("give at least one percentile, e.g. \"99\"")
    return tuple(out)


def percentile_metrics(value: str | Sequence[str]) -> tuple[str, ...]:
    """The metrics of ``percentile_metrics``, in vLLM's printing order (ttft, tpot, itl, e2el).

    Raises:
        ValueError: an unknown metric, or none at all.
    """
    names = set(_items(value))
    unknown = sorted(names - set(METRICS))
    if unknown:
        raise ValueError(f"unknown metric {', '.join(map(repr, unknown))}; known: {', '.join(METRICS)}")
    if not names:
        raise ValueError("give at least one metric, e.g. \"ttft,tpot,itl\"")
    return tuple(m for m in METRICS if m in names)


def percentile_word(p: float) -> str:
    """A percentile as vLLM names it in keys and labels: ``99`` for 99.0, ``99.9`` for 99.9."""
    return str(int(p)) if int(p) == p else str(p)
