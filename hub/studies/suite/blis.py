"""The H100 experiments of the llm-d / BLIS sim-to-real benchmark as cosim configs, and their scores.

An experiment file (``validation_runs/blis-h100/experiments/<id>.json``) holds the settings vLLM
v0.15.1 ran with (model, TP, ``max_num_seqs``, ``max_num_batched_tokens``, the GPU KV blocks its log
reported, the CPU KV blocks of its offloading), the inference-perf workload that drove it, the
latencies inference-perf measured at the client (summary and per stage, ms) and the predictions
other simulators published. :func:`experiment_config` writes the cosim config;
:func:`score` sets the run's numbers beside the measured ones as the benchmark's README defines
them: error = (predicted - measured) / measured on mean, p90 and p99 TTFT and E2E, and ITL as
``(mean E2E - mean TTFT) / (mean output tokens - 1)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ScenarioError
from .table import Row

#: What times the steps, by --backend (a bare roofline, or aiconfigurator's silicon tables for vLLM).
BACKENDS = ("roofline", "aiconfigurator")
#: The benchmark's metrics (its README), in the order the table shows them: name -> key of the data.
METRICS = {"ttft_mean": "ttft_mean_ms", "ttft_p90": "ttft_p90_ms", "ttft_p99": "ttft_p99_ms",
           "e2e_mean": "e2e_mean_ms", "e2e_p90": "e2e_p90_ms", "e2e_p99": "e2e_p99_ms", "itl_mean": "itl_mean_ms"}
DEVICE = "H100-SXM"  # every experiment: H100-80GB-HBM3 SXM, one per TP rank


@dataclass(frozen=True)
class Experiment:
    """One experiment file, read."""

    id: str
    path: Path
    model: str
    model_config: Path
    tp: int
    max_num_seqs: int
    max_num_batched_tokens: int
    total_kv_blocks: int
    cpu_kv_blocks: int
    shared_prefix: dict[str, Any]
    stages: list[dict[str, float]]
    measured: dict[str, dict[str, float]]
    published: dict[str, dict[str, float]]

    @property
    def is_fp8(self) -> bool:
        """Weights in FP8 (RedHatAI's FP8-dynamic checkpoints)."""
        return "fp8" in self.model.lower()


def load_experiment(path: Path) -> Experiment:
    """Reads an experiment file.

    Raises:
        ScenarioError: unreadable, or a key it needs is missing (named with the file).
    """
    try:
        data = json.loads(path.read_text())
        workload = data["workload"]["inference_perf"]
        config = path.parent.parent / data["model_config_dir"] / "config.json"
        return Experiment(
            id=str(data["id"]), path=path, model=str(data["model"]), model_config=config, tp=int(data["tp"]),
            max_num_seqs=int(data["max_num_seqs"]), max_num_batched_tokens=int(data["max_num_batched_tokens"]),
            total_kv_blocks=int(data["total_kv_blocks"]), cpu_kv_blocks=int(data.get("cpu_kv_blocks") or 0),
            shared_prefix=dict(workload["shared_prefix"]), stages=[dict(s) for s in workload["stages"]],
            measured=data["measured"], published=data.get("published_predictions") or {})
    except (OSError, json.JSONDecodeError) as err:
        raise ScenarioError(str(path), f"cannot read experiment: {err}") from None
    except (KeyError, TypeError, ValueError) as err:
        raise ScenarioError(str(path), f"not an experiment file: missing or bad {err}") from None


def inference_perf_section(experiment: Experiment, *, stage_scale: float = 1.0,
                           multi_turn: bool = False) -> dict[str, Any]:
    """``workload.inference_perf`` of the experiment: its shared_prefix data and constant-timer stages
    (each ``duration`` times ``stage_scale``: --fast's shortened run).

    ``multi_turn``: keep the profile's ``enable_multi_turn_chat`` (each user a chat resending its
    history, as inference-perf v0.4.0 sends it). Off by default, every request is its user's system
    prompt and question: what the measured outcomes show the runs served. Accumulated chats could not
    have been served as measured: Llama-2-7B's 4096-token context would refuse every round after
    the fifth (stage 1 of its experiment, measured at twice the load, would have no successful request),
    and on Llama-3.1-70B 28 chats of 50k+ tokens in flight need 1.4M tokens of KV where the GPU held
    487k, yet TTFT stayed at 54 ms (docs/validation.md, "Multi-turn chat").
    """
    stages = [{"rate": s["rate"], "duration": s["duration"] * stage_scale} for s in experiment.stages]
    data = dict(experiment.shared_prefix)
    data["enable_multi_turn_chat"] = bool(data.get("enable_multi_turn_chat")) and multi_turn
    return {"data": {"type": "shared_prefix", "shared_prefix": data},
            "load": {"type": "constant", "stages": stages}}


def experiment_config(experiment: Experiment, *, backend: str, stage_scale: float = 1.0,
                      multi_turn: bool = False) -> dict[str, Any]:
    """The cosim config of an experiment on ``backend`` (one of :data:`BACKENDS`).

    vLLM v0.15.1 as the experiment ran it: chunked prefill within ``max_num_batched_tokens``, FCFS,
    ``max_num_seqs``, 16-token blocks, prefix caching, and the GPU KV blocks its log reported as the
    KV capacity; the model from its Hugging Face config.json; one H100-SXM per TP rank.

    The CPU KV offloading that ``cpu_kv_blocks`` > 0 turned on is a host tier of that many blocks
    (docs/kv-offload.md), and the latencies are scored as inference-perf measured them, at the client:
    the front end (docs/frontend.md: tokenization, detokenization, streaming) at its defaults, with
    the benchmark's client on the server's host. ``multi_turn``: see :func:`inference_perf_section`.

    Raises:
        ScenarioError: an unknown backend.
    """
    if backend not in BACKENDS:
        raise ScenarioError("--backend", f"{backend!r}: a blis-h100 experiment runs on one of {list(BACKENDS)}")
    scheduler: dict[str, Any] = {
        "batching": "chunked", "packing": "fcfs", "max_num_seqs": experiment.max_num_seqs,
        "max_num_batched_tokens": experiment.max_num_batched_tokens, "block_size": 16,
        "enable_prefix_caching": True, "preemption": "recompute", "num_gpu_blocks": experiment.total_kv_blocks}
    # Both backends time GPU kernels alone (the roofline's default replays graphs with no host cost,
    # aiconfigurator's tables are kernel times): the hub adds vLLM V1's host time, async scheduling on
    # (v0.15's default, vLLM PR #27614), as replays on profile bundles do (docs/validation.md, "Host time").
    scheduler.update(host_time=True, async_scheduling=True)
    spec: dict[str, Any] = {"kind": "aiconfigurator", "options": {"engine": "vllm"}} if backend == "aiconfigurator" \
        else {"kind": "roofline"}  # bare: the default step model a user gets
    if experiment.cpu_kv_blocks:
        scheduler["kv_offload"] = {"cpu_blocks": experiment.cpu_kv_blocks}
    client = {"name": "vllm", "model": experiment.model, "role": "mixed", "backend": backend,
              "hardware": {"device": "h100", "count": experiment.tp, "tensor_parallel": experiment.tp},
              "scheduler": scheduler}
    return {
        "seed": 42,
        "models": {experiment.model: {"hf_config": str(experiment.model_config),
                                      "dtype": "fp8" if experiment.is_fp8 else "bf16"}},
        "hardware": {"h100": {"preset": DEVICE}},
        "backends": {backend: spec},
        "clients": [client],
        "router": {"policy": "round_robin"},
        "frontend": {},
        "workload": {"inference_perf": inference_perf_section(experiment, stage_scale=stage_scale,
                                                              multi_turn=multi_turn)},
        "output": {"plots": False},
    }


def _block(scope: dict[str, Any], output_tokens: float, completed: int) -> dict[str, float]:
    """An inference-perf-style block (ms) of a summary's (or a class's) latencies, as its clients saw them
    where the front end is modelled: ITL by the benchmark's formula."""
    latency = scope.get("client_latency") or scope["latency"]
    ttft, e2e = latency["ttft_s"], latency["e2e_s"]
    mean_output = output_tokens / completed if completed else float("nan")
    itl = (e2e["mean"] - ttft["mean"]) / (mean_output - 1) if mean_output > 1 else float("nan")
    return {"ttft_mean_ms": ttft["mean"] * 1e3, "ttft_p90_ms": ttft["p90"] * 1e3, "ttft_p99_ms": ttft["p99"] * 1e3,
            "e2e_mean_ms": e2e["mean"] * 1e3, "e2e_p90_ms": e2e["p90"] * 1e3, "e2e_p99_ms": e2e["p99"] * 1e3,
            "itl_mean_ms": itl * 1e3}


def simulated_blocks(summary: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The run's figures per scope (``summary`` and ``stage_<i>``), as inference-perf reports them."""
    blocks = {"summary": _block(summary, summary["output_tokens"], summary["requests"]["completed"])}
    for name, block in sorted((summary.get("classes") or {}).items()):
        blocks[name] = _block(block, block["output_tokens"], block["requests"]["completed"])
    return blocks


def score(experiment: Experiment, run_id: str, summary: dict[str, Any], *, shortened: bool) -> list[Row]:
    """Rows of the table: every scope the experiment measured, every metric, with the published
    simulators' predictions (summary scope only: that is all they publish)."""
    simulated = simulated_blocks(summary)
    rows = []
    for scope, measured in experiment.measured.items():
        sim = simulated.get(scope, {})
        for metric, key in METRICS.items():
            published = {name: float(values[key]) for name, values in experiment.published.items()
                         if scope == "summary" and key in values} if not shortened else {}
            rows.append(Row(run=run_id, scope=scope, metric=metric, unit="ms", measured=float(measured[key]),
                            cosim=sim.get(key), published=published, shortened=shortened))
    return rows
