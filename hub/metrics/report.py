"""The short metrics table ``cosim run`` prints: :func:`format_table` (latencies in ms, as vLLM's benchmark)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .intervals import LATENCY_STATS, band_text, interval_of, value_at


def _num(value: Any, unit: str = "", digits: int = 4) -> str:
    """A compact number, or "-" for missing values."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}{unit}"
    return f"{value}{unit}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ms(value: Any) -> str:
    """Seconds as milliseconds with two decimals, as ``vllm bench serve`` prints them."""
    return "-" if value is None else f"{1000 * value:.2f}"


def _latency_rows(summary: Mapping[str, Any]) -> list[str]:
    latency = summary.get("latency", {})
    stats = (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99"), ("max", "max"))
    rows = [f"  {'latency (ms)':<16}" + "".join(f"{label:>11}" for _, label in stats)]
    for name, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL per token"), ("e2e_s", "E2E"),
                        ("queue_s", "queue")):
        block = latency.get(name, {})
        rows.append(f"  {label:<16}" + "".join(f"{_ms(block.get(s)):>11}" for s, _ in stats))
    return rows


def _slo_rows(summary: Mapping[str, Any]) -> list[str]:
    rows = []
    for metric, limits in sorted(summary.get("slo", {}).items()):
        for stat, entry in sorted(limits.items()):
            verdict = "met" if entry.get("met") else "MISSED"
            rows.append(f"  SLO {metric} {stat} <= {_num(entry.get('target'))}: "
                        f"{_num(entry.get('observed'))} ({verdict})")
    return rows


def _client_rows(summary: Mapping[str, Any]) -> list[str]:
    clients = summary.get("clients", {})
    if not clients:
        return []
    rows = [f"  {'client':<16}{'role':<13}{'backend':<14}{'fidelity':<20}{'util':>8}{'batch':>8}{'done':>8}"]
    for name, c in clients.items():
        rows.append(f"  {name:<16.16}{c.get('role', '-')!s:<13.13}{c.get('backend', '-')!s:<14.14}"
                    f"{c.get('fidelity', '-')!s:<20.20}"
                    f"{_pct(c.get('utilization')):>8}{_num(c.get('mean_batch_size'), digits=3):>8}"
                    f"{_num(c.get('requests', {}).get('completed')):>8}")
    return rows


def _energy_row(summary: Mapping[str, Any]) -> list[str]:
    energy = summary.get("energy")
    if not energy:
        return []
    if "missing" in energy:
        return [f"  energy      not reported: no power figure for {', '.join(energy['missing'])}"]
    kj = {key: _num(energy[key] / 1e3, " kJ") for key in ("total_j", "busy_j", "idle_j")}
    return [f"  energy      {kj['total_j']} (busy {kj['busy_j']}, idle {kj['idle_j']}), "
            f"{_num(energy.get('per_output_token_j'), ' J')}/output token, {_num(energy.get('tokens_per_j'))} "
            f"tokens/J, mean {_num(energy.get('mean_power_w'), ' W')}"]


def _replica_rows(summary: Mapping[str, Any]) -> list[str]:
    """A line per autoscaled pool: its replicas over the run and its scaling decisions."""
    return [f"  replicas    {pool}: mean {_num(block.get('mean_replicas'))}, max {_num(block.get('max_replicas'))} "
            f"of {_num(block.get('min'))}..{_num(block.get('max'))} ({_num(block.get('scale_ups'))} up, "
            f"{_num(block.get('scale_downs'))} down), {_num(block.get('replica_seconds'), ' replica-s')}, "
            f"provisioning {_num(block.get('provisioning_s'), ' s')}"
            for pool, block in sorted((summary.get("autoscaling") or {}).items())]


def _interval_rows(summary: Mapping[str, Any]) -> list[str]:
    """The prediction intervals (``intervals``): each headline figure and its [low, high], and each
    client's declared step error; nothing for a run without them."""
    block = summary.get("intervals")
    if not block:
        return []
    rows = [f"  intervals   {block.get('error') or block['what']}"]
    latency = []
    for name, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL per token"), ("e2e_s", "E2E")):
        cells = [f"{_ms(value_at(summary, ('latency', name, stat)))} [{_ms(found[0])}, {_ms(found[1])}]"
                 if (found := interval_of(summary, ("latency", name, stat))) else "-" for stat in LATENCY_STATS]
        if cells != ["-"] * len(LATENCY_STATS):
            latency.append(f"  {label:<16}" + "".join(f"{cell:>28}" for cell in cells))
    if latency:
        rows += [f"  {'interval (ms)':<16}" + "".join(f"{stat:>28}" for stat in LATENCY_STATS), *latency]
    for path, label in ((("throughput", "requests_per_s"), "req/s"),
                        (("throughput", "output_tokens_per_s"), "output tok/s"),
                        (("goodput_requests_per_s",), "goodput req/s")):
        if found := interval_of(summary, path):
            rows.append(f"  {label:<16}{_num(value_at(summary, path))} [{_num(found[0])}, {_num(found[1])}]")
    rows += [f"  step error  {client}: {band_text(band)}" for client, band in block["clients"].items()]
    return rows


def format_table(summary: Mapping[str, Any]) -> str:
    """A few lines with the key metrics of a summary (missing values show as "-")."""
    reqs = summary.get("requests", {})
    tput = summary.get("throughput", {})
    cost = summary.get("cost", {})
    lines = [
        (f"  requests    {_num(reqs.get('completed'))}/{_num(reqs.get('submitted'))} completed in "
        f"{_num(summary.get('sim_time_s'), ' s', 6)} simulated ({_num(summary.get('wall_time_s'), ' s', 3)} wall)"),
        *_latency_rows(summary),
        (f"  throughput  {_num(tput.get('requests_per_s'))} req/s, "
        f"{_num(tput.get('output_tokens_per_s'))} output tok/s, {_num(tput.get('input_tokens_per_s'))} input tok/s"),
        (f"  goodput     {_num(summary.get('goodput_requests_per_s'))} req/s, "
        f"SLO attainment {_pct(summary.get('slo_attainment'))}"),
        *_slo_rows(summary),
        f"  preemptions {_num(summary.get('preemptions'))}",
    ]
    if cost.get("usd"):
        lines.append(f"  cost        ${_num(cost.get('usd'))}, {_num(cost.get('tokens_per_usd'))} tokens/$")
    return "\n".join(lines + _interval_rows(summary) + _replica_rows(summary) + _energy_row(summary)
                     + _client_rows(summary))
