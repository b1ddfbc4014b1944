//! Work W (FLOP) and memory traffic Q (bytes) of every operator of a step, per device (the tables
//! and their departures from BestServe's: `adapters/roofline/operators.py`).
//!
//! Every expression keeps the Python model's operations in their order: the floats are its.

use super::config::Shape;
use super::kernels::{attention_tiles, py_max, Kind};
use super::stats::{BatchStats, Group};

/// Modules in dispatch order (BestServe Algorithm 1 plus embedding and head).
pub const EMBED: usize = 0;
pub const NORM_IN: usize = 1;
pub const ATTENTION: usize = 2;
pub const NORM_POST: usize = 3;
pub const MLP: usize = 4;
pub const HEAD: usize = 5;
pub const MODULES: usize = 6;

/// Which phase's efficiencies time an operator: the step's blend, prefill's or decode's.
pub const BLEND: usize = 0;
pub const PREFILL: usize = 1;
pub const DECODE: usize = 2;

/// Bytes per logit the sampler reads (vLLM samples from fp32 logits) and its passes over them.
const LOGIT_BYTES: f64 = 4.0;
const SAMPLER_PASSES: f64 = 2.0;

/// One operator: its module, breakdown key, work, traffic, phase group and kernel class, and the
/// kernel's size (a GEMM's M, an attention call's query tiles) and span (see `kernels`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Op {
    pub module: usize,
    pub key: &'static str,
    pub work: f64,
    pub traffic: f64,
    pub group: usize,
    pub kind: Kind,
    pub rows: f64,
    pub span: f64,
}

/// rows x k @ k x n with `weights` weight matrices of k x n read; `m` the M of each GEMM (the
/// rows' share of one expert where several split them).
#[allow(clippy::too_many_arguments)]
fn gemm(module: usize, key: &'static str, s: &Shape, rows: f64, k: f64, n: f64, weights: f64, m: f64) -> Op {
    Op {
        module,
        key,
        work: 2.0 * rows * k * n,
        traffic: s.ba * rows * (k + n) + s.bp * weights * k * n,
        group: BLEND,
        kind: Kind::Gemm,
        rows: m,
        span: 0.0,
    }
}

fn elem(module: usize, key: &'static str, work: f64, traffic: f64) -> Op {
    Op { module, key, work, traffic, group: BLEND, kind: Kind::Elem, rows: 0.0, span: 0.0 }
}

/// RMSNorm over `t` tokens (Table 6; fused: one add+norm kernel).
pub fn norm_ops(ops: &mut Vec<Op>, module: usize, s: &Shape, t: f64) {
    let (h, ba) = (s.h as f64, s.ba);
    if s.fused {
        ops.push(elem(module, "norm", 5.0 * t * h, 4.0 * ba * t * h + s.bp * h));
        return;
    }
    ops.extend([
        elem(module, "norm", t * h, 2.0 * ba * t * h),       // POW
        elem(module, "norm", t * h, ba * (t * h + t)),       // MEAN
        elem(module, "norm", t, 2.0 * ba * t),               // ADD eps
        elem(module, "norm", t, 2.0 * ba * t),               // RSQRT
        elem(module, "norm", t * h, ba * (2.0 * t * h + t)), // MUL by rsqrt
        elem(module, "norm", t * h, 2.0 * ba * t * h + s.bp * h),
    ]); // MUL by weight
}

/// FlashAttention over `g`: causal FLOPs, Q and O once, K and V once per KV head; `span` the
/// longest sequence of a call with a prefill chunk (0: decode-only).
fn flash(s: &Shape, g: &Group, group: usize, span: f64) -> Op {
    let tiles = attention_tiles(s.heads, s.kv / s.head_dim as f64, g.new, g.seqs as f64);
    Op {
        module: ATTENTION,
        key: "attention",
        work: 4.0 * g.causal * s.q,
        traffic: 2.0 * s.ba * g.new * s.q + 2.0 * s.bkv * g.ctx * s.kv,
        group,
        kind: Kind::Attn,
        rows: tiles,
        span,
    }
}

/// QK^T, softmax and .V of one group (Tables 8-11; fused: FlashAttention).
fn attention_core(ops: &mut Vec<Op>, s: &Shape, g: &Group, group: usize) {
    if g.seqs == 0 {
        return;
    }
    let (ba, bkv, q, heads) = (s.ba, s.bkv, s.q, s.heads);
    if s.fused {
        ops.push(flash(s, g, group, 0.0));
        return;
    }
    // Eager attention repeats the KV heads (repeat_kv), so K and V are read q wide.
    let scores = heads * g.pairs;
    let op =
        |key, work, traffic, kind, rows| Op { module: ATTENTION, key, work, traffic, group, kind, rows, span: 0.0 };
    ops.extend([
        op("attn_qk", 2.0 * g.pairs * q, ba * g.new * q + bkv * g.ctx * q + ba * scores, Kind::Gemm, g.new),
        op("attn_softmax", scores, 2.0 * ba * scores, Kind::Elem, 0.0), // div by sqrt(d)
        op("attn_softmax", scores, ba * (2.0 * scores + g.pairs), Kind::Elem, 0.0), // mask add
        op("attn_softmax", 3.0 * scores, 2.0 * ba * scores, Kind::Elem, 0.0), // softmax
        op("attn_av", 2.0 * g.pairs * q, ba * scores + bkv * g.ctx * q + ba * g.new * q, Kind::Gemm, g.new),
    ]);
}

/// The attention core that changes along a decode run: the decodes', or with the fitted kernel
/// model the one varlen call over every sequence of the step.
pub fn core_ops(ops: &mut Vec<Op>, s: &Shape, b: &BatchStats) {
    if s.fitted && s.fused {
        let (p, d) = (&b.prefill, &b.decode);
        let both = Group {
            seqs: p.seqs + d.seqs,
            new: p.new + d.new,
            ctx: p.ctx + d.ctx,
            pairs: p.pairs + d.pairs,
            causal: p.causal + d.causal,
            max_len: 0.0,
        };
        let span = if p.seqs != 0 { py_max(p.max_len, d.max_len) } else { 0.0 };
        ops.push(flash(s, &both, BLEND, span));
        return;
    }
    attention_core(ops, s, &b.decode, DECODE);
}

/// Projections, RoPE, KV-cache write, the prefill's attention core, residual add: the attention
/// module but for [`core_ops`].
pub fn attention_ops(ops: &mut Vec<Op>, s: &Shape, b: &BatchStats) {
    let (t, h, q, kv, ba) = (b.tokens, s.h as f64, s.q, s.kv, s.ba);
    if s.fused {
        ops.extend([
            gemm(ATTENTION, "qkv_proj", s, t, h, q + 2.0 * kv, 1.0, t),
            elem(ATTENTION, "rope", 3.0 * t * (q + kv), 2.0 * ba * t * (q + kv)),
        ]);
    } else {
        ops.extend([
            gemm(ATTENTION, "qkv_proj", s, t, h, q, 1.0, t),
            gemm(ATTENTION, "qkv_proj", s, t, h, kv, 1.0, t),
            gemm(ATTENTION, "qkv_proj", s, t, h, kv, 1.0, t),
            elem(ATTENTION, "rope", 3.5 * t * (q + kv), ba * t * (8.5 * (q + kv) + (2 * s.head_dim) as f64)),
        ]);
    }
    ops.push(elem(ATTENTION, "kv_update", 0.0, 2.0 * s.bkv * t * kv));
    if !(s.fitted && s.fused) {
        attention_core(ops, s, &b.prefill, PREFILL);
    }
    ops.push(gemm(ATTENTION, "o_proj", s, t, q, h, 1.0, t));
    if !s.fused {
        ops.push(elem(ATTENTION, "residual_add", t * h, 3.0 * ba * t * h));
    }
}

/// Gate/up, activation, down over `rows` tokens reading `weights` experts' matrices.
fn ffn_ops(ops: &mut Vec<Op>, s: &Shape, rows: f64, weights: f64) {
    let (h, f, ba) = (s.h as f64, s.f, s.ba);
    let m = if weights > 1.0 { rows / weights } else { rows }; // each expert's GEMM runs its share
    if s.gated && s.fused {
        ops.extend([
            gemm(MLP, "mlp_gate_up", s, rows, h, 2.0 * f, weights, m),
            elem(MLP, "mlp_act", 6.0 * rows * f, 3.0 * ba * rows * f),
        ]);
    } else if s.gated {
        ops.extend([
            gemm(MLP, "mlp_gate_up", s, rows, h, f, weights, m),
            elem(MLP, "mlp_act", 5.0 * rows * f, 2.0 * ba * rows * f), // SiLU
            gemm(MLP, "mlp_gate_up", s, rows, h, f, weights, m),
            elem(MLP, "mlp_act", rows * f, 3.0 * ba * rows * f),
        ]); // mul
    } else {
        ops.extend([
            gemm(MLP, "mlp_gate_up", s, rows, h, f, weights, m),
            elem(MLP, "mlp_act", 8.0 * rows * f, 2.0 * ba * rows * f),
        ]); // GELU
    }
    ops.push(gemm(MLP, "mlp_down", s, rows, f, h, weights, m));
}

/// The routed experts of one MoE layer on one rank: `tokens x top_k / ep` token-expert pairs
/// through `active` experts, and (fitted kernel model) the fused call's own floor.
pub fn moe_ops(ops: &mut Vec<Op>, s: &Shape, tokens: f64, active: f64) {
    ffn_ops(ops, s, tokens * s.top_k as f64 / s.ep as f64, active);
    if s.fitted {
        ops.push(Op {
            module: MLP,
            key: "moe_floor",
            work: 0.0,
            traffic: 0.0,
            group: BLEND,
            kind: Kind::Moe,
            rows: 0.0,
            span: 0.0,
        });
    }
}

/// Dense gated MLP (Tables 1, 2, 12, 13) or a MoE layer (router, routed and shared experts).
pub fn mlp_ops(ops: &mut Vec<Op>, s: &Shape, b: &BatchStats) {
    let t = b.tokens;
    let h = s.h as f64;
    if s.num_experts != 0 {
        let (e, k) = (s.num_experts, s.top_k);
        let active = s.experts_local * (1.0 - (1.0 - k as f64 / e as f64).powf(t));
        ops.push(Op {
            module: MLP,
            key: "moe_router",
            work: 2.0 * t * h * e as f64,
            traffic: s.ba * t * (s.h + e) as f64 + s.bp * h * e as f64,
            group: BLEND,
            kind: Kind::Gemm,
            rows: t,
            span: 0.0,
        });
        moe_ops(ops, s, t, active);
        if s.shared_experts != 0 {
            let shared = s.shared_experts as f64;
            ffn_ops(ops, s, t * shared, shared);
        }
    } else {
        ffn_ops(ops, s, t, 1.0);
    }
    if !s.fused {
        ops.push(elem(MLP, "residual_add", t * h, 3.0 * s.ba * t * h));
    }
}

/// Embedding lookup (first stage).
pub fn embed_ops(ops: &mut Vec<Op>, s: &Shape, b: &BatchStats) {
    ops.push(elem(EMBED, "embedding", 0.0, (s.bp + s.ba) * b.tokens * s.h as f64));
}

/// Final norm, LM head on each sequence's last token, and (fitted kernel model) the sampler.
pub fn head_ops(ops: &mut Vec<Op>, s: &Shape, b: &BatchStats) {
    norm_ops(ops, HEAD, s, b.tokens);
    let seqs = b.seqs as f64;
    ops.push(gemm(HEAD, "lm_head", s, seqs, s.h as f64, s.vocab, 1.0, seqs));
    if s.fitted {
        ops.push(Op {
            module: HEAD,
            key: "sampler",
            work: 0.0,
            traffic: SAMPLER_PASSES * LOGIT_BYTES * s.vocab * s.tp as f64 * seqs,
            group: BLEND,
            kind: Kind::Sample,
            rows: 0.0,
            span: 0.0,
        });
    }
}

/// The LoRA GEMMs of one layer (Punica's SGMV, S-LoRA's MBGMM): one op per module group
/// (attention: q, k, v, o; MLP of a dense model: gate, up, down) over every adapter's tokens.
pub fn lora_ops(ops: &mut Vec<Op>, s: &Shape, adapters: &[(i64, f64)]) {
    if adapters.is_empty() {
        return;
    }
    let (h, q, kv, f) = (s.h as f64, s.q, s.kv, s.f);
    let mut groups = vec![(ATTENTION, (h + q) + 2.0 * (h + kv) + (q + h))];
    if s.num_experts == 0 {
        groups.push((MLP, (if s.gated { 2.0 } else { 1.0 }) * (h + f) + (f + h)));
    }
    // sum() adds left to right from 0
    let rank_tokens = adapters.iter().fold(0.0, |sum, &(rank, tokens)| sum + rank as f64 * tokens);
    let ranks: i64 = adapters.iter().map(|&(rank, _)| rank).sum();
    let tokens = adapters.iter().fold(0.0, |sum, &(_, tokens)| sum + tokens);
    for (module, width) in groups {
        ops.push(Op {
            module,
            key: "lora",
            work: 2.0 * rank_tokens * width,
            traffic: s.ba * (ranks as f64 + tokens) * width,
            group: BLEND,
            kind: Kind::Gemm,
            rows: tokens,
            span: 0.0,
        });
    }
}
