//! One step's token counts and attention groups: what the model reads of a batch
//! (`operators.batch_stats` documents the split into prefill chunks and decodes).

use pyo3::exceptions::{PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::kernels::py_max;

/// Sums over the sequences of one attention group.
#[pyclass(module = "cosim_core", name = "BatchGroup", frozen, get_all, eq)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Group {
    pub seqs: i64,
    /// Sum of n (new tokens).
    pub new: f64,
    /// Sum of L (keys each sequence attends to).
    pub ctx: f64,
    /// Sum of n L (query-key pairs, full matrix).
    pub pairs: f64,
    /// Sum of n c + n (n + 1) / 2 (pairs under the causal mask).
    pub causal: f64,
    /// Max L (0 where only sums are known: decodes of a decode-only step).
    pub max_len: f64,
}

impl Group {
    /// Its fields' bits, a memo key (sums of counts: never -0.0 or NaN).
    pub fn key(&self) -> [u64; 6] {
        [
            self.seqs as u64,
            self.new.to_bits(),
            self.ctx.to_bits(),
            self.pairs.to_bits(),
            self.causal.to_bits(),
            self.max_len.to_bits(),
        ]
    }
}

#[pymethods]
impl Group {
    #[new]
    #[pyo3(signature = (seqs = 0, new = 0.0, ctx = 0.0, pairs = 0.0, causal = 0.0, max_len = 0.0))]
    fn py_new(seqs: i64, new: f64, ctx: f64, pairs: f64, causal: f64, max_len: f64) -> Self {
        Group { seqs, new, ctx, pairs, causal, max_len }
    }

    fn __repr__(&self) -> String {
        format!(
            "BatchGroup(seqs={}, new={:?}, ctx={:?}, pairs={:?}, causal={:?}, max_len={:?})",
            self.seqs, self.new, self.ctx, self.pairs, self.causal, self.max_len
        )
    }
}

/// One step: token counts, attention groups and LoRA adapters.
///
/// `decode` holds the sequences that generate (one new token after a cached context, or that
/// token and the drafts it verifies); `prefill` the prompt chunks; `lora` per distinct adapter
/// (rank, its tokens).
#[pyclass(module = "cosim_core", frozen, eq)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchStats {
    #[pyo3(get)]
    pub tokens: f64,
    #[pyo3(get)]
    pub seqs: i64,
    /// Share of tokens that belong to prefill chunks.
    #[pyo3(get)]
    pub prefill_share: f64,
    #[pyo3(get)]
    pub prefill: Group,
    #[pyo3(get)]
    pub decode: Group,
    pub lora: Vec<(i64, f64)>,
}

#[pymethods]
impl BatchStats {
    #[new]
    #[pyo3(signature = (tokens, seqs, prefill_share, prefill, decode, lora = Vec::new()))]
    fn py_new(
        tokens: f64,
        seqs: i64,
        prefill_share: f64,
        prefill: Group,
        decode: Group,
        lora: Vec<(i64, f64)>,
    ) -> Self {
        BatchStats { tokens, seqs, prefill_share, prefill, decode, lora }
    }

    /// Per distinct LoRA adapter in the step: (rank, its tokens), a tuple.
    #[getter]
    fn lora<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.lora)
    }

    /// A copy with `tokens` (a data-parallel group's padding) or `lora` changed.
    #[pyo3(signature = (*, tokens = None, lora = None))]
    fn _replace(&self, tokens: Option<f64>, lora: Option<Vec<(i64, f64)>>) -> Self {
        BatchStats {
            tokens: tokens.unwrap_or(self.tokens),
            lora: lora.unwrap_or_else(|| self.lora.clone()),
            ..self.clone()
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "BatchStats(tokens={:?}, seqs={}, prefill_share={:?}, prefill={}, decode={}, lora={:?})",
            self.tokens,
            self.seqs,
            self.prefill_share,
            self.prefill.__repr__(),
            self.decode.__repr__(),
            self.lora
        )
    }
}

/// A step of `seqs` decodes whose contexts sum to `context_sum`.
pub fn decode_stats(seqs: i64, context_sum: i64) -> BatchStats {
    let ctx = (context_sum + seqs) as f64;
    BatchStats {
        tokens: seqs as f64,
        seqs,
        prefill_share: 0.0,
        prefill: Group::default(),
        decode: Group { seqs, new: seqs as f64, ctx, pairs: ctx, causal: ctx, max_len: 0.0 },
        lora: Vec::new(),
    }
}

/// Sums a batch: a sequence with a cached context whose new tokens are one sampled token plus the
/// drafts it verifies (`draft_tokens`, empty without speculation) is a decode, any other a
/// prefill chunk.
pub fn batch_stats(new_tokens: &[i64], context_tokens: &[i64], draft_tokens: &[i64]) -> PyResult<BatchStats> {
    if new_tokens.is_empty() || context_tokens.is_empty() {
        return Err(PyValueError::new_err("a batch needs at least one sequence"));
    }
    if draft_tokens.is_empty() && new_tokens.iter().max() == Some(&1) && context_tokens.iter().min() > Some(&0) {
        return Ok(decode_stats(new_tokens.len() as i64, context_tokens.iter().sum()));
    }
    // zip() over the three stops at the shortest, as in Python (the backend checks the lengths)
    let mut count = new_tokens.len().min(context_tokens.len());
    if !draft_tokens.is_empty() {
        count = count.min(draft_tokens.len());
    }
    let (mut prefill, mut decode) = (Group::default(), Group::default());
    for k in 0..count {
        let (n, c) = (new_tokens[k], context_tokens[k]);
        let drafts = if draft_tokens.is_empty() { 0 } else { draft_tokens[k] };
        let length = c + n;
        let group = if c > 0 && n - drafts == 1 { &mut decode } else { &mut prefill };
        group.seqs += 1;
        group.new += n as f64;
        group.ctx += length as f64;
        group.pairs += (n * length) as f64;
        group.causal += (n * c) as f64 + (n * (n + 1)) as f64 / 2.0;
        group.max_len = py_max(group.max_len, length as f64);
    }
    let tokens = prefill.new + decode.new;
    if tokens == 0.0 {
        return Err(PyZeroDivisionError::new_err("float division by zero"));
    }
    Ok(BatchStats {
        tokens,
        seqs: prefill.seqs + decode.seqs,
        prefill_share: prefill.new / tokens,
        prefill,
        decode,
        lora: Vec::new(),
    })
}

/// The step's distinct LoRA adapters as (rank, tokens), in order of first appearance (without
/// ids each sequence with a rank is an adapter of its own).
pub fn lora_adapters(new_tokens: &[i64], ranks: &[i64], ids: &[i64]) -> Vec<(i64, f64)> {
    let mut adapters: Vec<(i64, i64, f64)> = Vec::new(); // (id, rank, tokens)
    for (k, (&n, &rank)) in new_tokens.iter().zip(ranks).enumerate() {
        if rank == 0 {
            continue;
        }
        let id = if ids.is_empty() { -1 - k as i64 } else { ids[k] };
        match adapters.iter_mut().find(|adapter| adapter.0 == id) {
            Some(adapter) => adapter.2 += n as f64,
            None => adapters.push((id, rank, n as f64)),
        }
    }
    adapters.into_iter().map(|(_, rank, tokens)| (rank, tokens)).collect()
}
