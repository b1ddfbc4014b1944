"""Work W (FLOP) and memory traffic Q (bytes) of every operator, per device.

The ``eager`` tables are BestServe's Appendix A/B (seeds/003, Tables 1, 2,
6-13) generalized to one step that mixes sequences: ``T`` tokens in all, and
per sequence ``n`` new tokens after ``c`` cached ones (``L = c + n``).
GEMMs, norms and element-wise operators run over all ``T`` tokens; attention
runs per sequence over its own context, summed into one kernel per group
(prefill chunks, decodes). With ``b`` sequences of ``s`` tokens and no cache
the formulas reduce to the paper's ``b s`` and ``b s^2`` terms. Deliberate
departures from the printed tables (their apparent typos), all per device:

- activations that every TP rank reads whole (GEMM inputs) are not divided
  by t; weights and per-head tensors are (Table 10 divides Q_PROJ's input
  and leaves O_PROJ's weight undivided);
- RoPE runs on the rank's own heads (/t; Tables 10-11 do not divide it);
- the decode ``mul`` of the MLP reads ``b h0`` (Table 2 prints ``b s h0``) and
  the MLP residual ``add`` reads 3 x ``b s h`` (Table 1 prints ``4 b s h0``);
  one residual add per attention module is counted too;
- the decode KV-cache ``update`` writes only the new K/V (the paper's
  ``torch.cat`` copy of the cache), and ``repeat_kv`` / ``upcast``, whose
  rates kappa the paper does not publish, are left out (Table 3b's attention
  time is reproduced without them).

``fused`` describes a vLLM-style engine instead: fused add+RMSNorm,
FlashAttention (causal, no score matrix, GQA-aware KV reads), one
gate_up GEMM and a fused SiLU-and-mul.

With the fitted kernel model (``Shape.fitted``, :mod:`.kernels`) the
attention core is one FlashAttention varlen call over every sequence of the
step (the core's ``core_ops``), as vLLM V1 issues it, and the head adds the sampler.

Per module (the compiled core lists them: ``core/src/roofline/operators.rs``):

- attention: the QKV projections (fused: one GEMM), RoPE, the KV-cache write,
  the attention core (eager: QK^T, the softmax's scale, mask and softmax, .V
  per group, K and V read q wide as ``repeat_kv`` makes them; fused:
  FlashAttention, causal FLOPs, Q and O once, K and V once per KV head), O
  projection, and (eager) the residual add. The decodes' core changes along a
  decode run; with the fitted kernel model the core is one varlen call over
  every sequence of the step, its ``span`` the longest sequence where a
  prefill chunk is in it.
- MLP: a dense gated MLP (Tables 1, 2, 12, 13; fused: one gate_up GEMM and
  SiLU-and-mul) or a MoE layer: a router GEMM over all experts, then each rank
  runs its share of the ``T k`` token-expert pairs, reading the weights of the
  experts that at least one token picked (uniform routing: ``E (1 - (1 -
  k/E)^T)`` expected; each expert's GEMM runs its share of the rows), and its
  shared experts over all ``T`` tokens (weights always read). With the fitted
  kernel model the routed experts run as one fused MoE call, whose own kernels
  (routing, sort, quantization, combine) take the family's ``moe_floor_us``.
- embedding lookup (first stage); final norm and LM head (last stage), on the
  last token of each sequence only, as serving engines do (BestServe leaves
  both out, §3.3); with the fitted kernel model the sampler follows: it reads
  every sequence's full-vocabulary fp32 logits (gathered from the TP ranks)
  twice (softmax, then top-k/top-p and the draw).
- LoRA: Punica's SGMV (Chen et al., "Punica: Multi-Tenant LoRA Serving", MLSys
  2024) and S-LoRA's MBGMM (Sheng et al., MLSys 2024) run each adapter's tokens
  through its own A (shrink, in -> r) and B (expand, r -> out), one kernel for
  the batch per module. Per target module of ``in`` x ``out`` on this rank
  (q/k/v/gate/up column-parallel, o/down row-parallel; MLP modules of a dense
  model only, as vLLM's hub-side memory counts them): W = sum over adapters 2
  x tokens x r x (in + out) FLOP; Q = each adapter's weights read once, ``ba x
  r x (in + out)`` (LoRA weights in the activation dtype), plus the tokens'
  input and output, ``ba x T x (in + out)``. One op per module group
  (attention: q, k, v, o; MLP: gate, up, down), timed like any other.

An op is (module, key, W, Q, group, kind, rows, span); ``group`` picks the
phase efficiencies (the step's blend, prefill, decode), ``kind``, ``rows`` and
``span`` the fitted kernel class and its size (:mod:`.kernels`).

Main names: :class:`Shape` (per-session constants, Python: the session's
configuration), :class:`BatchStats` (per-step sums) and :func:`batch_stats`,
:func:`decode_stats`, :func:`lora_adapters` (the compiled core's).
"""

from __future__ import annotations

import dataclasses

from cosim_core import BatchGroup as Group
from cosim_core import BatchStats, batch_stats, decode_stats, lora_adapters

from cosim.v1 import types_pb2 as pb

__all__ = ["ATTENTION", "EMBED", "HEAD", "MLP", "NORM_IN", "NORM_POST", "BatchStats", "Group", "Shape", "batch_stats",
           "decode_stats", "lora_adapters", "make_shape"]

# Modules in dispatch order (BestServe Algorithm 1 plus embedding and head): a step's busy times
# are indexed by these.
EMBED, NORM_IN, ATTENTION, NORM_POST, MLP, HEAD = range(6)


@dataclasses.dataclass(frozen=True)
class Shape:
    """Per-device model dimensions after tensor and expert parallelism."""

    h: int            # hidden size (replicated on every rank)
    q: float          # query width on this rank: heads_per_rank x head_dim
    kv: float         # K (or V) width on this rank (GQA heads, replicated if t > kv heads)
    heads: float      # query heads on this rank
    head_dim: int
    f: float          # MLP width on this rank (per expert for MoE)
    gated: bool
    vocab: float      # LM-head columns on this rank
    num_experts: int  # 0 for a dense model
    top_k: int        # routed experts per token
    experts_local: float  # experts held by this rank
    tp: int
    pp: int
    ep: int
    layers_per_stage: int
    bp: float         # bytes per weight
    bkv: float        # bytes per KV element
    ba: float         # bytes per activation
    fused: bool
    fitted: bool = False  # fitted kernel model: one varlen attention call, and the sampler
    shared_experts: int = 0  # experts every token runs beside its routed ones (on every rank)


def make_shape(model: pb.ModelSpec, par: pb.Parallelism, *, act_bytes: float, fused: bool,
               fitted: bool = False) -> Shape:
    """Splits ``model`` over ``par`` (degrees 0 read as 1)."""
    tp, pp, ep = par.tensor or 1, par.pipeline or 1, par.expert or 1
    head_dim = model.head_dim or model.hidden_size // model.num_attention_heads
    kv_heads = max(model.num_kv_heads / tp, 1.0)
    moe = model.num_experts > 1
    f = model.intermediate_size / (tp if not (moe and ep > 1) else 1)
    return Shape(
        h=model.hidden_size, q=model.num_attention_heads / tp * head_dim, kv=kv_heads * head_dim,
        heads=model.num_attention_heads / tp, head_dim=head_dim, f=f, gated=model.gated_mlp,
        vocab=model.vocab_size / tp, num_experts=model.num_experts if moe else 0,
        top_k=max(model.experts_per_token - model.shared_experts, 1) if moe else 0,
        shared_experts=model.shared_experts if moe else 0,
        experts_local=model.num_experts / ep if moe else 0.0, tp=tp, pp=pp, ep=ep,
        layers_per_stage=model.num_layers // pp, bp=model.bytes_per_param or 2.0,
        bkv=model.bytes_per_kv_element or 2.0, ba=act_bytes, fused=fused, fitted=fitted)
