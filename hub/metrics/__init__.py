"""Run metrics and the run folder.

- :func:`summarize`: records -> summary.json content (latency percentiles,
  throughput, goodput, SLO attainment, cost, per-client utilization).
- :func:`write_run_folder`: summary.json, requests.csv, clients.csv,
  trace.json (Chrome trace format, opens in Perfetto), plots/*.png and report.html.
- :func:`format_table`: the short table ``cosim run`` prints (latencies in ms).
- :func:`benchmark_text`: the "Serving Benchmark Result" block of ``vllm bench serve``.
- :func:`write_report_html`: the self-contained ``report.html`` of a run folder.
- :class:`ProgressBar`: completed requests and simulated time on a terminal.
- :func:`validate_slo`, :func:`request_metrics`: for config checks and notebooks.
"""

from ..config.slo import SLO_METRICS, SLO_STATISTICS, validate_slo
from .benchmark import benchmark_text
from .breakdown import plot_breakdown, stage_breakdown, stage_table
from .html import write_report_html
from .progress import ProgressBar
from .report import format_table
from .run_folder import summary_json, write_run_folder
from .stats import RequestMetrics, request_metrics
from .summary import attributed_client, summarize

__all__ = [
    "SLO_METRICS",
    "SLO_STATISTICS",
    "ProgressBar",
    "RequestMetrics",
    "attributed_client",
    "benchmark_text",
    "format_table",
    "plot_breakdown",
    "request_metrics",
    "stage_breakdown",
    "stage_table",
    "summarize",
    "summary_json",
    "validate_slo",
    "write_report_html",
    "write_run_folder",
]
