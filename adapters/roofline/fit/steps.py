"""Whole steps the fitted roofline is judged on, and how it times them.

Three kinds of measured step, each timed the way its data was taken:

- ``device`` (LLMServingSim's vLLM 0.19 bundles, RTX 4090 / RTX PRO 6000): a
  step composed as LLMServingSim composes it (README §3.4: embedding, every
  layer's kernels, final norm, LM head, sampler), kernel time only, one TP
  rank, no collective. Timed by the roofline with no host time and its
  collectives taken out.
- ``layer`` (Vidur, A100 / H100): every layer's GEMMs, norms, RoPE, activation
  and residual add for T tokens (Vidur profiled no per-model attention).
  Timed as the same operators of the roofline.
- ``engine`` (Splitwise, DGX-A100 / DGX-H100): end-to-end prefill and decode
  iterations of a serving engine, host, collectives and all. Timed by the
  whole backend under the engine's execution mode.

Main names: :class:`Step`, :func:`llmservingsim_steps`, :func:`vidur_steps`,
:func:`splitwise_steps`, :func:`predict_ms`, :func:`session_spec`.
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cosim.v1 import types_pb2 as pb

from .. import estimator
from ..backend import open_model
from ..operators import batch_stats
from ..presets import device_presets
from . import datasets as D

LSS_DECODES = ((1, 128), (1, 2048), (4, 512), (16, 2048), (64, 512), (64, 2048), (256, 128), (256, 1024))
LSS_PREFILLS = ((16, 0), (256, 0), (1024, 0), (2048, 0), (256, 2048), (1024, 1024))
LSS_MIXED = ((256, 0, 16, 2048), (1024, 0, 64, 512), (512, 512, 32, 1024))
VIDUR_TOKENS = (1, 8, 32, 128, 512, 2048, 4096)
LAYER_KEYS = ("qkv_proj", "o_proj", "rope", "norm", "mlp_gate_up", "mlp_act", "mlp_down")
# Splitwise's models (Hugging Face config.json of each).
SPLITWISE_MODELS = {
    "llama2-70b": dict(num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                       intermediate_size=28672, vocab_size=32000, gated_mlp=True),
    "bloom-176b": dict(num_layers=70, hidden_size=14336, num_attention_heads=112, num_kv_heads=112,
                       intermediate_size=57344, vocab_size=250880, gated_mlp=False),
}
SPLITWISE_DEVICES = {"a100-80gb": "A100-80GB", "h100-80gb": "H100-SXM"}
# A step this much faster than its configuration at a smaller batch did not run its whole batch at once.
SLOWER_AT_SMALLER_BATCH = 1.05


@dataclasses.dataclass(frozen=True)
class Step:
    """One measured step: what ran, where, and how long it took."""

    dataset: str
    kind: str          # device | layer | engine (module docstring)
    device: str
    model: str         # canonical name (datasets.canonical_model)
    spec: pb.ModelSpec
    tp: int
    new: tuple[int, ...]
    context: tuple[int, ...]
    measured_ms: float
    phase: str         # prefill | decode | mixed


def session_spec(device: str, spec: pb.ModelSpec, tp: int, options: Mapping[str, Any]) -> pb.SessionSpec:
    """A session of ``spec`` on ``tp`` devices of the preset ``device`` (bf16, the preset's link)."""
    preset = device_presets()[device]
    peaks = preset["peak_tflops"]
    extra: dict[str, float] = {k: float(preset[k]) for k in ("intra_node_latency_us", "intra_node_hop_latency_us",
                                           "intra_node_bus_efficiency") if k in preset}
    out = pb.SessionSpec(
        client="fit", model=spec,
        hardware=pb.HardwareSpec(device=device, count=tp, peak_tflops=float(peaks.get("bf16") or peaks["fp16"]),
                                 mem_bandwidth_gbps=float(preset["mem_bandwidth_gbps"]),
                                 intra_node_gbps=float(preset["intra_node_gbps"]),
                                 devices_per_node=int(preset.get("devices_per_node", 8)), extra=extra),
        parallelism=pb.Parallelism(tensor=tp))
    out.options.update(dict(options))
    return out


def _model_spec(name: str, dims: Mapping[str, Any]) -> pb.ModelSpec:
    return pb.ModelSpec(name=name, bytes_per_param=2, bytes_per_kv_element=2, **dims)


def predict_ms(step: Step, options: Mapping[str, Any], cache: dict[Any, Any] | None = None) -> float:
    """The roofline's time of ``step`` under session ``options``, timed as its kind says."""
    cache = {} if cache is None else cache
    key = (step.device, step.model, step.tp, step.kind)
    if key not in cache:
        opts = dict(options)
        if step.kind != "engine":
            opts.update(execution="graphs", graph_step_us=0.0, piecewise_layer_us=0.0)
        cache[key] = open_model(session_spec(step.device, step.spec, step.tp, opts))
    m = cache[key]
    b = batch_stats(step.new, step.context)
    if step.kind == "layer":
        return sum(m.native.layer_busy(b, LAYER_KEYS)) * m.shape.layers_per_stage / 1e6
    timing = estimator.estimate(m, b)
    if step.kind == "device":
        return (timing.duration_ns - timing.communication_ns) / 1e6
    return timing.duration_ns / 1e6


# LLMServingSim -----------------------------------------------------------------------------------

def _table(path: Path, key_cols: tuple[str, ...]) -> dict[tuple[Any, ...], float]:
    with open(path, newline="") as handle:
        return {tuple(row[c] if c == "layer" else int(row[c]) for c in key_cols): float(row["time_us"])
                for row in csv.DictReader(handle)}


def _between(table: dict[tuple[Any, ...], float], layer: str, x: int) -> float:
    """``table[(layer, x)]``, or linear between the grid points around ``x`` (a mixed step's
    sequence count, one more than its decodes, falls between the per-sequence grid's)."""
    if (layer, x) in table:
        return table[(layer, x)]
    below = max(k for (name, k) in table if name == layer and k < x)
    above = min(k for (name, k) in table if name == layer and k > x)
    w = (x - below) / (above - below)
    return (1 - w) * table[(layer, below)] + w * table[(layer, above)]


def llmservingsim_steps(data: Path) -> list[Step]:
    """Decode, prefill and mixed steps of every dense bundle, composed from its measured kernels."""
    out: list[Step] = []
    for device, model, tp, folder, config in D.llmservingsim_bundles(data):
        if "num_experts" in config:
            continue  # the MoE block's table is keyed by activated experts, which the roofline does not route
        dense = _table(folder / "dense.csv", ("layer", "tokens"))
        per_seq = _table(folder / "per_sequence.csv", ("layer", "sequences"))
        attn = _table(folder / "attention.csv", ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"))
        layers = [k for k in {name for name, _ in dense} if k not in ("embedding", "final_layernorm")]
        spec = _model_spec(model, dict(
            num_layers=config["num_hidden_layers"], hidden_size=config["hidden_size"],
            num_attention_heads=config["num_attention_heads"], num_kv_heads=config["num_key_value_heads"],
            head_dim=config.get("head_dim", 0), intermediate_size=config["intermediate_size"],
            vocab_size=config["vocab_size"], gated_mlp=True))
        shapes = ([(0, 0, n, kv) for n, kv in LSS_DECODES] + [(pc, kp, 0, 0) for pc, kp in LSS_PREFILLS]
                  + list(LSS_MIXED))
        for pc, kp, nd, kd in shapes:
            t, seqs = pc + nd, (1 if pc else 0) + nd
            try:
                per_layer = sum(dense[(k, t)] * (2 if k == "layernorm" else 1) for k in layers) + attn[(pc, kp, nd, kd)]
                us = (dense[("embedding", t)] + spec.num_layers * per_layer + dense[("final_layernorm", t)]
                      + _between(per_seq, "lm_head", seqs) + _between(per_seq, "sampler", seqs))
            except KeyError:
                continue  # a shape off the bundle's grid
            new = ((pc,) if pc else ()) + (1,) * nd
            context = ((kp,) if pc else ()) + (kd,) * nd
            phase = "mixed" if pc and nd else ("prefill" if pc else "decode")
            out.append(Step("llmservingsim", "device", device, D.canonical_model(model), spec, tp, new, context,
                            us / 1e3, phase))
    return out


# Vidur -------------------------------------------------------------------------------------------

VIDUR_OPS = ("attn_pre_proj", "attn_post_proj", "attn_rope", "mlp_up_proj", "mlp_act", "mlp_down_proj",
             "input_layernorm", "post_attention_layernorm", "add")


def vidur_steps(data: Path) -> list[Step]:
    """Every layer's non-attention operators at VIDUR_TOKENS tokens, per model, device and TP."""
    out: list[Step] = []
    for device, model, path in D.vidur_models(data):
        config = yaml.safe_load((data / "vidur/model_configs" / f"{model}.yml").read_text())
        spec = _model_spec(model, dict(
            num_layers=config["num_layers"], hidden_size=config["embedding_dim"],
            num_attention_heads=config["num_q_heads"], num_kv_heads=config["num_kv_heads"],
            intermediate_size=config["mlp_hidden_dim"], vocab_size=config["vocab_size"],
            gated_mlp=bool(config["use_gated_mlp"])))
        sums: dict[tuple[int, int], list[float]] = defaultdict(list)
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                t, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
                if t in VIDUR_TOKENS:
                    sums[(tp, t)].append(sum(float(row.get(f"time_stats.{op}.median") or 0) for op in VIDUR_OPS))
        for (tp, t), values in sorted(sums.items()):
            out.append(Step("vidur", "layer", device, D.canonical_model(model), spec, tp, (t,), (0,),
                            statistics.fmean(values) * spec.num_layers, "layer"))
    return out


# Splitwise ---------------------------------------------------------------------------------------

def splitwise_steps(data: Path) -> list[Step]:
    """Median prefill and decode iterations of perf_model.csv (DGX-A100 / DGX-H100, not power-capped).

    A prefill is ``batch`` prompts of ``prompt`` tokens; a decode, ``batch`` sequences at the mean
    context of the ``token_size`` tokens generated. Steps more than 5% faster than the same
    configuration at a smaller batch are dropped (within 5% is the repeats' noise): the TP2
    batch-64 prefills and decodes of both nodes (the data README flags the A100 prefills). Their
    64 x 640 tokens of KV cache (13 GB) cannot fit beside Llama-2-70B's 138 GB of weights on two
    80 GB GPUs, so the engine ran fewer sequences at once.
    """
    groups: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    with open(data / "splitwise/perf_model.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["hardware"] not in SPLITWISE_DEVICES:
                continue
            base = (row["model"], row["hardware"], int(row["tensor_parallel"]), int(row["prompt_size"]),
                    int(row["batch_size"]))
            groups[("prefill", *base, 0)].append(float(row["prompt_time"]))
            groups[("decode", *base, int(row["token_size"]))].append(float(row["token_time"]))
    medians = {key: statistics.median(v) for key, v in groups.items()}
    out: list[Step] = []
    for (phase, model, hw, tp, prompt, batch, tokens), ms in sorted(medians.items()):
        if any(m2 > ms * SLOWER_AT_SMALLER_BATCH for (ph, mo, h, t, p, b, k), m2 in medians.items()
               if (ph, mo, h, t, p, k) == (phase, model, hw, tp, prompt, tokens) and b < batch):
            continue
        if phase == "prefill":
            new, context = (prompt,) * batch, (0,) * batch
        else:
            new, context = (1,) * batch, (prompt + (tokens - 1) // 2,) * batch
        out.append(Step("splitwise", "engine", SPLITWISE_DEVICES[hw], D.canonical_model(model),
                        _model_spec(model, SPLITWISE_MODELS[model]), tp, new, context, ms, phase))
    return out
