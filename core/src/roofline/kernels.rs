//! The fitted kernel model: how long one GPU kernel of a known class takes (the model and its
//! sources: `adapters/roofline/kernels.py`).

use pyo3::prelude::*;

/// Query rows per FlashAttention tile: kBlockM = 128 for head_dim 128 in FlashAttention-2/3
/// (Dao, "FlashAttention-2", 2023, §3.3; FlashAttention-3's Hopper kernels, hdim 128).
pub const TILE_ROWS: f64 = 128.0;
const NS: f64 = 1e9;

/// An operator's kernel class (`kernels.GEMM`..`kernels.MOE` in Python, in this order).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Gemm,
    Elem,
    Attn,
    Sample,
    Moe,
}

impl Kind {
    /// The kind of a Python code (0..4).
    pub fn from_code(code: i64) -> Option<Kind> {
        Some(match code {
            0 => Kind::Gemm,
            1 => Kind::Elem,
            2 => Kind::Attn,
            3 => Kind::Sample,
            4 => Kind::Moe,
            _ => return None,
        })
    }
}

/// A device family's fitted kernel parameters (`kernels.KernelParams`, read once per session).
#[derive(FromPyObject, Clone, Copy, Debug, PartialEq)]
pub struct KernelParams {
    pub gemm_eff: f64,
    pub gemm_m_half: f64,
    pub gemm_mem_eff: f64,
    pub gemm_floor_us: f64,
    pub elem_mem_eff: f64,
    pub elem_floor_us: f64,
    pub attn_eff: f64,
    pub attn_mem_eff: f64,
    pub attn_floor_us: f64,
    pub attn_tile_us: f64,
    pub attn_varlen_share: f64,
    pub attn_span_ns: f64,
    pub sampler_us: f64,
    pub moe_floor_us: f64,
}

/// Query tiles of one attention call: `heads x tokens / 128 + kv_heads x seqs`.
pub fn attention_tiles(heads: f64, kv_heads: f64, tokens: f64, seqs: f64) -> f64 {
    heads * tokens / TILE_ROWS + kv_heads * seqs
}

/// `a` unless `b` is larger (Python's `max(a, b)`: ties and NaN keep the first).
#[inline]
pub fn py_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// `a` unless `b` is smaller (Python's `min(a, b)`).
#[inline]
pub fn py_min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// Device time of one kernel in ns, and whether its compute term bounds it.
///
/// `rows` is a GEMM's M or an attention call's query tiles; `span` the keys of the longest
/// sequence of an attention call with a prefill chunk (0: decode-only).
#[allow(clippy::too_many_arguments)]
pub fn kernel_ns(
    kind: Kind,
    work: f64,
    traffic: f64,
    rows: f64,
    k: &KernelParams,
    peak_flops: f64,
    mem_bw: f64,
    span: f64,
) -> (f64, bool) {
    match kind {
        Kind::Gemm => {
            if rows <= 0.0 {
                return (0.0, false);
            }
            let t_c = work * (rows + k.gemm_m_half) / (rows * k.gemm_eff * peak_flops);
            let t_m = traffic / (k.gemm_mem_eff * mem_bw);
            ((if t_c > t_m { t_c } else { t_m }) * NS + k.gemm_floor_us * 1e3, t_c > t_m)
        }
        Kind::Attn => {
            let mut t_c = work / (k.attn_eff * peak_flops) + rows * k.attn_tile_us * 1e-6;
            let t_m = if span != 0.0 {
                t_c = py_max(t_c, span * k.attn_span_ns * 1e-9);
                traffic / (k.attn_varlen_share * k.attn_mem_eff * mem_bw)
            } else {
                traffic / (k.attn_mem_eff * mem_bw)
            };
            ((if t_c > t_m { t_c } else { t_m }) * NS + k.attn_floor_us * 1e3, t_c > t_m)
        }
        Kind::Moe => (k.moe_floor_us * 1e3, false),
        Kind::Sample | Kind::Elem => {
            let floor = if kind == Kind::Sample { k.sampler_us } else { k.elem_floor_us };
            (traffic / (k.elem_mem_eff * mem_bw) * NS + floor * 1e3, false)
        }
    }
}
