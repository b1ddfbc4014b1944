"""Turning an LLMServingSim/vLLM scenario file (``scenarios/*.json``) into a cosim config.

The scenario names the trace, the engine settings (max_num_seqs,
max_num_batched_tokens, block size, KV blocks, parallelism) and the profile
bundle. Paths in it are resolved against the scenario file's folder and, when
not found there, against its ancestors (the data set keeps ``scenarios/``
beside ``workloads/`` and ``profiler/``). :func:`build_config` returns the
config mapping that :func:`cosim.hub.studies.runner.run` takes.

Nothing here is fitted: the bundle's kernel times go in as measured, and the
host time each step exposes is the hub's model of vLLM V1 with cited constants
(:mod:`cosim.hub.sim.clients.host`; docs/validation.md, "Host time").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...config.loading import parse_config
from ...config.resolve import kv_memory_of, resolve_hardware, resolve_model
from ...errors import ScenarioError

# vLLM's KV block count of the one run that recorded it, and the max_num_seqs it ran with, reused for
# the other run on the same GPU, model, vLLM version and utilization (the early RTX 4090 run, max_num_seqs
# 128), corrected by what vLLM's memory profiling holds back differently for that run's settings
# (_profiled_blocks: its sampler's dummy run covers min(max_num_seqs, max_num_batched_tokens) rows).
KNOWN_GPU_BLOCKS = {("RTX4090", "meta-llama/Llama-3.1-8B"): (2588, 256)}

# Devices: scenario hardware label -> cosim device preset.
DEVICE_PRESETS = {"RTX4090": "RTX-4090", "RTXPRO6000": "RTX-PRO-6000"}

# What times the replay's steps: ``profile``, the regression backend on the scenario's profile bundle
# (the run's own kernels); ``aiconfigurator``, NVIDIA's operator tables for the device's vLLM (docs/aiconfigurator.md).
REPLAY_BACKENDS = ("profile", "aiconfigurator")


@dataclass(frozen=True)
class ReplayScenario:
    """The facts of one scenario file that a replay uses."""

    scenario_id: str
    path: Path
    model: str
    hardware: str
    tp: int
    dp: int
    ep: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    num_gpu_blocks: int | None
    enable_prefix_caching: bool
    async_scheduling: bool
    enforce_eager: bool
    trace: Path
    profile_bundle: Path


def resolve_path(scenario_file: Path, relative: str) -> Path:
    """``relative`` under the scenario file's folder or its nearest ancestor that has it."""
    candidate = Path(relative).expanduser()
    if candidate.is_absolute():
        return candidate
    for folder in [scenario_file.resolve().parent, *scenario_file.resolve().parents]:
        if (folder / candidate).exists():
            return folder / candidate
    raise ScenarioError(str(scenario_file), f"{relative} not found in {scenario_file.parent} or above it")


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _flag(value: Any, default: bool) -> bool:
    return value if isinstance(value, bool) else default  # strings mean "not recorded": vLLM default


def load_scenario(path: str | Path) -> ReplayScenario:
    """Reads a scenario JSON file.

    Raises:
        ScenarioError: unreadable file, missing keys, or a path it names that does not exist.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ScenarioError(str(path), f"cannot read scenario: {err}") from None
    try:
        engine, par, sched = data["engine_kwargs"], data.get("parallelism") or {}, data.get("scheduler") or {}
        hardware = str(data["hardware"]["label"])
        model = str(data["model"])
        trace, bundle = str(data["workload"]["trace"]), str(data["profile_bundle"])
    except (KeyError, TypeError) as err:
        raise ScenarioError(str(path), f"not a replay scenario: missing {err}") from None
    kv = data.get("kv_cache") if isinstance(data.get("kv_cache"), dict) else {}
    blocks = kv.get("num_gpu_blocks") if isinstance(kv.get("num_gpu_blocks"), int) else None
    scenario = ReplayScenario(
        scenario_id=str(data.get("scenario_id", path.stem)), path=path, model=model, hardware=hardware,
        tp=_int(par.get("tp"), _int(engine.get("tensor_parallel_size"), 1)),
        dp=_int(par.get("dp"), _int(engine.get("data_parallel_size"), 1)),
        ep=_int(par.get("ep"), 1),
        max_num_seqs=_int(engine.get("max_num_seqs"), 256),
        max_num_batched_tokens=_int(engine.get("max_num_batched_tokens"), 2048),
        block_size=_int(sched.get("block_size"), 16), num_gpu_blocks=blocks,
        enable_prefix_caching=_flag(sched.get("prefix_caching"), True),
        async_scheduling=_flag(sched.get("async_scheduling"), True),  # vLLM 0.19's default on GPUs
        enforce_eager=_flag(engine.get("enforce_eager"), False),
        trace=resolve_path(path, trace), profile_bundle=resolve_path(path, bundle))
    known = KNOWN_GPU_BLOCKS.get((hardware, model))
    if blocks is None and known is not None:
        blocks, recorded_seqs = known
        if recorded_seqs != scenario.max_num_seqs:
            blocks += _profiled_blocks(scenario) - _profiled_blocks(replace(scenario, max_num_seqs=recorded_seqs))
        scenario = replace(scenario, num_gpu_blocks=blocks)
    return scenario


def _profiled_blocks(scenario: ReplayScenario) -> int:
    """The KV blocks cosim's model of vLLM's memory profiling gives one rank of the scenario
    (:func:`cosim.hub.config.resolve.kv_memory_of`; docs/validation.md, "KV capacity")."""
    config = parse_config(build_config(replace(scenario, num_gpu_blocks=None)))
    client = config.clients[0]
    return kv_memory_of(client, resolve_model(config, "model"), resolve_hardware(config, client, "clients[0]"),
                        "clients[0]").num_blocks


def _backend(scenario: ReplayScenario, backend: str) -> dict[str, Any]:
    if backend == "aiconfigurator":  # kernel times as the bundle's are: the hub adds the host time to both
        return {"kind": "aiconfigurator", "options": {"engine": "vllm"}}
    if backend != "profile":
        raise ScenarioError("backend", f"{backend!r}: a replay is timed by one of {list(REPLAY_BACKENDS)}")
    # collectives on the device preset's link (its figures cited in hub/config/presets/devices.yaml)
    return {"kind": "regression", "options": {"profile_bundle": str(scenario.profile_bundle)}}


def build_config(scenario: ReplayScenario, *, trace: Path | None = None, backend: str = "profile") -> dict[str, Any]:
    """The cosim config of a scenario: one client per DP rank behind a router.

    Args:
        scenario: from :func:`load_scenario`.
        trace: a JSONL trace to replay instead of the scenario's (e.g. measured arrivals).
        backend: what times the steps, one of :data:`REPLAY_BACKENDS` (the config's backend of that name).

    Raises:
        ScenarioError: an unknown ``backend``.
    """
    device = DEVICE_PRESETS.get(scenario.hardware, scenario.hardware)
    backends = {backend: _backend(scenario, backend)}
    scheduler: dict[str, Any] = {
        "batching": "chunked", "packing": "fcfs", "max_num_seqs": scenario.max_num_seqs,
        "max_num_batched_tokens": scenario.max_num_batched_tokens, "block_size": scenario.block_size,
        "gpu_memory_utilization": 0.9, "preemption": "recompute",
        # vLLM 0.19 (the runs' version) holds no CUDA-graph estimate back from the KV cache (opt-in there)
        "memory_profiler_estimate_cudagraphs": False,
        "enable_prefix_caching": scenario.enable_prefix_caching,
        # The bundles time kernels alone (kineto durations), so vLLM V1's host time is added.
        "host_time": True, "async_scheduling": scenario.async_scheduling, "enforce_eager": scenario.enforce_eager,
        "profile_execution_mode": "cuda_graph"}
    if scenario.num_gpu_blocks is not None:
        scheduler["num_gpu_blocks"] = scenario.num_gpu_blocks
    # vLLM DP with EP: every DP rank is one engine with TP `tp`; experts are split over dp x tp ranks.
    ep = scenario.dp * scenario.tp if scenario.ep > 1 else 1
    clients = [{"name": f"rank{i}" if scenario.dp > 1 else "vllm", "model": "model", "backend": backend,
                "hardware": {"device": "gpu", "count": scenario.tp, "tensor_parallel": scenario.tp,
                             "expert_parallel": ep},
                "scheduler": scheduler} for i in range(scenario.dp)]
    if scenario.dp > 1 and scenario.ep > 1:  # the DP ranks of an MoE model step together
        for client in clients:
            client["dp_group"] = "vllm"
    trace_path = trace or scenario.trace
    return {
        "seed": 42,
        "models": {"model": {"preset": scenario.model, "dtype": "bf16"}},
        "hardware": {"gpu": {"preset": device}},
        "backends": backends,
        "clients": clients,
        "router": {"policy": "vllm_dp"},  # vLLM's own DP load balancer (one client per rank)
        "workload": {
            "requests": sum(1 for line in trace_path.open() if line.strip()),
            "trace": {"path": str(trace_path), "format": "jsonl", "arrival_column": "arrival_time_ns",
                      "input_column": "input_toks", "output_column": "output_toks",
                      "token_ids_column": "input_tok_ids", "time_unit": "ns"},
            "arrival": {"process": "trace"},
            "input_tokens": {"dist": "trace"},
            "output_tokens": {"dist": "trace"},
        },
        "output": {"plots": True},
    }


def scenario_summary(scenario: ReplayScenario) -> Mapping[str, Any]:
    """A short description for logs and comparison.json."""
    return {"scenario_id": scenario.scenario_id, "model": scenario.model, "hardware": scenario.hardware,
            "tp": scenario.tp, "dp": scenario.dp, "ep": scenario.ep, "max_num_seqs": scenario.max_num_seqs,
            "num_gpu_blocks": scenario.num_gpu_blocks, "profile_bundle": str(scenario.profile_bundle),
            "trace": str(scenario.trace)}
