"""Measured kernels as rows the kernel model can be fitted to, and the devices they ran on.

A :class:`Row` is one measured kernel: its class (:mod:`..kernels`), work,
traffic, size (a GEMM's M, an attention call's query tiles), the device's
peaks and the measured time. :class:`Rows` holds many as numpy arrays, so
that :func:`predict_ns` times them all at once with the same formula
:func:`..kernels.kernel_ns` applies at run time.

Device peaks come from the hub's preset file (``hub/config/presets/devices.yaml``,
read as data: the adapters import nothing of the hub), dense bf16.

Main names: :class:`Row`, :class:`Rows`, :func:`predict_ns`, :func:`device_figures`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence

import numpy as np
import yaml

from ..kernels import ATTN, ELEM, GEMM, MOE, SAMPLE, KernelParams, attention_tiles
from ..presets import PRESETS


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured kernel (times in ns, work in FLOP, traffic in bytes)."""

    dataset: str
    device: str   # the device preset's name
    model: str    # the model whose shape it is ("" for a shape grid that belongs to no model)
    op: str       # the operator as the dataset names it
    kind: int
    work: float
    traffic: float
    size: float   # GEMM rows M; attention query tiles; unused otherwise
    measured_ns: float
    span: float = 0.0     # attention with a prefill chunk: its longest sequence (keys); else 0
    mixed: bool = False   # such a call that also reads cached KV (a prefix or decodes)


@dataclasses.dataclass
class Rows:
    """Many rows as arrays (see :class:`Row`), with each device's peaks joined."""

    dataset: np.ndarray
    device: np.ndarray
    model: np.ndarray
    op: np.ndarray
    kind: np.ndarray
    work: np.ndarray
    traffic: np.ndarray
    size: np.ndarray
    measured_ns: np.ndarray
    span: np.ndarray
    mixed: np.ndarray
    peak_flops: np.ndarray
    mem_bw: np.ndarray

    @classmethod
    def of(cls, rows: Sequence[Row]) -> Rows:
        figures = device_figures()
        cols = {f.name: np.array([getattr(r, f.name) for r in rows]) for f in dataclasses.fields(Row)}
        cols["kind"] = cols["kind"].astype(np.int64) if len(rows) else np.zeros(0, np.int64)
        return cls(**cols, peak_flops=np.array([figures[r.device][0] for r in rows]),
                   mem_bw=np.array([figures[r.device][1] for r in rows]))

    def __len__(self) -> int:
        return len(self.measured_ns)

    def where(self, mask: np.ndarray) -> Rows:
        return Rows(**{f.name: getattr(self, f.name)[mask] for f in dataclasses.fields(self)})


def predict_ns(rows: Rows, k: KernelParams) -> np.ndarray:
    """The kernel model's time of every row (the array form of :func:`..kernels.kernel_ns`)."""
    peak, bw, w, q, m = rows.peak_flops, rows.mem_bw, rows.work, rows.traffic, rows.size
    safe_m = np.maximum(m, 1e-9)
    gemm = np.maximum(w * (safe_m + k.gemm_m_half) / (safe_m * k.gemm_eff * peak),
                      q / (k.gemm_mem_eff * bw)) * 1e9 + k.gemm_floor_us * 1e3
    varlen = rows.span > 0
    attn_c = np.maximum(w / (k.attn_eff * peak) + m * k.attn_tile_us * 1e-6,
                        np.where(varlen, rows.span * k.attn_span_ns * 1e-9, 0.0))
    attn_e = np.where(varlen, k.attn_varlen_share * k.attn_mem_eff, k.attn_mem_eff)
    attn = np.maximum(attn_c, q / (attn_e * bw)) * 1e9 + k.attn_floor_us * 1e3
    elem = q / (k.elem_mem_eff * bw) * 1e9 + np.where(rows.kind == SAMPLE, k.sampler_us, k.elem_floor_us) * 1e3
    elem = np.where(rows.kind == MOE, k.moe_floor_us * 1e3, elem)
    return np.where(rows.kind == GEMM, gemm, np.where(rows.kind == ATTN, attn, elem))


@functools.cache
def device_figures() -> dict[str, tuple[float, float]]:
    """Dense bf16 peak (FLOP/s) and memory bandwidth (B/s) of every device preset, by name."""
    data = yaml.safe_load(PRESETS.read_text())
    out = {}
    for entry in data["devices"]:
        peaks = entry["peak_tflops"]
        peak = peaks.get("bf16") or peaks.get("fp16") or max(peaks.values())
        out[entry["name"]] = (float(peak) * 1e12, float(entry["mem_bandwidth_gbps"]) * 1e9)
    return out



# Shapes of one kernel -------------------------------------------------------------------------

def gemm(dataset: str, device: str, model: str, op: str, m: float, k: float, n: float, ms: float,
         *, bytes_per: float = 2.0) -> Row:
    """An (m x k) @ (k x n) GEMM measured at ``ms`` milliseconds."""
    return Row(dataset, device, model, op, GEMM, 2.0 * m * k * n, bytes_per * (m * k + k * n + m * n), m, ms * 1e6)


def attention(dataset: str, device: str, model: str, op: str, *, heads: float, kv_heads: float, head_dim: float,
              seqs: Iterable[tuple[float, float, float]], ms: float, bytes_per: float = 2.0) -> Row:
    """One FlashAttention call over ``seqs`` = (count, new tokens, cached tokens) groups of equal sequences."""
    q, kv = heads * head_dim, kv_heads * head_dim
    work = traffic = tokens = n_seqs = 0.0
    seqs = list(seqs)
    for count, n, c in seqs:
        work += count * 4.0 * q * (n * c + n * (n + 1) / 2)
        traffic += count * (2 * bytes_per * n * q + 2 * bytes_per * (c + n) * kv)
        tokens += count * n
        n_seqs += count
    chunked = any(n > 1 or c == 0 for _, n, c in seqs)  # as batch_stats sorts sequences (no drafts here)
    span = max(c + n for _, n, c in seqs) if chunked else 0.0
    mixed = chunked and any(c > 0 for _, _, c in seqs)
    return Row(dataset, device, model, op, ATTN, work, traffic, attention_tiles(heads, kv_heads, tokens, n_seqs),
               ms * 1e6, span, mixed)


def elementwise(dataset: str, device: str, model: str, op: str, traffic: float, ms: float, *,
                kind: int | None = None) -> Row:
    """A memory-bound kernel moving ``traffic`` bytes."""
    return Row(dataset, device, model, op, ELEM if kind is None else kind, 0.0, traffic, 0.0, ms * 1e6)
