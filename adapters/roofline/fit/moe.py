"""Fused MoE calls measured on silicon, and the floor of the kernel model's MoE call fitted on them.

aiconfigurator-core measured vLLM's fused MoE layer (its ``fused_experts``:
routing, sort, quantization, both expert GEMMs, activation and combine) by
token count for many model shapes, per GPU system. With the router's choice
fixed as the library's collector fixes it (``balanced``: every token-expert
pair a different expert until all are taken), the roofline's MoE operators
(``cosim_core.moe_ns``, the same code a session runs) time each row over
exactly the experts its tokens touch; what the expert GEMMs and activation do
not explain at few tokens is the call's floor, ``moe_floor_us``, one
parameter per family fitted here with the family's kernels fixed.

Rows kept: the newest vLLM version of each system, experts TP-sharded (EP 1,
as vLLM runs without ``--enable-expert-parallel``), 1 to 256 tokens (decode
and small chunks), bf16 experts and vLLM's FP8 experts (``fp8_block``; the
per-tensor ModelOpt path is FlashInfer's CUTLASS experts, another kernel),
each dtype's usual kernel on the system. A row whose touched experts'
weights would stream faster than the device's memory bandwidth is dropped:
its measurement cannot have read them (some many-expert shapes reach 1.7x the
datasheet bandwidth).

Main names: :class:`MoeRow`, :func:`aiconfigurator_moe`, :func:`moe_ns`,
:func:`fit_floor`, :func:`errors_pct`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import yaml
from cosim_core import moe_ns as routed_experts_ns
from scipy.optimize import least_squares

from .. import operators as O
from ..kernels import KernelParams
from ..presets import device_presets
from .rows import device_figures

log = logging.getLogger(__name__)

MAX_TOKENS = 256
# The library's MoE quant modes kept, and the bytes per expert weight of each.
DTYPES = {"bfloat16": 2.0, "fp8_block": 1.0}
# Shapes (hidden, moe inter, experts, top-k) of the models the tables name in aiconfigurator-core's
# model configs, so that leave-one-model-out drops a model's MoE rows with its other data.
MODELS = {(5120, 8192, 16, 1): "llama-4-scout-17b-16e", (5120, 8192, 128, 1): "llama-4-maverick-17b-128e",
          (4096, 14336, 8, 2): "mixtral-8x7b-v0.1", (6144, 16384, 8, 2): "mixtral-8x22b-v0.1",
          (2048, 768, 128, 8): "qwen3-30b-a3b", (4096, 1536, 128, 8): "qwen3-235b-a22b",
          (7168, 2048, 256, 8): "deepseek-v3"}
FLOOR_BOUNDS = (0.0, 500.0)


@dataclasses.dataclass(frozen=True)
class MoeRow:
    """One measured fused MoE call on one rank (time in ns)."""

    device: str
    model: str        # canonical model name, or the shape ("moe-<h>x<inter>-e<E>k<k>")
    dtype: str
    hidden: int
    inter: int        # one expert's intermediate size, before TP
    experts: int
    top_k: int
    tp: int
    tokens: int
    touched: int      # experts the tokens picked (the collector's balanced routing)
    measured_ns: float


def balanced_experts(tokens: int, experts: int, top_k: int) -> int:
    """Distinct experts aiconfigurator-core's collector routes ``tokens`` to (its ``balanced_logits``:
    token t's i-th expert is ``(t + i s) mod E``, or ``(t s / T + i s) mod E`` for fewer tokens than
    ``s = ceil(E / k)``)."""
    stride = math.ceil(experts / top_k)
    if tokens >= stride:
        picked = {(t + i * stride) % experts for t in range(tokens) for i in range(top_k)}
    else:
        picked = {int(t * stride / tokens + i * stride) % experts for t in range(tokens) for i in range(top_k)}
    return len(picked)


def shape_of(row: MoeRow) -> O.Shape:
    """The per-rank shape of a row's MoE layer (fused gated experts, fitted kernel model)."""
    return O.Shape(h=row.hidden, q=0.0, kv=0.0, heads=0.0, head_dim=0, f=row.inter / row.tp, gated=True,
                   vocab=0.0, num_experts=row.experts, top_k=row.top_k, experts_local=float(row.experts),
                   tp=row.tp, pp=1, ep=1, layers_per_stage=1, bp=DTYPES[row.dtype], bkv=2.0, ba=2.0, fused=True,
                   fitted=True)


def peak_flops(row: MoeRow) -> float:
    """The device's dense peak for the row's expert dtype (FP8 experts run FP8 tensor cores)."""
    peaks = device_presets()[row.device]["peak_tflops"]
    bf16 = peaks.get("bf16") or peaks.get("fp16") or max(peaks.values())
    return float(peaks.get("fp8", 2 * bf16) if DTYPES[row.dtype] == 1.0 else bf16) * 1e12


def moe_ns(row: MoeRow, k: KernelParams) -> float:
    """The kernel model's time of the row's call: the routed experts' ops (:mod:`..operators`) timed by
    :func:`..kernels.kernel_ns`, as a session times an MoE layer's routed experts."""
    bw = device_figures()[row.device][1]
    peak = peak_flops(row)
    return routed_experts_ns(shape_of(row), float(row.tokens), row.touched, k, peak, bw)


def _model(hidden: int, inter: int, experts: int, top_k: int) -> str:
    return MODELS.get((hidden, inter, experts, top_k), f"moe-{hidden}x{inter}-e{experts}k{top_k}")


def aiconfigurator_moe(systems: Path | None = None) -> list[MoeRow]:
    """The kept rows (module docstring) of every system of :data:`.datasets.AIC_SYSTEMS`."""
    import pandas as pd  # fit time only: an optional dependency, as for the other tables

    from .datasets import AIC_SYSTEMS, _latest, aiconfigurator_root

    systems = systems or aiconfigurator_root()
    if systems is None:
        return []
    out: list[MoeRow] = []
    for system, device in AIC_SYSTEMS.items():
        data = yaml.safe_load((systems / f"{system}.yaml").read_text()).get("data_dir", f"data/{system}")
        path = _latest(systems / data / "moe", "moe_perf.parquet")
        if path is None:
            continue
        table = pd.read_parquet(path)
        table = table[(table.distribution == "balanced") & (table.moe_ep_size == 1)
                      & (table.num_tokens <= MAX_TOKENS) & table.moe_dtype.isin(list(DTYPES))]
        bw = device_figures()[device][1]
        for dtype, rows in table.groupby("moe_dtype", sort=True):
            rows = rows[rows.kernel_source == rows.kernel_source.value_counts().index[0]]  # the usual kernel
            cols = ["hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size", "num_tokens", "latency"]
            for h, inter, e, k, tp, t, ms in rows[cols].itertuples(index=False):
                touched = balanced_experts(int(t), int(e), int(k))
                if DTYPES[str(dtype)] * 3 * h * inter / tp * touched / (ms * 1e-3) > bw:
                    continue  # faster than its weights can stream: not a call that read them
                out.append(MoeRow(device, _model(h, inter, e, k), str(dtype), int(h), int(inter), int(e), int(k),
                                  int(tp), int(t), touched, float(ms) * 1e6))
    log.info("read %d fused MoE rows", len(out))
    return out


def fit_floor(rows: Sequence[MoeRow], kernels: Callable[[str], KernelParams]) -> float | None:
    """The ``moe_floor_us`` that fits ``rows`` best (relative error, soft L1, every (device, dtype)
    group weighted alike), each device's kernels (``kernels(device)``) fixed; None without rows."""
    if not rows:
        return None
    base = np.array([moe_ns(r, dataclasses.replace(kernels(r.device), moe_floor_us=0.0)) for r in rows])
    measured = np.array([r.measured_ns for r in rows])
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        counts[(r.device, r.dtype)] += 1
    weights = np.sqrt(np.array([1.0 / counts[(r.device, r.dtype)] for r in rows]) * len(rows) / len(counts))

    def residuals(x: np.ndarray) -> np.ndarray:
        return weights * np.log((base + x[0] * 1e3) / measured)

    result = least_squares(residuals, np.array([10.0]), bounds=FLOOR_BOUNDS, loss="soft_l1", f_scale=0.1)
    log.info("MoE floor on %d rows: %.2f us", len(rows), result.x[0])
    return float(result.x[0])


def errors_pct(rows: Sequence[MoeRow], kernels: Callable[[str], KernelParams]) -> list[float]:
    """Signed percentage error of every row under each device's kernels."""
    return [(moe_ns(r, kernels(r.device)) / r.measured_ns - 1.0) * 100.0 for r in rows]
