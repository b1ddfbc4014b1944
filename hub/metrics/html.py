"""report.html: one self-contained page per run folder (tables and plots, nothing fetched).

Main name: :func:`write_report_html`. The page holds the "Serving Benchmark
Result" block as ``vllm bench serve`` prints it, latency, throughput, SLO and
per-client tables, and every ``plots/*.png`` embedded as a ``data:`` URI, with
inline CSS and no external reference, so it opens offline, attached to a mail
or copied out of the run folder. A few lines of inline script count the plots
the browser decoded into ``#plots-status`` (what the browser test reads).

The page's parts serve the sweep's and compare's reports too (``studies/study_report.py``):
:func:`page_html`, :func:`table_html`, :func:`figures_html` and :func:`slo_targets_html`.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .benchmark import benchmark_text
from .intervals import LATENCY_STATS as INTERVAL_STATS
from .intervals import band_text, interval_of

# Plot file -> caption, in page order; other PNGs follow by name.
PLOT_CAPTIONS = {
    "latency_cdf.png": "Latency CDFs (ITL per token); dashed: SLO thresholds, dotted: their percentile",
    "throughput.png": "Completed requests and output tokens per second",
    "breakdown.png": "Where the time goes (mean per request)",
    "kv_usage.png": "KV-cache usage per client",
    "batch_size.png": "Batch size per client",
    "queue.png": "Waiting requests per client",
    "replicas.png": "Replicas of each autoscaled pool (solid: paid for, dashed: ready) below the load",
}
LATENCY_ROWS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL (per token)"), ("e2e_s", "E2E"),
                ("queue_s", "Queue"), ("tbt_max_s", "TBT max (per request)"))
LATENCY_STATS = (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99"), ("max", "max"))
STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1200px; color: #1d2330; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #d5d9e0; }
table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 3px 10px; border-bottom: 1px solid #e6e8ec; }
th { text-align: left; background: #f3f4f7; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f7f9; padding: 10px; display: inline-block; } .met { color: #137333; }
.missed, .error { color: #b3261e; font-weight: 600; } figure { margin: 16px 0; } img { max-width: 100%; }
figcaption { color: #555; font-size: 13px; } .wide { overflow-x: auto; }
"""
NO_SLO = "<p>No SLO in the config (<code>slo:</code>).</p>"
NO_PLOTS = "<p>No plots in this run folder (<code>output.plots: false</code>).</p>"
SCRIPT = """
window.addEventListener("load", function () {
  var images = document.querySelectorAll("img.plot"), shown = 0;
  images.forEach(function (img) { if (img.complete && img.naturalWidth > 0) { shown += 1; } });
  var status = document.getElementById("plots-status");
  if (status) { status.textContent = "plots shown: " + shown + " of " + images.length; }
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any, fmt: str = ".4g") -> str:
    return "-" if value is None else format(value, fmt) if isinstance(value, float) else _e(value)


def _ms(value: Any) -> str:
    return "-" if value is None else f"{1000 * value:.2f}"


def table_html(header: list[str], rows: list[list[str]], numeric_from: int = 1) -> str:
    """An HTML table of already-escaped cells; columns from ``numeric_from`` on align right. In a box that
    scrolls sideways where the table is wider than the page."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td class=\"n\">{c}</td>" if i >= numeric_from else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<div class=\"wide\"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _interval(summary: Mapping[str, Any], path: tuple[str, ...], show: Any) -> str:
    """`` [low–high]`` of the metric at ``path`` (prediction intervals), each as ``show`` formats it;
    empty where the run has none."""
    found = interval_of(summary, path)
    if found is None:
        return ""
    return f" <span class=\"interval\" style=\"color:#555\">[{show(found[0])}–{show(found[1])}]</span>"


def _latency_table(summary: Mapping[str, Any]) -> str:
    latency = summary.get("latency", {})
    rows = [[label] + [_ms(latency.get(name, {}).get(stat))
                       + (_interval(summary, ("latency", name, stat), _ms) if stat in INTERVAL_STATS else "")
                       for stat, _ in LATENCY_STATS]
            for name, label in LATENCY_ROWS if name in latency]
    return table_html(["latency (ms)"] + [label for _, label in LATENCY_STATS], rows)


def _intervals_note(summary: Mapping[str, Any]) -> str:
    """What the bracketed figures are and each client's declared step error (a run with intervals)."""
    block = summary.get("intervals")
    if not block:
        return ""
    clients = "".join(f"<li>{_e(client)}: {_e(band_text(band))}</li>" for client, band in block["clients"].items())
    return (f"<p id=\"intervals\">Prediction intervals in brackets: {_e(block.get('error') or block['what'])}."
            f"</p><ul>{clients}</ul>")


def _overview_table(summary: Mapping[str, Any]) -> str:
    reqs, tput, cost = summary.get("requests", {}), summary.get("throughput", {}), summary.get("cost", {})
    attainment = summary.get("slo_attainment")
    rows = [["requests completed / submitted", f"{_num(reqs.get('completed'))} / {_num(reqs.get('submitted'))}"],
            ["simulated time (s)", _num(summary.get("sim_time_s"), ".6g")],
            ["wall time (s)", _num(summary.get("wall_time_s"), ".3g")],
            ["throughput (req/s)", _num(tput.get("requests_per_s"))
             + _interval(summary, ("throughput", "requests_per_s"), _num)],
            ["output tokens/s", _num(tput.get("output_tokens_per_s"))
             + _interval(summary, ("throughput", "output_tokens_per_s"), _num)],
            ["input tokens/s", _num(tput.get("input_tokens_per_s"))],
            ["goodput (req/s)", _num(summary.get("goodput_requests_per_s"))
             + _interval(summary, ("goodput_requests_per_s",), _num)],
            ["SLO attainment", "-" if attainment is None else f"{100 * attainment:.1f}%"],
            ["preemptions", _num(summary.get("preemptions"))],
            ["cost (USD)", _num(cost.get("usd"))], ["tokens per USD", _num(cost.get("tokens_per_usd"))],
            *_energy_rows(summary.get("energy"))]
    return table_html(["metric", "value"], rows)


def _energy_rows(energy: Mapping[str, Any] | None) -> list[list[str]]:
    """The run's energy (docs/energy.md), or which clients lack a power figure."""
    if not energy:
        return []
    if "missing" in energy:
        return [["energy", "not reported: no power figure for " + ", ".join(_e(name) for name in energy["missing"])]]
    return [["energy (kJ), busy + idle", f"{_num(energy['total_j'] / 1e3)} = {_num(energy['busy_j'] / 1e3)} + "
                                         f"{_num(energy['idle_j'] / 1e3)}"],
            ["energy per output token (J)", _num(energy.get("per_output_token_j"))],
            ["output tokens per joule", _num(energy.get("tokens_per_j"))]]


def _slo_table(summary: Mapping[str, Any]) -> str:
    rows = []
    for metric, limits in sorted(summary.get("slo", {}).items()):
        for stat, entry in sorted(limits.items()):
            verdict = "met" if entry.get("met") else "missed"
            rows.append([_e(metric), _e(stat), _ms(entry.get("target")), _ms(entry.get("observed")),
                         f"<span class=\"{verdict}\">{verdict}</span>"])
    if not rows:
        return NO_SLO
    return table_html(["metric", "statistic", "target (ms)", "observed (ms)", "verdict"], rows, numeric_from=2)


def _client_table(summary: Mapping[str, Any]) -> str:
    rows = []
    for name, c in summary.get("clients", {}).items():
        util, kv = c.get("utilization"), c.get("max_kv_usage")
        latency = c.get("latency", {})
        rows.append([_e(name), _e(c.get("role", "-")), _e(c.get("model", "-")), _e(c.get("backend", "-")),
                     _e(c.get("fidelity", "-")), f"{_e(c.get('device', '-'))} x {_num(c.get('num_devices'))}",
                     "-" if util is None else f"{100 * util:.1f}%", _num(c.get("mean_batch_size"), ".3g"),
                     "-" if kv is None else f"{100 * kv:.1f}%", _num(c.get("requests", {}).get("completed")),
                     _ms(latency.get("ttft_s", {}).get("p90")), _ms(latency.get("itl_s", {}).get("p99"))])
    return table_html(["client", "role", "model", "backend", "fidelity", "devices", "busy", "mean batch", "peak KV",
                       "completed", "TTFT p90 (ms)", "ITL p99 (ms)"], rows, numeric_from=6)


def slo_targets_html(slo: Mapping[str, Mapping[str, float]]) -> str:
    """The SLO of a config (``slo:``, seconds) as a table of targets in ms, or a line saying there is none."""
    rows = [[_e(metric), _e(stat), _ms(target)] for metric, limits in sorted(slo.items())
            for stat, target in sorted(limits.items())]
    if not rows:
        return NO_SLO
    return table_html(["metric", "statistic", "target (ms)"], rows, numeric_from=2)


def figures_html(pngs: Sequence[Path], captions: Mapping[str, str], *, empty: str) -> str:
    """The PNGs embedded as ``data:`` URIs with their captions, those named in ``captions`` first in its
    order, the rest by name; ``empty`` (HTML) where there is none. The status line before them is what
    the page's script fills with the count of plots the browser decoded."""
    order = {name: i for i, name in enumerate(captions)}
    files = sorted(pngs, key=lambda p: (order.get(p.name, len(order)), p.name))
    if not files:
        return empty
    parts = ["<p id=\"plots-status\">plots shown: (needs a browser)</p>"]
    for path in files:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        caption = captions.get(path.name, path.stem)
        parts.append(f"<figure><img class=\"plot\" alt=\"{_e(path.name)}\" src=\"data:image/png;base64,{data}\">"
                     f"<figcaption>{_e(caption)} ({_e(path.name)})</figcaption></figure>")
    return "\n".join(parts)


def page_html(title: str, sections: list[str]) -> str:
    """A whole page: ``title``, the (HTML) ``sections`` that are not empty, the style and the plots' script."""
    body = "\n".join([f"<h1>{_e(title)}</h1>", *(s for s in sections if s)])
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<style>{STYLE}</style></head>\n<body>\n{body}\n<script>{SCRIPT}</script>\n</body></html>\n")


def report_html(summary: Mapping[str, Any], plots: Path, *, title: str) -> str:
    """The page's text for ``summary`` with the PNGs in ``plots`` (if any)."""
    error = summary.get("error")
    sections = [
        f"<p class=\"error\">The run stopped early: {_e(error)}</p>" if error else "",
        "<h2>Serving benchmark result</h2>",
        "<p>As <code>vllm bench serve</code> prints it (ITL per token).</p>",
        f"<pre id=\"benchmark\">{_e(benchmark_text(summary.get('benchmark', {})))}</pre>",
        "<h2>Latency</h2>", _intervals_note(summary), _latency_table(summary),
        "<h2>Throughput, goodput, cost and energy</h2>", _overview_table(summary),
        "<h2>SLOs</h2>", _slo_table(summary),
        "<h2>Clients</h2>", _client_table(summary),
        "<h2>Plots</h2>", figures_html(list(plots.glob("*.png")) if plots.is_dir() else [], PLOT_CAPTIONS,
                                       empty=NO_PLOTS),
    ]
    return page_html(title, sections)


def write_report_html(folder: Path, summary: Mapping[str, Any]) -> Path:
    """Writes ``folder/report.html`` from ``summary`` and ``folder/plots/*.png``; returns its path."""
    path = folder / "report.html"
    path.write_text(report_html(summary, folder / "plots", title=f"cosim run {folder.resolve().name}"),
                    encoding="utf-8")
    return path
