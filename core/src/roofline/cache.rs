//! The backend's timing cache of one model: a batch timed once is answered again without the
//! model (BestServe §3.3.4). A batch of decodes is keyed by its sequence count and context sum
//! (all [`super::stats::decode_stats`] reads of it), so decode batches that sum alike share an
//! entry. Shared by the backend's Python `predict` (gRPC) and the hub's native calls, so that the
//! model's memo sees the same steps in the same order either way.

use std::sync::Arc;

use super::estimator::StepEstimate;
use crate::bounded_cache::{BoundedCache, Hashed};

/// Step timings kept per model; the oldest stored goes first.
pub const CACHE_SIZE: usize = 16384;

/// A batch as the backend receives it: per-sequence fields, empty where not given.
#[derive(Clone, Copy, Debug)]
pub struct BatchRef<'a> {
    pub new: &'a [i64],
    pub context: &'a [i64],
    pub dp_rank_tokens: &'a [i64],
    pub drafts: &'a [i64],
    pub lora_ranks: &'a [i64],
    pub lora_ids: &'a [i64],
}

impl BatchRef<'_> {
    /// The data-parallel group's most tokens (0: no group): vLLM pads every rank's forward to it.
    pub fn padded(&self) -> i64 {
        self.dp_rank_tokens.iter().copied().max().unwrap_or(0)
    }

    /// Decodes only (as `batch_stats` tells them, for new tokens > 0), no LoRA, no drafts.
    pub fn decodes(&self) -> bool {
        self.new.iter().all(|&n| n == 1)
            && !self.context.contains(&0)
            && self.lora_ranks.is_empty()
            && self.drafts.iter().all(|&d| d == 0)
    }
}

/// What a timing is cached under; `slim`: timed without its breakdown (serves only such calls).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CacheKey {
    Decodes {
        seqs: usize,
        context_sum: i64,
        padded: i64,
        slim: bool,
    },
    Batch {
        new: Vec<i64>,
        context: Vec<i64>,
        padded: i64,
        slim: bool,
        lora_ranks: Vec<i64>,
        lora_ids: Vec<i64>,
        drafts: Vec<i64>,
    },
}

impl CacheKey {
    pub fn of(batch: &BatchRef<'_>, slim: bool) -> Self {
        let padded = batch.padded();
        if batch.decodes() {
            return CacheKey::Decodes { seqs: batch.new.len(), context_sum: batch.context.iter().sum(), padded, slim };
        }
        CacheKey::Batch {
            new: batch.new.to_vec(),
            context: batch.context.to_vec(),
            padded,
            slim,
            lora_ranks: batch.lora_ranks.to_vec(),
            lora_ids: batch.lora_ids.to_vec(),
            drafts: batch.drafts.to_vec(),
        }
    }
}

/// Timings by [`CacheKey`], first in first out.
#[derive(Debug, Default)]
pub struct StepCache {
    entries: BoundedCache<CacheKey, StepEstimate>,
}

impl StepCache {
    pub fn get(&self, key: &Hashed<CacheKey>) -> Option<&StepEstimate> {
        self.entries.get(key)
    }

    /// Stores a timing, dropping the oldest past [`CACHE_SIZE`].
    pub fn store(&mut self, key: Hashed<CacheKey>, timing: StepEstimate) {
        self.entries.store(Arc::new(key), timing, CACHE_SIZE);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
