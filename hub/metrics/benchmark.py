"""The run's results as ``vllm bench serve`` reports them: milliseconds, its names, its layout.

- :func:`benchmark_block`: summary.json's ``benchmark`` block, keyed as the JSON
  ``vllm bench serve --save-result`` writes (``mean_ttft_ms``, ``median_tpot_ms``,
  ``p99_itl_ms``, ``request_throughput``, ...), so the two compare key by key.
- :func:`benchmark_text`: the "Serving Benchmark Result" block it prints.

Definitions follow vLLM's ``calculate_metrics``: over completed requests,
TTFT; TPOT = (E2E - TTFT) / (output tokens - 1) for requests with more than
one output token (one path's, see :mod:`.stats`); ITL = every gap between
consecutive tokens of a request, per token (:mod:`.itl`); E2EL = E2E. Token
totals count completed requests. Where vLLM writes 0 for an empty list, this
writes null. Percentiles: p50, p90, p95, p99 (vLLM's ``--metric-percentiles``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .itl import counted_statistic
from .stats import NS_PER_S, RequestMetrics

PERCENTILES = (50, 90, 95, 99)
PRINTED_PERCENTILES = (90, 99)
# (vLLM's key, label, header) per metric, in its order.
METRICS = (("ttft", "TTFT", "Time to First Token"), ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
           ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency"))
_STATISTICS = ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES))


def _ms_stats(key: str, values_s: np.ndarray, counts: np.ndarray | None = None) -> dict[str, float | None]:
    """``{mean,median,std,pXX}_<key>_ms`` of seconds (each counted ``counts`` times, if given)."""
    if counts is None:
        values_s = np.sort(values_s[~np.isnan(values_s)])
        counts = np.ones(values_s.size, dtype=np.int64)
    out: dict[str, float | None] = {}
    for stat in _STATISTICS:
        value = counted_statistic(values_s, counts, stat)
        out[f"{stat}_{key}_ms"] = None if value is None else value * 1000
    return out


def benchmark_block(input_tokens: np.ndarray, generated_tokens: np.ndarray, metrics: RequestMetrics,
                    gaps: tuple[np.ndarray, np.ndarray], *, sim_time_s: float, num_good: int | None) -> dict[str, Any]:
    """summary.json's ``benchmark`` block (see the module docstring).

    Args:
        input_tokens, generated_tokens, metrics: prompt and generated tokens and latency columns of the
            requests, aligned.
        gaps: per-token ITL as (distinct gaps in ns, tokens with each), from :func:`.itl.merged_gaps`.
        sim_time_s: the benchmark duration.
        num_good: completed requests meeting the SLO; None without an SLO (no goodput, as vLLM).
    """
    done = metrics.finished
    total_input = int(np.sum(input_tokens[done]))
    total_output = int(np.sum(generated_tokens[done]))
    rate = (lambda n: n / sim_time_s) if sim_time_s > 0 else (lambda n: None)
    block: dict[str, Any] = {
        "duration": sim_time_s, "completed": int(np.count_nonzero(done)),
        "failed": len(done) - int(np.count_nonzero(done)),
        "total_input_tokens": total_input, "total_output_tokens": total_output,
        "request_throughput": rate(int(np.count_nonzero(done))),
        "request_goodput": rate(num_good) if num_good is not None else None,
        "output_throughput": rate(total_output), "total_token_throughput": rate(total_input + total_output),
    }
    block.update(_ms_stats("ttft", metrics.ttft_s[done]))
    block.update(_ms_stats("tpot", metrics.tpot_s[done]))
    block.update(_ms_stats("itl", gaps[0] / NS_PER_S, gaps[1]))
    block.update(_ms_stats("e2el", metrics.e2e_s[done]))
    return block


def _row(label: str, value: Any, digits: bool = True) -> str:
    if value is None:
        return f"{label:<40} {'-':<10}"
    return f"{label:<40} {value:<10.2f}" if digits else f"{label:<40} {value:<10}"


def benchmark_text(block: Mapping[str, Any]) -> str:
    """The block as ``vllm bench serve`` prints it (``{:<40} {:<10.2f}`` rows, 50-wide rules)."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
             _row("Successful requests:", block.get("completed"), digits=False),
             _row("Failed requests:", block.get("failed"), digits=False),
             _row("Benchmark duration (s):", block.get("duration")),
             _row("Total input tokens:", block.get("total_input_tokens"), digits=False),
             _row("Total generated tokens:", block.get("total_output_tokens"), digits=False),
             _row("Request throughput (req/s):", block.get("request_throughput"))]
    if block.get("request_goodput") is not None:
        lines.append(_row("Request goodput (req/s):", block["request_goodput"]))
    lines += [_row("Output token throughput (tok/s):", block.get("output_throughput")),
              _row("Total Token throughput (tok/s):", block.get("total_token_throughput"))]
    for key, label, header in METRICS:
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        lines.append(_row(f"Mean {label} (ms):", block.get(f"mean_{key}_ms")))
        lines.append(_row(f"Median {label} (ms):", block.get(f"median_{key}_ms")))
        lines += [_row(f"P{p} {label} (ms):", block.get(f"p{p}_{key}_ms")) for p in PRINTED_PERCENTILES]
    lines.append("=" * 50)
    return "\n".join(lines)
