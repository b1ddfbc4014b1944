//! Batching policies: how a scheduler forms each step from its two moves.
//!
//! Every policy composes `Scheduler.schedule_running` (running sequences in admission order,
//! preempting the newest when KV blocks run out) and `Scheduler.admit` (waiting sequences in queue
//! order while budget, seats and blocks allow):
//!
//! - `static`: a batch is formed when the client is idle; it runs (prefill, then decodes) until
//!   every sequence in it finishes; nothing joins meanwhile.
//! - `continuous`: prefill-prioritized (Orca / vLLM V0): when waiting prompts can be admitted, the
//!   step prefills them whole and running decodes pause; otherwise the step decodes every running
//!   sequence.
//! - `chunked`: Sarathi-Serve / vLLM V1: running sequences first (decodes and unfinished chunks),
//!   then waiting prompts, all within one token budget (`chunk_size`, default
//!   `max_num_batched_tokens`); prompts are split. As in vLLM, `long_prefill_token_threshold` caps
//!   what one request computes in a step, and `scheduler_reserve_full_isl` admits a prompt only
//!   when blocks for all of it are free.
//! - `mixed`: every running decode plus whole waiting prompts that fit the remaining budget, in
//!   one step.
//!
//! Prefill-only and decode-only clients need no policy of their own: their sequences simply end
//! after the first token, or arrive with the prompt's KV.
//!
//! Each policy is named in `cosim.hub.config.choices.BATCHING` (`clients[].scheduler.batching`).

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;

use crate::batch::ScheduledBatch;
use crate::scheduler::Scheduler;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Static,
    Continuous,
    Chunked,
    Mixed,
}

/// Forms a scheduler's next step.
///
/// Attributes:
///     token_budget: most tokens one step computes.
///     whole_prompts: prompts are admitted whole, never split, so a prompt longer than the token
///         budget can never run (admission refuses it before the run, as vLLM does).
#[pyclass(module = "cosim_core", name = "BatchingPolicy", frozen)]
#[derive(Clone, Debug)]
pub struct Policy {
    kind: Kind,
    #[pyo3(get)]
    pub token_budget: i64,
    /// Most tokens one sequence computes in a step (0: no cap), vLLM's `long_prefill_token_threshold`.
    max_chunk_tokens: i64,
    /// vLLM's `scheduler_reserve_full_isl`.
    reserve_whole_prompt: bool,
}

#[pymethods]
impl Policy {
    /// The policy a client's scheduler section (`SchedulerConfig`) names.
    #[new]
    pub fn new(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = config.py();
        let name: String = config.getattr(intern!(py, "batching"))?.extract()?;
        let kind = match name.as_str() {
            "static" => Kind::Static,
            "continuous" => Kind::Continuous,
            "chunked" => Kind::Chunked,
            "mixed" => Kind::Mixed,
            _ => return Err(PyValueError::new_err(format!("no batching policy {name:?}"))),
        };
        let most: i64 = config.getattr(intern!(py, "max_num_batched_tokens"))?.extract()?;
        let (token_budget, max_chunk_tokens, reserve_whole_prompt) = if kind == Kind::Chunked {
            let chunk: Option<i64> = config.getattr(intern!(py, "chunk_size"))?.extract()?;
            (
                chunk.filter(|&c| c != 0).unwrap_or(most),
                config.getattr(intern!(py, "long_prefill_token_threshold"))?.extract()?,
                config.getattr(intern!(py, "scheduler_reserve_full_isl"))?.extract()?,
            )
        } else {
            (most, 0, false)
        };
        Ok(Policy { kind, token_budget, max_chunk_tokens, reserve_whole_prompt })
    }

    /// Prompts are admitted whole (all but `chunked`).
    #[getter]
    pub fn whole_prompts(&self) -> bool {
        self.kind != Kind::Chunked
    }

    /// Whether a step with no admissions runs every one of `num_running` decoding sequences:
    /// where it is True the timing layer may apply such steps in bulk (a decode run); a policy
    /// that caps decodes must say False, or results change when decode runs are on.
    pub fn decodes_all(&self, num_running: i64) -> bool {
        match self.kind {
            // a step without admissions decodes every running sequence, unbudgeted
            Kind::Static | Kind::Continuous | Kind::Mixed => true,
            Kind::Chunked => num_running <= self.token_budget,
        }
    }
}

impl Policy {
    /// The next step of `s` (possibly empty: nothing can run).
    pub fn form(&self, py: Python<'_>, s: &mut Scheduler) -> PyResult<ScheduledBatch> {
        let whole = self.whole_prompts();
        match self.kind {
            Kind::Static => {
                if !s.running.is_empty() {
                    let blocked = !s.waiting.is_empty();
                    s.schedule_running(py, ScheduledBatch::blocked(blocked), None, 0)
                } else {
                    s.admit(py, ScheduledBatch::default(), self.token_budget, whole, 0, false)
                }
            }
            Kind::Continuous => {
                let batch = s.admit(py, ScheduledBatch::default(), self.token_budget, whole, 0, false)?;
                if !batch.seqs.is_empty() {
                    return Ok(batch);
                }
                s.schedule_running(py, batch, None, 0)
            }
            Kind::Mixed => {
                let batch = s.schedule_running(py, ScheduledBatch::default(), None, 0)?;
                let budget = self.token_budget - batch.num_tokens;
                s.admit(py, batch, budget, whole, 0, false)
            }
            Kind::Chunked => {
                let cap = self.max_chunk_tokens;
                let batch = s.schedule_running(py, ScheduledBatch::default(), Some(self.token_budget), cap)?;
                if !batch.preempted.is_empty() {
                    return Ok(batch); // vLLM V1 admits no waiting request in a step that preempted
                }
                let budget = self.token_budget - batch.num_tokens;
                s.admit(py, batch, budget, whole, cap, self.reserve_whole_prompt)
            }
        }
    }
}
