"""A step's work on one device: its GEMMs (for SCALE-Sim) and its memory-bound bytes.

Per decoder layer, with T tokens in the step, on one tensor-parallel rank
whose ``num_arrays`` arrays split each GEMM's N (and the attention heads):

- QKV (T x hidden . hidden x (h + 2 kv) d), O, MLP up (+gate) and down;
- per prefill or chunk sequence (n new after c cached tokens) and head:
  QK^T (n x d . d x (c + n)) and .V (n x (c + n) . (c + n) x d);
- once per step, the LM head for the last token of each sequence.

Decode sequences (n = 1) do their attention as a matrix-vector product
that only streams the KV cache, so it is timed as KV reads by bandwidth,
with the norms, activation, residual adds, RoPE and KV writes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from cosim.v1 import types_pb2 as pb

from .config import ArrayConfig

Gemm = tuple[int, int, int]  # (M, N, K): (M x K) . (K x N)


@dataclass(frozen=True)
class Shape:
    """One rank's share of the model."""

    num_layers: int
    hidden: int
    head_dim: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    mlp_factor: int
    top_k: int
    kv_bytes: float
    tp: int


def make_shape(spec: pb.SessionSpec) -> Shape:
    """Per-rank dimensions of ``spec.model`` under tensor parallelism."""
    model, tp = spec.model, spec.parallelism.tensor or 1
    head_dim = model.head_dim or model.hidden_size // model.num_attention_heads
    return Shape(num_layers=model.num_layers, hidden=model.hidden_size, head_dim=head_dim,
                 heads=model.num_attention_heads // tp, kv_heads=max(1, model.num_kv_heads // tp),
                 intermediate=model.intermediate_size // tp, vocab=math.ceil(model.vocab_size / tp),
                 mlp_factor=2 if model.gated_mlp else 1,
                 top_k=model.experts_per_token if model.num_experts > 1 else 1,
                 kv_bytes=model.bytes_per_kv_element or 2.0, tp=tp)


@dataclass(frozen=True)
class StepWork:
    """GEMMs with their counts, and bytes moved by memory-bound operators, for one step on one rank."""

    gemms: Counter[Gemm]
    memory_bytes: float
    allreduce_bytes: float


def step_work(shape: Shape, config: ArrayConfig, new_tokens: list[int], context_tokens: list[int]) -> StepWork:
    """The work of one step (see the module docstring)."""
    s, arrays = shape, config.num_arrays
    tokens, d = sum(new_tokens), s.head_dim
    routed = tokens * s.top_k  # MoE: each token's FFN runs top_k times (one expert's shape each)
    layer: Counter[Gemm] = Counter({
        (tokens, math.ceil((s.heads + 2 * s.kv_heads) * d / arrays), s.hidden): 1,
        (tokens, math.ceil(s.hidden / arrays), s.heads * d): 1,
        (routed, math.ceil(s.mlp_factor * s.intermediate / arrays), s.hidden): 1,
        (routed, math.ceil(s.hidden / arrays), s.intermediate): 1,
    })
    heads_per_array = math.ceil(s.heads / arrays)
    kv_read = 0.0
    for n, c in zip(new_tokens, context_tokens):
        if n == 1:
            kv_read += (c + 1) * 2 * s.kv_heads * d * s.kv_bytes
            continue
        layer[(n, c + n, d)] += heads_per_array
        layer[(n, d, c + n)] += heads_per_array
    act = config.act_bytes
    per_layer_bytes = (4 * tokens * s.hidden * act  # two RMSNorms, read + write
                       + 6 * tokens * s.hidden * act  # two residual adds, 2 reads + 1 write
                       + (s.mlp_factor + 1) * routed * s.intermediate * act  # activation (x gate)
                       + 2 * tokens * (s.heads + s.kv_heads) * d * act  # RoPE on q and k
                       + tokens * 2 * s.kv_heads * d * s.kv_bytes  # KV writes
                       + kv_read)
    gemms: Counter[Gemm] = Counter({g: count * s.num_layers for g, count in layer.items()})
    gemms[(len(new_tokens), math.ceil(s.vocab / arrays), s.hidden)] += 1
    return StepWork(gemms=gemms, memory_bytes=s.num_layers * per_layer_bytes + 2 * tokens * s.hidden * act,
                    allreduce_bytes=2 * s.num_layers * tokens * s.hidden * act if s.tp > 1 else 0.0)
