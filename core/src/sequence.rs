//! A request's state on one LLM client, in vLLM's unified token view: [`Sequence`].
//!
//! A sequence knows `num_tokens` tokens (prompt plus tokens generated so far) and holds
//! `num_computed` of them in its KV cache. Every step schedules some of the missing
//! `num_tokens - num_computed` tokens: a whole prompt, a chunk of it, or the one token a decode
//! adds. When a step brings `num_computed` up to `num_tokens` the model samples a new token.
//! After a preemption by recompute `num_computed` drops to 0 and the prompt plus the generated
//! tokens are prefilled again.
//!
//! The scheduler ([`crate::scheduler::Scheduler`]) and the block manager
//! ([`crate::manager::BlockManager`]) work on its fields directly; Python reads the records it
//! carries (`request`, `stage`) and, where it must, its counts.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::hasher::Chain;
use crate::key::Key;

/// Where a sequence is in its client's scheduler.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum State {
    Waiting,
    Running,
    Swapped,
    Finished,
    /// Waiting while its KV blocks are copied back from an offload tier (Python's `offload`).
    Loading,
}

impl State {
    /// The name Python sees (`seq.state`).
    pub fn name(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Running => "running",
            State::Swapped => "swapped",
            State::Finished => "finished",
            State::Loading => "loading",
        }
    }

    fn from_name(name: &str) -> PyResult<State> {
        Ok(match name {
            "waiting" => State::Waiting,
            "running" => State::Running,
            "swapped" => State::Swapped,
            "finished" => State::Finished,
            "loading" => State::Loading,
            _ => return Err(PyValueError::new_err(format!("no sequence state {name:?}"))),
        })
    }
}

/// One request's stage on one client.
///
/// Args:
///     request: the request's record (updated as tokens are produced).
///     stage: the stage record of this client's part of the request.
///     num_tokens: tokens known when the stage starts.
///     num_computed: tokens already in KV (transferred or cached).
///     target_generated: the stage ends when `generated` (this sequence's tokens) reaches it.
///     generated: tokens this sequence (one branch of the request) has produced so far.
///     forks: sibling branches to spawn once it has sampled on its client (multi-path reasoning).
#[pyclass(module = "cosim_core")]
pub struct Sequence {
    #[pyo3(get, set)]
    pub request: Py<PyAny>,
    #[pyo3(get, set)]
    pub stage: Py<PyAny>,
    #[pyo3(get, set)]
    pub num_tokens: i64,
    #[pyo3(get, set)]
    pub num_computed: i64,
    #[pyo3(get, set)]
    pub target_generated: i64,
    /// Blocks of its own, after the cached ones.
    #[pyo3(get, set)]
    pub num_blocks: i64,
    /// `len(cached)`.
    #[pyo3(get, set)]
    pub prefix_blocks: i64,
    /// The declared shared prefix its first prompt tokens are (no token ids), if any.
    #[pyo3(get, set)]
    pub prefix_id: Option<Py<PyAny>>,
    /// Admission order on this client (FCFS and preemption victim choice).
    #[pyo3(get, set)]
    pub order: i64,
    #[pyo3(get, set)]
    pub generated: i64,
    #[pyo3(get, set)]
    pub forks: i64,
    /// Blocks held in host memory while swapped.
    #[pyo3(get, set)]
    pub swapped_blocks: i64,
    #[pyo3(get, set)]
    pub swapped_bytes: i64,
    /// Tokens it did not generate itself.
    #[pyo3(get, set)]
    pub prompt_tokens: i64,
    /// Its full blocks' content hashes, as far as asked ([`crate::hasher`]; a copy shares them:
    /// the chain is a pure function of the sequence).
    pub chain: Chain,
    /// Speculative draft tokens to verify at its next step.
    #[pyo3(get, set)]
    pub drafts: i64,
    /// Speculative: one uniform draw per verification (a numpy array).
    #[pyo3(get, set)]
    pub spec_draws: Option<Py<PyAny>>,
    /// Speculative: verifications so far (the next draw's index).
    #[pyo3(get, set)]
    pub spec_step: i64,
    /// Its leading blocks, shared through the cache (see the block manager).
    pub cached: Vec<Key>,
    pub state: State,
}

#[pymethods]
impl Sequence {
    #[new]
    #[pyo3(signature = (request, stage, *, num_tokens, num_computed, target_generated, order = 0, prefix_id = None,
                        generated = 0, forks = 0))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        request: Py<PyAny>,
        stage: Py<PyAny>,
        num_tokens: i64,
        num_computed: i64,
        target_generated: i64,
        order: i64,
        prefix_id: Option<Py<PyAny>>,
        generated: i64,
        forks: i64,
    ) -> Self {
        Sequence::new(request, stage, num_tokens, num_computed, target_generated, order, prefix_id, generated, forks)
    }

    /// `waiting`, `running`, `swapped`, `finished` or `loading`.
    #[getter]
    fn state(&self) -> &'static str {
        self.state.name()
    }

    #[setter]
    fn set_state(&mut self, name: &str) -> PyResult<()> {
        self.state = State::from_name(name)?;
        Ok(())
    }

    /// Its leading blocks shared through the cache (content hashes, or ids of fork-shared blocks).
    #[getter]
    fn cached<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.cached.iter().map(|key| key.to_py(py)).collect::<PyResult<Vec<_>>>()?)
    }

    /// Its full blocks' content hashes, as far as hashed so far (a new list).
    #[getter]
    fn block_hashes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.chain.lock().iter().map(|hash| PyBytes::new(py, hash)))
    }

    /// Tokens still to schedule before the next sample (speculative drafts included).
    #[getter]
    pub fn remaining_tokens(&self) -> i64 {
        self.num_tokens + self.drafts - self.num_computed
    }

    /// Tokens left to process before the stage ends (prefill plus decodes), for packing and routing.
    #[getter]
    pub fn remaining_work(&self) -> i64 {
        self.remaining_tokens() + self.target_generated - self.generated
    }

    /// A copy to schedule hypothetically (lookahead); it shares the request and stage records,
    /// which only the client writes.
    #[pyo3(name = "clone")]
    fn py_clone(&self, py: Python<'_>) -> Self {
        self.copy(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let id = self.request.bind(py).getattr(intern!(py, "id"))?;
        Ok(format!(
            "Sequence(r{id}, {}, computed={}/{}, generated={}/{})",
            self.state.name(),
            self.num_computed,
            self.num_tokens,
            self.generated,
            self.target_generated
        ))
    }
}

impl Sequence {
    /// A sequence waiting, holding no blocks (see the class).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        request: Py<PyAny>,
        stage: Py<PyAny>,
        num_tokens: i64,
        num_computed: i64,
        target_generated: i64,
        order: i64,
        prefix_id: Option<Py<PyAny>>,
        generated: i64,
        forks: i64,
    ) -> Self {
        Sequence {
            request,
            stage,
            num_tokens,
            num_computed,
            target_generated,
            num_blocks: 0,
            prefix_blocks: 0,
            prefix_id,
            order,
            generated,
            forks,
            swapped_blocks: 0,
            swapped_bytes: 0,
            prompt_tokens: num_tokens - generated,
            chain: Chain::default(),
            drafts: 0,
            spec_draws: None,
            spec_step: 0,
            cached: Vec::new(),
            state: State::Waiting,
        }
    }

    /// See `clone`.
    pub fn copy(&self, py: Python<'_>) -> Self {
        Sequence {
            request: self.request.clone_ref(py),
            stage: self.stage.clone_ref(py),
            num_tokens: self.num_tokens,
            num_computed: self.num_computed,
            target_generated: self.target_generated,
            num_blocks: self.num_blocks,
            prefix_blocks: self.prefix_blocks,
            prefix_id: self.prefix_id.as_ref().map(|p| p.clone_ref(py)),
            order: self.order,
            generated: self.generated,
            forks: self.forks,
            swapped_blocks: self.swapped_blocks,
            swapped_bytes: self.swapped_bytes,
            prompt_tokens: self.prompt_tokens,
            chain: self.chain.clone(),
            drafts: self.drafts,
            spec_draws: self.spec_draws.as_ref().map(|d| d.clone_ref(py)),
            spec_step: self.spec_step,
            cached: with_room(&self.cached),
            state: self.state,
        }
    }

    /// Whether a step giving it `num` tokens with `computed` in KV is a prefill (or a recompute),
    /// not a decode nor a verification.
    #[inline]
    pub fn is_prefill(&self, computed: i64) -> bool {
        self.generated == 0 || self.num_tokens - computed > 1
    }
}

/// A new handle on the sequence behind `seq` (Python objects are shared, not copied).
#[inline]
pub fn same(py: Python<'_>, seq: &Py<Sequence>) -> Py<Sequence> {
    seq.clone_ref(py)
}

/// A sequence's identity (Python's `id(seq)`), for sets of sequences.
#[inline]
pub fn ident(seq: &Py<Sequence>) -> usize {
    seq.as_ptr() as usize
}

/// A copy of a sequence's cached keys with room to grow as the original's next growth would give
/// it: a copy (a lookahead's) goes on caching blocks, and one of exact capacity would reallocate,
/// copying every key, at its first.
fn with_room(keys: &[Key]) -> Vec<Key> {
    let mut copy = Vec::with_capacity(2 * keys.len());
    copy.extend_from_slice(keys);
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_of_cached_keys_is_equal_with_room_for_as_many_again() {
        let keys: Vec<Key> = (0..5).map(Key::Id).collect();
        let copy = with_room(&keys);
        assert_eq!(copy, keys);
        assert!(copy.capacity() >= 10);
        assert!(with_room(&[]).is_empty());
    }
}
