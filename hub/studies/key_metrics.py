"""The key metrics of a run, as sweep.csv's columns and compare's rows: where each is in summary.json, its
label with its unit, and how it is shown.

Main names: :data:`METRICS`, :data:`METRIC_COLUMNS`, :data:`METRIC_ROWS` and :func:`key_metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Columns of sweep.csv after the varied keys: where each comes from in summary.json.
METRICS: dict[str, tuple[str, ...]] = {
    "completed": ("requests", "completed"),
    "ttft_s_mean": ("latency", "ttft_s", "mean"),
    "ttft_s_p90": ("latency", "ttft_s", "p90"),
    "tpot_s_mean": ("latency", "tpot_s", "mean"),
    "tpot_s_p90": ("latency", "tpot_s", "p90"),
    "e2e_s_mean": ("latency", "e2e_s", "mean"),
    "e2e_s_p90": ("latency", "e2e_s", "p90"),
    "throughput_requests_per_s": ("throughput", "requests_per_s"),
    "throughput_output_tokens_per_s": ("throughput", "output_tokens_per_s"),
    "goodput_requests_per_s": ("goodput_requests_per_s",),
    "slo_attainment": ("slo_attainment",),
    "energy_per_output_token_j": ("energy", "per_output_token_j"),
    "tokens_per_j": ("energy", "tokens_per_j"),
}
METRIC_COLUMNS = tuple(METRICS)
# (key of key_metrics, label with unit, scale from the summary's unit, format) of each metric as compare's
# table and the sweep's and compare's report.html show it.
METRIC_ROWS = (
    ("completed", "completed requests", 1.0, "{:.0f}"),
    ("ttft_s_mean", "TTFT mean (ms)", 1000.0, "{:.4g}"),
    ("ttft_s_p90", "TTFT p90 (ms)", 1000.0, "{:.4g}"),
    ("tpot_s_mean", "TPOT mean (ms)", 1000.0, "{:.4g}"),
    ("tpot_s_p90", "TPOT p90 (ms)", 1000.0, "{:.4g}"),
    ("e2e_s_mean", "E2E mean (s)", 1.0, "{:.4g}"),
    ("e2e_s_p90", "E2E p90 (s)", 1.0, "{:.4g}"),
    ("throughput_requests_per_s", "throughput (req/s)", 1.0, "{:.4g}"),
    ("throughput_output_tokens_per_s", "output tokens/s", 1.0, "{:.4g}"),
    ("goodput_requests_per_s", "goodput (req/s)", 1.0, "{:.4g}"),
    ("slo_attainment", "SLO attainment (%)", 100.0, "{:.4g}"),
    ("energy_per_output_token_j", "energy per output token (J)", 1.0, "{:.4g}"),
    ("tokens_per_j", "output tokens per joule", 1.0, "{:.4g}"),
)


def key_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`METRICS` of a summary (None where it has none, e.g. TPOT of one-token answers)."""
    row: dict[str, Any] = {}
    for column, path in METRICS.items():
        node: Any = summary
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        row[column] = node
    return row
