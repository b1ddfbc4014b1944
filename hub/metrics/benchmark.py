"""The run's results as ``vllm bench serve`` reports them: milliseconds, its names, its layout.

- :func:`benchmark_block`: summary.json's ``benchmark`` block, with exactly the keys of the JSON
  ``vllm bench serve --save-result`` writes (vLLM's ``benchmarks/serve.py``): the set-up keys
  (:mod:`.benchmark_setup`), ``duration`` to ``total_token_throughput``, ``max_output_tokens_per_s``,
  ``max_concurrent_requests``, ``rtfx``, then ``mean_``, ``median_``, ``std_`` and one ``p<q>_`` key
  per percentile of ``output.metric_percentiles`` (vLLM's default: 99) for each metric of
  ``output.percentile_metrics`` (default: TTFT, TPOT, ITL), in ms.
- :func:`benchmark_text`: the "Serving Benchmark Result" block it prints, line for line.

Definitions follow vLLM's ``calculate_metrics``: over completed requests,
TTFT; TPOT = (E2E - TTFT) / (output tokens - 1) for requests with more than
one output token (one path's, see :mod:`.stats`); ITL = every gap between
consecutive tokens of a request, per token (:mod:`.itl`); E2EL = E2E. Token
totals count completed requests. ``max_concurrent_requests`` is vLLM's too: in
one-second buckets counted from the first request's send, the requests in flight
(sent to last token) at any moment of the bucket, at most. Where vLLM writes 0 for an empty list, this writes
null; ``request_goodput`` is null without an SLO, as vLLM's without
``--goodput``. ``rtfx`` is 0 (no audio). ``max_output_tokens_per_s`` is the
most tokens that came out within one second, seconds counted from the first
request's send, as vLLM's buckets; a token is one per request per step (per
delivery over HTTP), as vLLM times streamed chunks. It counts every request's
tokens, vLLM completed requests' only: the two differ in a partial run alone.
With ``output.benchmark_details`` (vLLM's ``--save-detailed``) the block also has
its per-request arrays (:func:`detailed_arrays`); vLLM's ``--save-result`` alone
leaves them out, and so does cosim by default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..config.bench_report import percentile_word
from .benchmark_setup import BenchmarkSetup
from .itl import counted_statistic
from .stats import NS_PER_S, RequestMetrics

# (vLLM's key, label, header) per metric, in its order.
METRICS = (("ttft", "TTFT", "Time to First Token"), ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
           ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency"))
_PERCENTILE_KEY = re.compile(r"^p(\d+(?:\.\d+)?)_([a-z0-9]+)_ms$")


def _ms_stats(key: str, values_s: np.ndarray, percentiles: tuple[float, ...],
              counts: np.ndarray | None = None) -> dict[str, float | None]:
    """``{mean,median,std,p<q>}_<key>_ms`` of seconds (each counted ``counts`` times, if given)."""
    if counts is None:
        values_s = np.sort(values_s[~np.isnan(values_s)])
        counts = np.ones(values_s.size, dtype=np.int64)
    names = {"mean": "mean", "median": "median", "std": "std"}
    names.update({f"p{percentile_word(p)}": f"p{p}" for p in percentiles})
    out: dict[str, float | None] = {}
    for name, stat in names.items():
        value = counted_statistic(values_s, counts, stat)
        out[f"{name}_{key}_ms"] = None if value is None else value * 1000
    return out


def peak_concurrency(start_ns: np.ndarray, end_ns: np.ndarray) -> int:
    """The most requests in flight within one second, seconds counted from the first send: vLLM's
    ``max_concurrent_requests`` (``benchmarks/serve.py``), which counts a request in every bucket from its
    send's to its end's, both included, so requests that never overlap still share a bucket."""
    if start_ns.size == 0:
        return 0
    first = int(start_ns.min())
    begins, ends = (start_ns - first) // NS_PER_S, (end_ns - first) // NS_PER_S
    active = np.zeros(int(ends.max()) + 2, dtype=np.int64)
    np.add.at(active, begins, 1)
    np.add.at(active, ends + 1, -1)
    return int(np.cumsum(active).max())


def peak_tokens_per_s(at_ns: np.ndarray, tokens: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> float | None:
    """The most tokens that came out within one second, seconds counted from the first request's send
    (vLLM's buckets: ``int(token time - first send)`` over the requests' whole span); None: no requests.

    Args:
        at_ns, tokens: tokens at each instant (:class:`cosim.hub.sim.token_times.TokenTimes`).
        start_ns, end_ns: when the completed requests were sent and got their last token.
    """
    if start_ns.size == 0:
        return None
    origin = int(start_ns.min())
    num_buckets = -(-(int(end_ns.max()) - origin) // NS_PER_S) + 1
    offset = at_ns - origin
    bucket = np.where(offset >= 0, offset // NS_PER_S, -(-offset // NS_PER_S))  # int() truncates toward 0
    kept = (bucket >= 0) & (bucket < num_buckets)
    return float(np.bincount(bucket[kept], weights=tokens[kept], minlength=num_buckets).max())


UNFINISHED = "not finished when the run stopped"  # a partial run's request, in ``errors``


def detailed_arrays(input_tokens: np.ndarray, generated_tokens: np.ndarray, metrics: RequestMetrics,
                    start_ns: np.ndarray, itls_ns: Sequence[Sequence[int]]) -> dict[str, list[Any]]:
    """``--save-detailed``'s per-request arrays, in request order: prompt lengths, output lengths (0 for
    a request not finished, as vLLM's failed ones), TTFT and every gap between tokens (s), send times (s
    of simulated time), texts (empty: cosim generates none) and errors ("" for a completed request)."""
    done = metrics.finished
    return {"input_lens": input_tokens.tolist(), "output_lens": np.where(done, generated_tokens, 0).tolist(),
            "ttfts": [None if np.isnan(t) else t for t in metrics.ttft_s.tolist()],
            "itls": [[gap / NS_PER_S for gap in gaps] for gaps in itls_ns],
            "start_times": [None if t < 0 else t / NS_PER_S for t in start_ns.tolist()],
            "generated_texts": [""] * len(done), "errors": ["" if d else UNFINISHED for d in done.tolist()]}


def benchmark_block(input_tokens: np.ndarray, generated_tokens: np.ndarray, metrics: RequestMetrics,
                    gaps: tuple[np.ndarray, np.ndarray], spans_ns: tuple[np.ndarray, np.ndarray],
                    token_times: tuple[np.ndarray, np.ndarray], *, sim_time_s: float, num_good: int | None,
                    setup: BenchmarkSetup, itls_ns: Sequence[Sequence[int]] = ()) -> dict[str, Any]:
    """summary.json's ``benchmark`` block (see the module docstring).

    Args:
        input_tokens, generated_tokens, metrics: prompt and generated tokens and latency columns of the
            requests, aligned.
        gaps: per-token ITL as (distinct gaps in ns, tokens with each), from :func:`.itl.merged_gaps`.
        spans_ns: when each request was sent and when its last token came, aligned (read where finished).
        token_times: output tokens at each instant, as (instants in ns, tokens), from :mod:`..sim.token_times`.
        sim_time_s: the benchmark duration.
        num_good: completed requests meeting the SLO; None without an SLO (no goodput, as vLLM).
        setup: the set-up keys, percentiles and metrics, and whether to add the per-request arrays.
        itls_ns: each request's gaps between tokens in ns, aligned (read with ``setup.details``).
    """
    done = metrics.finished
    completed = int(np.count_nonzero(done))
    total_input = int(np.sum(input_tokens[done]))
    total_output = int(np.sum(generated_tokens[done]))
    rate = (lambda n: n / sim_time_s) if sim_time_s > 0 else (lambda n: None)
    block: dict[str, Any] = setup.keys(len(done))
    block.update({
        "duration": sim_time_s, "completed": completed, "failed": len(done) - completed,
        "total_input_tokens": total_input, "total_output_tokens": total_output,
        "request_throughput": rate(completed),
        "request_goodput": rate(num_good) if num_good is not None else None,
        "output_throughput": rate(total_output), "total_token_throughput": rate(total_input + total_output),
    })
    if setup.details:  # where vLLM's result has them
        block.update(detailed_arrays(input_tokens, generated_tokens, metrics, spans_ns[0], itls_ns))
    block.update({
        "max_output_tokens_per_s": peak_tokens_per_s(*token_times, spans_ns[0][done], spans_ns[1][done]),
        "max_concurrent_requests": peak_concurrency(spans_ns[0][done], spans_ns[1][done]),
        "rtfx": 0.0,
    })
    columns = {"ttft": metrics.ttft_s, "tpot": metrics.tpot_s, "e2el": metrics.e2e_s}
    for key in setup.metrics:
        if key == "itl":
            block.update(_ms_stats(key, gaps[0] / NS_PER_S, setup.percentiles, gaps[1]))
        else:
            block.update(_ms_stats(key, columns[key][done], setup.percentiles))
    return block


def _row(label: str, value: Any, digits: bool = True) -> str:
    if value is None:
        return f"{label:<40} {'-':<10}"
    return f"{label:<40} {value:<10.2f}" if digits else f"{label:<40} {value:<10}"


def _percentiles(block: Mapping[str, Any], key: str) -> list[str]:
    """The percentile words of a metric's keys, in ascending order (summary.json sorts its keys)."""
    words = [m.group(1) for name in block if (m := _PERCENTILE_KEY.match(name)) and m.group(2) == key]
    return sorted(words, key=float)


def benchmark_text(block: Mapping[str, Any]) -> str:
    """The block as ``vllm bench serve`` prints it (``{:<40} {:<10.2f}`` rows, 50-wide rules): the rate and
    concurrency lines where set, goodput where asked, the metrics and percentiles the block has."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
             _row("Successful requests:", block.get("completed"), digits=False),
             _row("Failed requests:", block.get("failed"), digits=False)]
    if block.get("max_concurrency") is not None:
        lines.append(_row("Maximum request concurrency:", block["max_concurrency"], digits=False))
    if block.get("request_rate") not in (None, "inf"):
        lines.append(_row("Request rate configured (RPS):", block["request_rate"]))
    lines += [_row("Benchmark duration (s):", block.get("duration")),
              _row("Total input tokens:", block.get("total_input_tokens"), digits=False),
              _row("Total generated tokens:", block.get("total_output_tokens"), digits=False),
              _row("Request throughput (req/s):", block.get("request_throughput"))]
    if block.get("request_goodput") is not None:
        lines.append(_row("Request goodput (req/s):", block["request_goodput"]))
    lines += [_row("Output token throughput (tok/s):", block.get("output_throughput")),
              _row("Peak output token throughput (tok/s):", block.get("max_output_tokens_per_s")),
              _row("Peak concurrent requests:", block.get("max_concurrent_requests"))]
    if block.get("rtfx"):
        lines.append(_row("RTFx (Inverse Real-Time Factor):", block["rtfx"]))
    lines.append(_row("Total token throughput (tok/s):", block.get("total_token_throughput")))
    for key, label, header in METRICS:
        if f"mean_{key}_ms" not in block:
            continue
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        lines.append(_row(f"Mean {label} (ms):", block.get(f"mean_{key}_ms")))
        lines.append(_row(f"Median {label} (ms):", block.get(f"median_{key}_ms")))
        lines += [_row(f"P{word} {label} (ms):", block.get(f"p{word}_{key}_ms")) for word in _percentiles(block, key)]
    lines.append("=" * 50)
    return "\n".join(lines)
