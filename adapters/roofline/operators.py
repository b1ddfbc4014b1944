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
step (:func:`core_ops`), as vLLM V1 issues it, and the head adds the sampler.

Main names: :class:`Shape` (per-session constants), :class:`BatchStats`
(per-step sums), :func:`batch_stats`, :func:`attention_ops`, :func:`core_ops`, :func:`moe_ops`,
:func:`head_ops`, :func:`lora_ops`. An op is ``(module, key, W, Q, group,
kind, rows, span)``; ``group`` picks the phase efficiencies (0 the step's
blend, 1 prefill, 2 decode), ``kind``, ``rows`` and ``span`` the fitted
kernel class and its size (:mod:`.kernels`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from cosim.v1 import types_pb2 as pb

from .kernels import ATTN, ELEM, GEMM, MOE, SAMPLE, attention_tiles

# Modules in dispatch order (BestServe Algorithm 1 plus embedding and head).
EMBED, NORM_IN, ATTENTION, NORM_POST, MLP, HEAD = range(6)
BLEND, PREFILL, DECODE = range(3)

Op = tuple[int, str, float, float, int, int, float, float]
# Bytes per logit the sampler reads (vLLM samples from fp32 logits) and its passes over them
# (softmax, then top-k/top-p and the draw); the fitted sampler_us carries the rest.
LOGIT_BYTES = 4.0
SAMPLER_PASSES = 2.0


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


class Group(NamedTuple):
    """Sums over the sequences of one attention group (a named tuple: built for every step timed,
    and part of the estimator's memo keys, so cheap to build and to hash)."""

    seqs: int = 0
    new: float = 0.0      # sum n
    ctx: float = 0.0      # sum L (keys each sequence attends to)
    pairs: float = 0.0    # sum n L (query-key pairs, full matrix)
    causal: float = 0.0   # sum n c + n (n + 1) / 2 (pairs under the causal mask)
    max_len: float = 0.0  # max L (0 where only sums are known: decodes of a decode-only step)


NO_PREFILL = Group()


class BatchStats(NamedTuple):
    """One step: token counts and attention groups (a named tuple, as :class:`Group`; ``_replace``
    makes a changed copy).

    ``decode`` holds the sequences that generate: one new token after a
    cached context, or (speculative decoding) that token and the drafts it
    verifies; ``prefill`` the prompt chunks.
    """

    tokens: float
    seqs: int
    prefill_share: float  # share of tokens that belong to prefill chunks
    prefill: Group
    decode: Group
    lora: tuple[tuple[int, float], ...] = ()  # per distinct LoRA adapter in the step: (rank, its tokens)


def decode_stats(seqs: int, context_sum: int) -> BatchStats:
    """A step of ``seqs`` decodes whose contexts sum to ``context_sum`` (all :func:`batch_stats`
    reads of such a batch)."""
    ctx = float(context_sum + seqs)
    # tokens, seqs, prefill_share, prefill, decode: positional, as every decode-only step builds one
    return BatchStats(float(seqs), seqs, 0.0, NO_PREFILL, Group(seqs, float(seqs), ctx, ctx, ctx))


def batch_stats(new_tokens: Sequence[int], context_tokens: Sequence[int],
                draft_tokens: Sequence[int] = ()) -> BatchStats:
    """Sums a batch.

    A sequence generates (the decode group) when it has a cached context and
    its new tokens are one sampled token plus the drafts it verifies
    (``draft_tokens``, empty without speculation): a verification reads the
    KV cache like a decode, whatever its token count. Any other sequence is
    a prefill chunk.
    """
    if not draft_tokens and max(new_tokens) == 1 and min(context_tokens) > 0:  # decodes only: summed in C
        return decode_stats(len(new_tokens), sum(context_tokens))
    drafts = draft_tokens or (0,) * len(new_tokens)
    p_seqs = d_seqs = 0
    p_new = p_ctx = p_pairs = p_causal = p_max = d_new = d_ctx = d_pairs = d_causal = d_max = 0.0
    for n, c, k in zip(new_tokens, context_tokens, drafts):
        length = c + n
        if c > 0 and n - k == 1:
            d_seqs += 1
            d_new += n
            d_ctx += length
            d_pairs += n * length
            d_causal += n * c + n * (n + 1) / 2
            d_max = max(d_max, length)
        else:
            p_seqs += 1
            p_new += n
            p_ctx += length
            p_pairs += n * length
            p_causal += n * c + n * (n + 1) / 2
            p_max = max(p_max, length)
    tokens = p_new + d_new
    return BatchStats(
        tokens=tokens, seqs=p_seqs + d_seqs, prefill_share=p_new / tokens,
        prefill=Group(p_seqs, p_new, p_ctx, p_pairs, p_causal, p_max),
        decode=Group(d_seqs, d_new, d_ctx, d_pairs, d_causal, d_max))


def lora_adapters(new_tokens: Sequence[int], ranks: Sequence[int], ids: Sequence[int]) -> tuple[tuple[int, float], ...]:
    """The step's distinct LoRA adapters as (rank, tokens), in order of first appearance
    (``StepBatch.lora_ranks``/``lora_ids``; without ids each sequence with a rank is an adapter of its own)."""
    adapters: dict[int, list[float]] = {}
    for k, (n, rank) in enumerate(zip(new_tokens, ranks)):
        if rank:
            adapter = adapters.setdefault(ids[k] if ids else -1 - k, [rank, 0.0])
            adapter[1] += n
    return tuple((int(rank), tokens) for rank, tokens in adapters.values())


def lora_ops(s: Shape, adapters: Sequence[tuple[int, float]]) -> list[Op]:
    """The LoRA GEMMs of one layer: Punica's SGMV (Chen et al., "Punica: Multi-Tenant LoRA Serving",
    MLSys 2024) and S-LoRA's MBGMM (Sheng et al., MLSys 2024) run each adapter's tokens through its
    own A (shrink, in -> r) and B (expand, r -> out), one kernel for the batch per module.

    Per target module of ``in`` x ``out`` on this rank (q/k/v/gate/up column-parallel, o/down
    row-parallel, so :class:`Shape`'s per-rank widths; MLP modules of a dense model only, as
    vLLM's hub-side memory counts them): W = sum over adapters 2 x tokens x r x (in + out) FLOP;
    Q = each adapter's weights read once, ``ba x r x (in + out)`` (LoRA weights in the activation
    dtype), plus the tokens' input and output, ``ba x T x (in + out)``. One op per module group
    (attention: q, k, v, o; MLP: gate, up, down), timed by the adapted roofline like any other.
    """
    if not adapters:
        return []
    h, q, kv, f = s.h, s.q, s.kv, s.f
    groups = [(ATTENTION, (h + q) + 2 * (h + kv) + (q + h))]
    if not s.num_experts:
        groups.append((MLP, (2 if s.gated else 1) * (h + f) + (f + h)))
    rank_tokens = sum(rank * tokens for rank, tokens in adapters)
    ranks = sum(rank for rank, _ in adapters)
    tokens = sum(tokens for _, tokens in adapters)
    return [(module, "lora", 2.0 * rank_tokens * width, s.ba * (ranks + tokens) * width, BLEND, GEMM, tokens, 0.0)
            for module, width in groups]


def _gemm(module: int, key: str, s: Shape, rows: float, k: float, n: float, weights: float,
          m: float | None = None) -> Op:
    """rows x k @ k x n with ``weights`` weight matrices of k x n read; ``m`` is the M of each
    GEMM when the rows are split among several (MoE experts)."""
    return (module, key, 2.0 * rows * k * n, s.ba * rows * (k + n) + s.bp * weights * k * n, BLEND, GEMM,
            rows if m is None else m, 0.0)


def _elem(module: int, key: str, work: float, traffic: float) -> Op:
    return (module, key, work, traffic, BLEND, ELEM, 0.0, 0.0)


def norm_ops(module: int, s: Shape, t: float) -> list[Op]:
    """RMSNorm over ``t`` tokens (Table 6; fused: one add+norm kernel)."""
    h, ba = s.h, s.ba
    if s.fused:
        return [_elem(module, "norm", 5.0 * t * h, 4.0 * ba * t * h + s.bp * h)]
    return [_elem(module, "norm", t * h, 2 * ba * t * h),              # POW
            _elem(module, "norm", t * h, ba * (t * h + t)),           # MEAN
            _elem(module, "norm", t, 2 * ba * t),                     # ADD eps
            _elem(module, "norm", t, 2 * ba * t),                     # RSQRT
            _elem(module, "norm", t * h, ba * (2 * t * h + t)),       # MUL by rsqrt
            _elem(module, "norm", t * h, 2 * ba * t * h + s.bp * h)]  # MUL by weight


def _flash(s: Shape, g: Group, group: int, span: float = 0.0) -> Op:
    """FlashAttention over ``g``: causal FLOPs, Q and O once, K and V once per KV head; ``span``
    is the longest sequence of a call with a prefill chunk (0: a decode-only call)."""
    tiles = attention_tiles(s.heads, s.kv / s.head_dim, g.new, g.seqs)
    return (ATTENTION, "attention", 4.0 * g.causal * s.q, 2 * s.ba * g.new * s.q + 2 * s.bkv * g.ctx * s.kv,
            group, ATTN, tiles, span)


def _attention_core(s: Shape, g: Group, group: int) -> list[Op]:
    """QK^T, softmax and .V of one group (Tables 8-11; fused: FlashAttention)."""
    if g.seqs == 0:
        return []
    ba, bkv, q, heads = s.ba, s.bkv, s.q, s.heads
    if s.fused:
        return [_flash(s, g, group)]
    # Eager attention repeats the KV heads (repeat_kv), so K and V are read q wide.
    scores = heads * g.pairs
    return [(ATTENTION, "attn_qk", 2.0 * g.pairs * q, ba * g.new * q + bkv * g.ctx * q + ba * scores, group,
             GEMM, g.new, 0.0),
            (ATTENTION, "attn_softmax", scores, 2 * ba * scores, group, ELEM, 0.0, 0.0),              # div by sqrt(d)
            (ATTENTION, "attn_softmax", scores, ba * (2 * scores + g.pairs), group, ELEM, 0.0, 0.0),  # mask add
            (ATTENTION, "attn_softmax", 3.0 * scores, 2 * ba * scores, group, ELEM, 0.0, 0.0),        # softmax
            (ATTENTION, "attn_av", 2.0 * g.pairs * q, ba * scores + bkv * g.ctx * q + ba * g.new * q, group,
             GEMM, g.new, 0.0)]


def core_ops(s: Shape, b: BatchStats) -> list[Op]:
    """The attention core that changes along a decode run: the decodes' (BestServe's phases), or
    with the fitted kernel model the one varlen call over every sequence of the step."""
    if s.fitted and s.fused:
        p, d = b.prefill, b.decode
        both = Group(p.seqs + d.seqs, p.new + d.new, p.ctx + d.ctx, p.pairs + d.pairs, p.causal + d.causal)
        return [_flash(s, both, BLEND, max(p.max_len, d.max_len) if p.seqs else 0.0)]
    return _attention_core(s, b.decode, DECODE)


def attention_ops(s: Shape, b: BatchStats, *, with_core: bool = True) -> list[Op]:
    """Projections, RoPE, KV-cache write, attention core, residual add.

    ``with_core=False`` leaves out :func:`core_ops`.
    """
    t, h, q, kv, ba = b.tokens, s.h, s.q, s.kv, s.ba
    if s.fused:
        ops = [_gemm(ATTENTION, "qkv_proj", s, t, h, q + 2 * kv, 1),
               _elem(ATTENTION, "rope", 3.0 * t * (q + kv), 2 * ba * t * (q + kv))]
    else:
        ops = [_gemm(ATTENTION, "qkv_proj", s, t, h, q, 1),
               _gemm(ATTENTION, "qkv_proj", s, t, h, kv, 1),
               _gemm(ATTENTION, "qkv_proj", s, t, h, kv, 1),
               _elem(ATTENTION, "rope", 3.5 * t * (q + kv), ba * t * (8.5 * (q + kv) + 2 * s.head_dim))]
    ops.append(_elem(ATTENTION, "kv_update", 0.0, 2 * s.bkv * t * kv))
    if not (s.fitted and s.fused):
        ops += _attention_core(s, b.prefill, PREFILL)
    if with_core:
        ops += core_ops(s, b)
    ops.append(_gemm(ATTENTION, "o_proj", s, t, q, h, 1))
    if not s.fused:
        ops.append(_elem(ATTENTION, "residual_add", t * h, 3 * ba * t * h))
    return ops


def _ffn_ops(s: Shape, rows: float, weights: float) -> list[Op]:
    """Gate/up, activation, down over ``rows`` tokens reading ``weights`` experts' matrices."""
    h, f, ba = s.h, s.f, s.ba
    m = rows / weights if weights > 1 else rows  # each expert's GEMM runs its share of the rows
    if s.gated and s.fused:
        ops = [_gemm(MLP, "mlp_gate_up", s, rows, h, 2 * f, weights, m),
               _elem(MLP, "mlp_act", 6.0 * rows * f, 3 * ba * rows * f)]
    elif s.gated:
        ops = [_gemm(MLP, "mlp_gate_up", s, rows, h, f, weights, m),
               _elem(MLP, "mlp_act", 5.0 * rows * f, 2 * ba * rows * f),     # SiLU
               _gemm(MLP, "mlp_gate_up", s, rows, h, f, weights, m),
               _elem(MLP, "mlp_act", rows * f, 3 * ba * rows * f)]           # mul
    else:
        ops = [_gemm(MLP, "mlp_gate_up", s, rows, h, f, weights, m),
               _elem(MLP, "mlp_act", 8.0 * rows * f, 2 * ba * rows * f)]     # GELU
    return ops + [_gemm(MLP, "mlp_down", s, rows, f, h, weights, m)]


def moe_ops(s: Shape, tokens: float, active: float) -> list[Op]:
    """The routed experts of one MoE layer on one rank: ``tokens x top_k / ep`` token-expert pairs
    through ``active`` experts' gate_up, activation and down, and (fitted kernel model) the fused
    call's own floor, a MOE op of no work or traffic (:func:`.kernels.kernel_ns`)."""
    ops = _ffn_ops(s, tokens * s.top_k / s.ep, active)
    if s.fitted:
        ops.append((MLP, "moe_floor", 0.0, 0.0, BLEND, MOE, 0.0, 0.0))
    return ops


def mlp_ops(s: Shape, b: BatchStats) -> list[Op]:
    """Dense gated MLP (Tables 1, 2, 12, 13) or a MoE layer.

    MoE: a router GEMM over all experts, then each rank runs its share of the
    ``T k`` token-expert pairs, reading the weights of the experts that at
    least one token picked (uniform routing: ``E (1 - (1 - k/E)^T)`` expected),
    and its shared experts over all ``T`` tokens (weights always read).
    With the fitted kernel model the routed experts run as one fused MoE
    call, whose own kernels (routing, sort, quantization, combine) take the
    family's ``moe_floor_us`` (:func:`moe_ops`).
    """
    t = b.tokens
    if s.num_experts:
        e, k = s.num_experts, s.top_k
        active = s.experts_local * (1.0 - (1.0 - k / e) ** t)
        ops = [(MLP, "moe_router", 2.0 * t * s.h * e, s.ba * t * (s.h + e) + s.bp * s.h * e, BLEND, GEMM, t, 0.0)]
        ops += moe_ops(s, t, active)
        if s.shared_experts:
            ops += _ffn_ops(s, t * s.shared_experts, s.shared_experts)
    else:
        ops = _ffn_ops(s, t, 1)
    if not s.fused:
        ops.append(_elem(MLP, "residual_add", t * s.h, 3 * s.ba * t * s.h))
    return ops


def head_ops(s: Shape, b: BatchStats) -> tuple[list[Op], list[Op]]:
    """Embedding lookup (first stage) and final norm + LM head (last stage).

    The LM head runs on the last token of each sequence only, as serving
    engines do; BestServe leaves both out (§3.3). With the fitted kernel
    model the sampler follows: it reads every sequence's full-vocabulary
    logits (gathered from the TP ranks) :data:`SAMPLER_PASSES` times.
    """
    t = b.tokens
    embed = [_elem(EMBED, "embedding", 0.0, (s.bp + s.ba) * t * s.h)]
    head = norm_ops(HEAD, s, t)
    head.append(_gemm(HEAD, "lm_head", s, b.seqs, s.h, s.vocab, 1))
    if s.fitted:
        head.append((HEAD, "sampler", 0.0, SAMPLER_PASSES * LOGIT_BYTES * s.vocab * s.tp * b.seqs, BLEND,
                     SAMPLE, 0.0, 0.0))
    return embed, head
