"""The run summary (summary.json): requests, latency, throughput, goodput, SLOs, cost, clients.

Main name: :func:`summarize`. Conventions, so numbers are comparable across runs:

- Latency statistics cover completed requests only; unfinished requests of a
  partial run are counted in ``requests.submitted`` and nowhere else.
- ``queue_s`` of a request is the sum over its stages of start - enqueue
  (see :func:`cosim.hub.metrics.stats.queue_ns`).
- ``latency.itl_s`` is per token, not per request: every gap between
  consecutive tokens of a request (:mod:`.itl`), of the tokens each client
  sampled; ``benchmark`` repeats the latencies in milliseconds under
  ``vllm bench serve``'s names (:mod:`.benchmark`).
- ``latency`` is the engine's: from the engine's arrival to its steps' ends.
  With the scenario's ``frontend`` (vLLM's API server, docs/frontend.md),
  ``client_latency`` has TTFT, TPOT, E2E and ITL as the requests' clients saw
  them (sent -> streamed chunk received), and ``benchmark`` is then those, as
  ``vllm bench serve`` measures them over HTTP.
- Rates divide by the simulated time. ``output_tokens_per_s`` counts every token
  generated (finished or not); ``input_tokens_per_s`` counts the prompts of
  requests whose first token came out.
- A request's latency is attributed to the client that served its last decode
  stage, or its last stage when it has no decode stage.
- Cost: device-hours = num_devices x simulated hours per client (an autoscaled
  replica's: the hours it existed, provisioning included), priced at the
  client's ``price_per_hour_usd`` per device-hour.
- Energy: busy and idle joules, per request, per output token and tokens per
  joule, of the run and of each LLM client (:mod:`.energy`); a client without a
  power figure is reported missing, and then the run has no total.
- Every float is rounded to 9 significant digits and NaN becomes null, so the
  same records give byte-identical JSON; only ``wall_time_s`` varies.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from cosim_core import attributed_client

from ..config.slo import Slo, validate_slo
from ..sim.records import ClientInfo, ClientTimeline, RequestRecord
from ..sim.token_times import TokenTimes
from .benchmark import benchmark_block
from .benchmark_setup import BenchmarkSetup
from .energy import client_energy, run_energy
from .itl import itl_block, merged_gaps
from .request_table import RequestTable
from .slo import meets_slo, slo_report
from .stats import NS_PER_S, RequestMetrics, clean, latency_block

__all__ = ["attributed_client", "client_names", "summarize", "summarize_table"]

logger = logging.getLogger(__name__)


def _rate(count: float, sim_time_s: float) -> float | None:
    return count / sim_time_s if sim_time_s > 0 else None


def _joined(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Token times of several clients, (instants, tokens) each, as one pair of arrays."""
    return (np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0, dtype=np.int64),
            np.concatenate([p[1] for p in pairs]) if pairs else np.zeros(0, dtype=np.int64))


def _traffic_block(metrics: RequestMetrics, tokens: Mapping[str, np.ndarray], mask: np.ndarray,
                   good: np.ndarray, sim_time_s: float) -> dict[str, Any]:
    """Counts, latency, throughput, goodput and attainment of the selected requests."""
    completed = int(np.count_nonzero(metrics.finished & mask))
    meeting = int(np.count_nonzero(good & mask))
    generated = int(np.sum(tokens["generated"][mask]))
    cached = int(np.sum(tokens["cached"][mask]))  # prompt tokens served from a prefix cache
    return {
        "requests": {"submitted": int(np.count_nonzero(mask)), "completed": completed,
                     "meeting_slo": meeting},
        "latency": latency_block(metrics, metrics.finished & mask),
        "throughput": {"requests_per_s": _rate(completed, sim_time_s),
                       "output_tokens_per_s": _rate(generated, sim_time_s),
                       "input_tokens_per_s": _rate(int(np.sum(tokens["prefilled"][mask])), sim_time_s)},
        "goodput_requests_per_s": _rate(meeting, sim_time_s),
        "slo_attainment": meeting / completed if completed else None,
        "preemptions": int(np.sum(tokens["preemptions"][mask])),
        "output_tokens": generated,
        "prefix_cache_hit_rate": cached / prompt if (prompt := int(np.sum(tokens["prefilled"][mask]))) else None,
    }


def _timeline_block(info: ClientInfo | None, timeline: ClientTimeline | None,
                    sim_time_ns: int) -> dict[str, Any]:
    """Utilization, batch size, KV peak and identity of one client."""
    cols = timeline.columns() if timeline is not None else None
    steps = len(timeline) if timeline is not None else 0
    busy_ns = int(np.sum(cols["end_ns"] - cols["start_ns"])) if cols is not None and steps else 0
    block: dict[str, Any] = {
        "steps": steps,
        "busy_s": busy_ns / NS_PER_S,
        "utilization": busy_ns / sim_time_ns if sim_time_ns > 0 else None,
        "mean_batch_size": float(np.mean(cols["num_seqs"])) if cols is not None and steps else None,
        "max_kv_blocks_used": int(np.max(cols["kv_blocks_used"])) if cols is not None and steps else 0,
        "max_num_waiting": int(np.max(cols["num_waiting"])) if cols is not None and steps else 0,
    }
    if info is not None:
        existed_ns = info.existed_ns if info.existed_ns is not None else sim_time_ns  # a replica's life
        device_hours = info.num_devices * existed_ns / NS_PER_S / 3600
        block.update(role=info.role, model=info.model, backend=info.backend, fidelity=info.fidelity,
                     device=info.device, num_devices=info.num_devices,
                     kv_capacity_blocks=info.kv_capacity_blocks,
                     device_hours=device_hours, cost_usd=device_hours * info.price_per_hour_usd)
        if info.kv_capacity_blocks > 0:
            block["max_kv_usage"] = block["max_kv_blocks_used"] / info.kv_capacity_blocks
        if info.kv_memory is not None:  # one device's memory as vLLM's profiling splits it, bytes
            block["kv_memory"] = dict(info.kv_memory)
    if timeline is not None and timeline.lora is not None:
        block["lora"] = timeline.lora.summary()
    if timeline is not None and timeline.speculative is not None:
        block["speculative"] = timeline.speculative.summary()
    if timeline is not None and timeline.offload is not None:
        block["kv_offload"] = timeline.offload.summary()
    return block


def client_names(clients: Sequence[ClientInfo], timelines: Mapping[str, ClientTimeline]) -> list[str]:
    """Clients in config order, then any timeline-only names sorted."""
    names = [c.name for c in clients]
    return names + sorted(set(timelines) - set(names))


def summarize(requests: Sequence[RequestRecord], clients: Sequence[ClientInfo],
              timelines: Mapping[str, ClientTimeline], *, slo: Slo, sim_time_ns: int,
              wall_time_s: float, extra: Mapping[str, Any] | None = None,
              benchmark: BenchmarkSetup | None = None) -> dict[str, Any]:
    """Builds the summary.json content of a (possibly partial) run.

    Args:
        requests: every request submitted, finished or not.
        clients: static client facts, in config order.
        timelines: per-client step timelines by client name.
        slo: ``{metric: {statistic: threshold_s}}``; may be empty.
        sim_time_ns: simulated time the run covered.
        wall_time_s: real seconds the run took (the one nondeterministic field).
        extra: merged at top level (backend stats, cache hit rate, ...); its keys win.
        benchmark: the ``benchmark`` block's set-up keys, percentiles and metrics (default: vLLM's
            defaults, no model, requests at once).

    Returns:
        A JSON-ready dict (rounded floats, None for undefined values).

    Raises:
        ScenarioError: the SLO names an unknown metric or statistic.
    """
    return summarize_table(RequestTable.of(requests), clients, timelines, slo=slo, sim_time_ns=sim_time_ns,
                           wall_time_s=wall_time_s, extra=extra, benchmark=benchmark)


def judged_figures(table: RequestTable, clients: Sequence[ClientInfo], timelines: Mapping[str, ClientTimeline], *,
                   slo: Slo, sim_time_ns: int) -> dict[str, Any]:
    """The part of :func:`summarize_table`'s summary a goodput search judges a run by, equal to it
    (cleaned alike): ``requests.completed``, ``slo`` and ``energy`` (absent where no client's energy
    is modelled). The rest (latency percentiles, ITL gaps, per-client blocks) was a tenth of a search's CPU."""
    validate_slo(slo)
    metrics = table.metrics()
    generated = table.tokens()["generated"]
    owners = table.columns["owner"]
    blocks = {}
    for info in clients:  # each client's energy as summarize_table's per-client block has it
        mine = owners == info.name
        energy = client_energy(info, timelines.get(info.name), completed=int(np.count_nonzero(metrics.finished & mine)),
                               output_tokens=int(np.sum(generated[mine])), sim_time_ns=sim_time_ns)
        if energy is not None:
            blocks[info.name] = energy
    completed = int(np.count_nonzero(metrics.finished))
    figures: dict[str, Any] = {"requests": {"completed": completed}, "slo": slo_report(metrics, slo)}
    energy = run_energy(clients, blocks, completed=completed, output_tokens=int(np.sum(generated)),
                        sim_time_ns=sim_time_ns)
    if energy is not None:
        figures["energy"] = energy
    cleaned: dict[str, Any] = clean(figures)
    return cleaned


def summarize_table(table: RequestTable, clients: Sequence[ClientInfo],
                    timelines: Mapping[str, ClientTimeline], *, slo: Slo, sim_time_ns: int,
                    wall_time_s: float, extra: Mapping[str, Any] | None = None,
                    client_gaps: Sequence[Mapping[int, int]] = (), client_token_times: Sequence[TokenTimes] = (),
                    benchmark: BenchmarkSetup | None = None) -> dict[str, Any]:
    """:func:`summarize` from the requests' numbers (a run keeps those, not its records); ``client_gaps``
    and ``client_token_times``: the client-side ITL counts and token times of each API server
    (``frontend``), if any."""
    validate_slo(slo)
    metrics = table.metrics()
    good = meets_slo(metrics, slo)
    sim_time_s = sim_time_ns / NS_PER_S
    everyone = np.ones(len(table), dtype=bool)
    tokens = table.tokens()
    summary = _traffic_block(metrics, tokens, everyone, good, sim_time_s)
    gaps = merged_gaps(t.gap_counts() for t in timelines.values())
    summary["latency"]["itl_s"] = itl_block(*gaps)
    seen, seen_gaps = metrics, gaps  # what a benchmark client measures: the engine's, or over HTTP
    spans = (table.columns["arrival_ns"], table.columns["finish_ns"])
    if table.has_client_side:
        seen, seen_gaps = table.client_metrics(), merged_gaps(client_gaps)
        spans = (table.columns["client_send_ns"], table.columns["client_last_ns"])
        token_times = [t.arrays() for t in client_token_times]
        stats = latency_block(seen, seen.finished)
        summary["client_latency"] = {name: stats[name] for name in ("ttft_s", "tpot_s", "e2e_s")}
        summary["client_latency"]["itl_s"] = itl_block(*seen_gaps)
    else:
        token_times = [t.token_times() for t in timelines.values()]
    setup = benchmark if benchmark is not None else BenchmarkSetup()
    itls = table.itls[1 if table.has_client_side else 0]
    summary["benchmark"] = benchmark_block(table.columns["input_tokens"], tokens["generated"], seen, seen_gaps,
                                           spans, _joined(token_times), sim_time_s=sim_time_s,
                                           num_good=summary["requests"]["meeting_slo"] if slo else None,
                                           setup=setup, itls_ns=[itls.get(i, []) for i in table.columns["id"].tolist()]
                                           if setup.details else ())
    summary["slo"] = slo_report(metrics, slo)
    summary["stages"] = table.stage_table()
    summary["breakdown_s"] = table.breakdown()
    summary["sim_time_s"] = sim_time_s
    summary["wall_time_s"] = wall_time_s

    owners = table.columns["owner"]
    infos = {c.name: c for c in clients}
    per_client: dict[str, Any] = {}
    for name in client_names(clients, timelines):
        block = _traffic_block(metrics, tokens, owners == name, good, sim_time_s)
        block.update(_timeline_block(infos.get(name), timelines.get(name), sim_time_ns))
        block["latency"]["itl_s"] = itl_block(*merged_gaps([timelines[name].gap_counts()] if name in timelines else []))
        if name in infos and (energy := client_energy(
                infos[name], timelines.get(name), completed=block["requests"]["completed"],
                output_tokens=block["output_tokens"], sim_time_ns=sim_time_ns)) is not None:
            block["energy"] = energy
        per_client[name] = block
    summary["clients"] = per_client
    if table.classes:  # request classes: latency, SLO attainment and goodput of each
        classes = table.columns["cls"]
        summary["classes"] = {name: _traffic_block(metrics, tokens, classes == name, good, sim_time_s)
                              for name in sorted(table.classes)}
        if table.has_client_side:  # each class's latencies as its clients saw them too
            for name, block in summary["classes"].items():
                stats = latency_block(seen, seen.finished & (classes == name))
                block["client_latency"] = {metric: stats[metric] for metric in ("ttft_s", "tpot_s", "e2e_s")}

    usd = sum(b.get("cost_usd", 0.0) for b in per_client.values())
    summary["cost"] = {
        "device_hours": sum(b.get("device_hours", 0.0) for b in per_client.values()),
        "usd": usd,
        "tokens_per_usd": summary["output_tokens"] / usd if usd > 0 else None,
        "goodput_requests_per_usd": summary["requests"]["meeting_slo"] / usd if usd > 0 else None,
    }
    energy = run_energy(clients, {name: b["energy"] for name, b in per_client.items() if "energy" in b},
                        completed=summary["requests"]["completed"], output_tokens=summary["output_tokens"],
                        sim_time_ns=sim_time_ns)
    if energy is not None:
        summary["energy"] = energy
    for key in sorted(set(extra or {}) & set(summary)):
        logger.warning("summary: extra key %r replaces the computed value", key)
    summary.update(extra or {})
    cleaned: dict[str, Any] = clean(summary)
    return cleaned
