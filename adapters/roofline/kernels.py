"""The fitted kernel model: how long one GPU kernel of a known class takes.

BestServe's roofline gives every operator of a phase the same efficiencies.
Measured kernels do not behave that way: a GEMM's tensor-core efficiency
rises with its row count M, FlashAttention's with the length of each
sequence's query, and every kernel, however small, costs a few
microseconds. The fitted model gives each operator class a handful of
physical parameters per device family (``fit`` fits them on public
kernel measurements; ``profiles/fitted.yaml`` ships them):

- **GEMM** (projections, MLP, LM head, MoE experts), ``M`` rows::

      t = floor + max(W / (e_g(M) S_c), Q / (e_w S_m)),   e_g(M) = gemm_eff M / (M + gemm_m_half)

  Compute efficiency saturates in M (small M fills few output tiles and
  runs short main loops); a GEMM of few rows streams its weights at e_w.
  ``W / e_g(M)`` is ``2KN (M + m_half) / gemm_eff``: it never falls as M grows.

- **Attention** (one FlashAttention call over every sequence of the step,
  as vLLM V1 issues it; prefill chunks, decodes and speculative
  verifications alike)::

      decode-only call:  t = floor + max(W / (e_a S_c) + tiles x attn_tile_us, Q / (e_am S_m))
      any prefill chunk: t = floor + max(W / (e_a S_c) + tiles x attn_tile_us, Q / (e_vm S_m),
                                         span x attn_span_ns)

  with W the causal FLOPs, Q the Q/K/V/O bytes and ``tiles`` the
  128-row query tiles of the call (``heads x tokens / 128 + kv_heads x
  sequences``: FlashAttention packs the query heads of one KV head into a
  tile, and every sequence starts tiles of its own). The tile term is why a
  short sequence attends less efficiently than a long one. A call with a
  prefill chunk runs the varlen prefill kernel: it does not split a long
  KV cache across SMs as the decode kernel does, so one CTA scans the
  longest sequence's ``span`` keys alone, and decodes in it read their KV
  at ``e_vm = attn_varlen_share x attn_mem_eff`` (LLMServingSim's
  mixed-batch shots: one decode at 16k context costs 62 µs alone and 366 µs
  beside a 256-token chunk on an RTX PRO 6000).

- **Element-wise** (norms, RoPE, activation, KV write, embedding)::

      t = floor + Q / (e_e S_m)

- **Sampler** (top-k/top-p over the logits): ``sampler_us`` plus the logits
  read as an element-wise op.

- **Fused MoE call** (one per MoE layer and rank): its expert GEMMs and
  activation are timed as GEMMs and an element-wise kernel over the
  experts the step's tokens touch; ``moe_floor_us`` is the rest of the
  call, whatever the token count: the top-k softmax, the sort of the
  token-expert pairs into per-expert blocks, the activations' quantization
  and the weighted sum of each token's experts (aiconfigurator-core's
  vLLM MoE tables: one token through one Scout expert, FP8 TP2, takes 80 µs
  on an H100 where its GEMMs account for 33 µs).

All terms grow with the work, so a step's device time never falls when a
token or a sequence is added.

``kernel_ns(kind, work, traffic, rows, k, peak_flops, mem_bw, span=0.0)``
returns a kernel's time in ns and whether its compute term bounds it:
``rows`` is the GEMM's M or the attention call's query tiles
(``attention_tiles(heads, kv_heads, tokens, seqs)``), ``span`` the keys of
the longest sequence of an attention call with a prefill chunk (0 for a
decode-only call); a GEMM of no rows takes 0. Both are the compiled core's
(``core/src/roofline/kernels.rs``). Main names: :class:`KernelParams`,
:func:`kernel_ns`, :data:`KERNEL_KEYS`.
"""

from __future__ import annotations

import dataclasses

# The model itself is in the compiled core (core/src/roofline/kernels.rs, issue #37).
from cosim_core import attention_tiles, kernel_ns

# Operator classes (the ``kind`` of an op in :mod:`.operators`).
GEMM, ELEM, ATTN, SAMPLE, MOE = range(5)
KIND_NAMES = ("gemm", "elementwise", "attention", "sampler", "moe")


@dataclasses.dataclass(frozen=True)
class KernelParams:
    """Per-family kernel parameters (fitted; ``profiles/fitted.yaml`` says on what).

    Attributes:
        gemm_eff: tensor-core efficiency a GEMM approaches as M grows (0, 1].
        gemm_m_half: rows at which a GEMM reaches half of ``gemm_eff``.
        gemm_mem_eff: share of the memory bandwidth a weight-streaming GEMM reaches (0, 1].
        gemm_floor_us: device time of the smallest GEMM.
        elem_mem_eff: share of the memory bandwidth of element-wise kernels (0, 1].
        elem_floor_us: device time of the smallest element-wise kernel.
        attn_eff: tensor-core efficiency of FlashAttention on long sequences (0, 1].
        attn_mem_eff: share of the memory bandwidth FlashAttention reaches reading K/V (0, 1].
        attn_floor_us: device time of the smallest attention call.
        attn_tile_us: time per 128-row query tile of one KV head (start-up of a tile's main loop).
        attn_varlen_share: the share of ``attn_mem_eff`` a call with a prefill chunk reaches (0, 1].
        attn_span_ns: time per key of the longest sequence of such a call, scanned by one CTA.
        sampler_us: device time of the sampler's kernels besides reading the logits.
        moe_floor_us: device time of a fused MoE call besides its expert GEMMs and activation
            (routing, sort, quantization, combine); 0 where no MoE table was fitted.
    """

    gemm_eff: float = 0.7
    gemm_m_half: float = 64.0
    gemm_mem_eff: float = 0.85
    gemm_floor_us: float = 5.0
    elem_mem_eff: float = 0.7
    elem_floor_us: float = 2.5
    attn_eff: float = 0.6
    attn_mem_eff: float = 0.8
    attn_floor_us: float = 10.0
    attn_tile_us: float = 0.05
    attn_varlen_share: float = 1.0
    attn_span_ns: float = 0.0
    sampler_us: float = 25.0
    moe_floor_us: float = 0.0


KERNEL_KEYS = tuple(f.name for f in dataclasses.fields(KernelParams))
EFFICIENCY_KEYS = frozenset(k for k in KERNEL_KEYS if k.endswith(("_eff", "_share")))

__all__ = ["ATTN", "EFFICIENCY_KEYS", "ELEM", "GEMM", "KERNEL_KEYS", "KIND_NAMES", "MOE", "SAMPLE",
           "KernelParams", "attention_tiles", "kernel_ns"]
