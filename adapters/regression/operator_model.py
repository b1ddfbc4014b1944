"""Composes operator-level fits into the time of one step (the hot path).

Per step, following Vidur's reference design (shared/data/README.md §1.8):

    kernels = layers x (non-attention operators at T8 + attention + 2 all-reduces) + LM head
    step = max(gpu_scale x kernels + serial, layers x floor) + per_seq x num_seqs

where ``T8`` is the batch's token count rounded up to a multiple of 8 and
the engine terms (:class:`~.artifact.OverheadEntry`) are fitted on measured
whole steps: the floor is the host-bound time of a step (higher with a
prefill), which the GPU work hides once it is longer.
Attention comes from the measured grids when the per-shard shape and
device match, and otherwise from the nearest measured shape scaled by a
roofline ratio (``max(flops / peak, bytes / bandwidth)`` of the target over
the reference), which keeps the measured efficiency curve; the breakdown key
``attention_roofline`` says which (1.0 = roofline-scaled).

Main names: :class:`OperatorStepModel`, :data:`DEVICE_SPECS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cosim.v1 import types_pb2 as pb

from .artifact import AttentionEntry, OperatorEntry, OverheadEntry
from .curves import Table
from .data import OPERATORS
from .step_model import is_decode

NS_PER_MS = 1e6

# Dense fp16 peak TFLOP/s and memory GB/s used when a session's HardwareSpec
# leaves them 0 (NVIDIA A100 SXM4 80GB and H100 SXM5 datasheets, dense).
DEVICE_SPECS = {"a100": (312.0, 2039.0), "h100": (989.0, 3350.0)}


def engine_step_ms(overhead: OverheadEntry, kernels_ms: float, *, has_prefill: bool, num_seqs: int,
                   num_layers: int) -> float:
    """Step time of the engine ``overhead`` describes, given the composed kernel time."""
    per_layer = overhead.prefill_floor_ms_per_layer if has_prefill else overhead.decode_floor_ms_per_layer
    return (max(overhead.gpu_scale * kernels_ms + overhead.serial_ms, num_layers * per_layer)
            + overhead.per_seq_ms * num_seqs)


@dataclass(frozen=True)
class _Shard:
    """Per-shard attention shape and the device it runs on."""

    q_heads: int
    kv_heads: int
    head_dim: int
    peak_tflops: float
    mem_gbps: float
    bytes_per_kv: float = 2.0

    def decode_s(self, batch: float, context: float) -> float:
        flops = 4.0 * batch * context * self.q_heads * self.head_dim
        traffic = 2.0 * batch * context * self.kv_heads * self.head_dim * self.bytes_per_kv
        return max(flops / (self.peak_tflops * 1e12), traffic / (self.mem_gbps * 1e9))

    def prefill_s(self, chunk: float, context: float) -> float:
        flops = 4.0 * self.q_heads * self.head_dim * chunk * (context + chunk / 2)
        traffic = self.bytes_per_kv * self.head_dim * (2 * self.kv_heads * (context + chunk) + 2 * self.q_heads * chunk)
        return max(flops / (self.peak_tflops * 1e12), traffic / (self.mem_gbps * 1e9))


class OperatorStepModel:
    """Times steps of one session from an operator artifact's entries.

    Args:
        entry: operator tables of the session's (device, model, TP).
        num_layers: decoder layers of the session's model.
        attention: the measured attention to use (exact shape or reference).
        target: per-shard shape and device of the session.
        reference: shape and device ``attention`` was measured with.
        all_reduce: size_bytes -> ms table for the device and TP (None for TP 1).
        overhead: per-step overhead term, or None when none was fitted.
        vocab_size: the model's vocabulary (LM head size).
    """

    def __init__(self, *, entry: OperatorEntry, num_layers: int, attention: AttentionEntry,
                 target: _Shard, reference: _Shard, all_reduce: Table | None,
                 overhead: OverheadEntry | None, vocab_size: int) -> None:
        self.entry, self.layers = entry, num_layers
        self.attention, self.target, self.reference = attention, target, reference
        self.is_scaled = target != reference
        self.all_reduce, self.overhead = all_reduce, overhead
        self.tp = entry.tp
        self.hidden = entry.shape["n_embd"]
        up_width = entry.shape["n_expanded_embd"] * (2 if entry.shape["gated"] else 1)
        # LM head (hidden x vocab/TP) is not profiled; a GEMM over the same
        # hidden size scales with its output width, so reuse the up projection.
        self.lm_head_ratio = vocab_size / up_width
        self.up_index = OPERATORS.index("mlp_up_proj")
        self.max_tokens = entry.table.x_max
        self._ops: dict[int, tuple[np.ndarray, float]] = {}

    def _layer_ops(self, tokens8: int) -> tuple[np.ndarray, float]:
        """Per-layer operator times (ms) and all-reduce ms at ``tokens8``; cached."""
        hit = self._ops.get(tokens8)
        if hit is None:
            ops = self.entry.table(tokens8)
            ar = 0.0
            if self.all_reduce is not None:
                ar = float(self.all_reduce(2.0 * self.hidden * tokens8)[0])  # fp16 activations
            hit = self._ops[tokens8] = (ops, ar)
            if len(self._ops) > 65536:  # bound memory on very long runs
                self._ops.clear()
        return hit

    def _attention(self, prefill: list[tuple[int, int]], decode_ctx: list[int]) -> tuple[float, float, bool]:
        """Prefill and decode attention ms per layer, and whether outside measurements."""
        att, out = self.attention, False
        pre_ms = dec_ms = 0.0
        if prefill:
            # Vidur collapses prefills into one equivalent request: K = sum k_i, C = sqrt(sum c_i^2).
            chunk = math.sqrt(sum(c * c for c, _ in prefill))
            ctx = float(sum(k for _, k in prefill))
            pre_ms = max(att.prefill(chunk, ctx), 0.0)
            out |= not att.prefill.covers(chunk, ctx)
            if self.is_scaled:
                pre_ms *= self.target.prefill_s(chunk, ctx) / self.reference.prefill_s(chunk, ctx)
        if decode_ctx:
            batch, ctx = float(len(decode_ctx)), sum(decode_ctx) / len(decode_ctx)
            dec_ms = max(att.decode(batch, ctx), 0.0)
            out |= not att.decode.covers(batch, ctx)
            if self.is_scaled:
                dec_ms *= self.target.decode_s(batch, ctx) / self.reference.decode_s(batch, ctx)
        return pre_ms, dec_ms, out

    def predict(self, new_tokens: list[int], context_tokens: list[int],
                draft_tokens: list[int] | None = None) -> pb.StepTiming:
        """Timing of one step; ``out_of_range`` set when any lookup left the training data.

        A speculative verification (``draft_tokens``) is timed as the decode it is: its tokens
        run through the GEMMs, its attention reads the cache like a decode at the drafts' context,
        and the step keeps the decode floor (a prefill chunk's floor would charge it +46%)."""
        tokens = sum(new_tokens)
        tokens8 = -(-tokens // 8) * 8
        prefill, decode_ctx = [], []
        drafts = draft_tokens or [0] * len(new_tokens)
        for new, ctx, draft in zip(new_tokens, context_tokens, drafts):
            if is_decode(new, ctx, draft):
                decode_ctx.append(ctx + draft)
            else:
                prefill.append((new, ctx))
        ops, ar_ms = self._layer_ops(tokens8)
        pre_ms, dec_ms, out = self._attention(prefill, decode_ctx)
        num_seqs = len(new_tokens)
        lm_head_ms = float(self._layer_ops(-(-num_seqs // 8) * 8)[0][self.up_index]) * self.lm_head_ratio
        layers = self.layers
        compute_ms = float(ops.sum()) * layers + (pre_ms + dec_ms) * layers + lm_head_ms
        comm_ms = 2.0 * ar_ms * layers
        scale, total_ms = 1.0, compute_ms + comm_ms
        if self.overhead is not None:
            scale = self.overhead.gpu_scale
            total_ms = engine_step_ms(self.overhead, compute_ms + comm_ms, has_prefill=bool(prefill),
                                      num_seqs=num_seqs, num_layers=layers)
        # Kernel entries are reported at the engine's speed, so they add up to compute + communication.
        ns = scale * NS_PER_MS
        over_ns = max(total_ms - scale * (compute_ms + comm_ms), 0.0) * NS_PER_MS
        breakdown = dict(zip(OPERATORS, (ops * (layers * ns)).tolist()))
        breakdown.update(attention_prefill=pre_ms * layers * ns, attention_decode=dec_ms * layers * ns,
                         all_reduce=comm_ms * ns, lm_head=lm_head_ms * ns, overhead=over_ns,
                         attention_roofline=1.0 if self.is_scaled else 0.0)
        compute_ns, comm_ns = compute_ms * ns, comm_ms * ns
        out = out or tokens8 > self.max_tokens
        if self.all_reduce is not None:
            out = out or 2.0 * self.hidden * tokens8 > self.all_reduce.x_max
        return pb.StepTiming(duration_ns=int(compute_ns + comm_ns + over_ns), compute_ns=int(compute_ns),
                             communication_ns=int(comm_ns), dispatch_ns=int(over_ns), breakdown=breakdown,
                             out_of_range=out)
