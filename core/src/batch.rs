//! What the scheduler hands out and takes back: a step's batch, its outcome, and steady decodes.
//!
//! A [`ScheduledBatch`] is one step: the sequences it runs, the tokens each computes and the
//! context each already holds. Its `signature` (new tokens and context per sequence) is all a
//! runtime backend sees of it. After the step, `Scheduler.update` turns it into a
//! [`StepOutcome`].
//!
//! [`SteadyDecodes`] are the steps that `Scheduler.steady_decodes` guarantees to be the same
//! sequences decoding, one token longer each step: a decode run (`crate::runs::DecodeRun`) times
//! and records every one but skips forming and updating them one by one, and has the scheduler
//! apply them in bulk later (a speed device with no effect on results).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::sequence::{same, Sequence};
use crate::timing::StepKey;

fn list<'py>(py: Python<'py>, seqs: &[Py<Sequence>]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, seqs.iter().map(|seq| seq.bind(py)))
}

fn seqs_of(list: &Bound<'_, PyAny>) -> PyResult<Vec<Py<Sequence>>> {
    list.try_iter()?.map(|item| Ok(item?.downcast_into::<Sequence>()?.unbind())).collect()
}

/// Counts given by Python, as a list (the one they came in, if they came in one: kept, handed back).
fn counts_list(counts: Option<Bound<'_, PyAny>>) -> PyResult<Option<Py<PyList>>> {
    let Some(counts) = counts else {
        return Ok(None);
    };
    if let Ok(list) = counts.downcast::<PyList>() {
        return Ok(Some(list.clone().unbind()));
    }
    Ok(Some(PyList::new(counts.py(), counts.extract::<Vec<i64>>()?)?.unbind()))
}

/// The list Python sees of `values`, made once and kept in `made` (until the batch changes).
fn shown<'py>(py: Python<'py>, made: &mut Option<Py<PyList>>, values: &[i64]) -> PyResult<Bound<'py, PyList>> {
    if let Some(list) = made {
        return Ok(list.bind(py).clone());
    }
    let list = PyList::new(py, values)?;
    *made = Some(list.clone().unbind());
    Ok(list)
}

/// One scheduled step: sequences with the tokens each computes.
///
/// Attributes:
///     seqs: the sequences, in scheduling order.
///     num_new: tokens each computes in this step.
///     context: tokens each already holds in KV (its context).
///     swap_bytes: KV bytes copied between host and device for this step.
///     num_tokens: tokens computed in all.
///     prefill_tokens: of those, tokens of prompts (or recomputed context), not decodes.
///     admitted: sequences taken from the waiting queue for this step.
///     queue_blocked: the waiting queue, if not empty, could give this step no one (more).
///     queue_stamp: sequences the scheduler had ever queued when it formed the batch (one
///         queued since may change what the queue can give).
///     preempted: sequences preempted to make room for it.
///     cache_hits: (sequence, prompt tokens served from the prefix cache) of the admitted.
///     lora: the LoRA adapters of its sequences and the loads it waits for (None: the base
///         model only).
///     draft_tokens: speculative decoding: of each sequence's new tokens, the drafts it verifies
///         (empty without speculation).
#[pyclass(module = "cosim_core")]
#[derive(Default)]
pub struct ScheduledBatch {
    pub seqs: Vec<Py<Sequence>>,
    /// The lists Python sees as `seqs`, `num_new` and `context`, each made once (a step's timing
    /// reads them several times): a decode run's batches share their run's lists.
    seqs_list: Option<Py<PyList>>,
    num_new_list: Option<Py<PyList>>,
    context_list: Option<Py<PyList>>,
    /// Made in Python, or a decode run's step: `seqs` is the list given until [`Self::ensure`]
    /// reads it (a decode run's steps are timed, never handed back, so most are never read).
    seqs_pending: bool,
    /// Made in Python: `num_new` and `context` are the lists given until read (a step's timing
    /// key reads them, not its sequences).
    counts_pending: bool,
    pub num_new: Vec<i64>,
    pub context: Vec<i64>,
    #[pyo3(get, set)]
    pub swap_bytes: i64,
    #[pyo3(get, set)]
    pub num_tokens: i64,
    #[pyo3(get, set)]
    pub prefill_tokens: i64,
    #[pyo3(get, set)]
    pub admitted: i64,
    #[pyo3(get, set)]
    pub queue_blocked: bool,
    #[pyo3(get, set)]
    pub queue_stamp: i64,
    pub preempted: Vec<Py<Sequence>>,
    pub cache_hits: Vec<(Py<Sequence>, i64)>,
    #[pyo3(get, set)]
    pub lora: Option<Py<PyAny>>,
    pub draft_tokens: Vec<i64>,
}

#[pymethods]
impl ScheduledBatch {
    #[new]
    #[pyo3(signature = (*, seqs = None, num_new = None, context = None, swap_bytes = 0, num_tokens = 0,
                        prefill_tokens = 0, admitted = 0, queue_blocked = false, queue_stamp = 0, preempted = None,
                        cache_hits = None, lora = None, draft_tokens = None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        seqs: Option<Bound<'_, PyList>>,
        num_new: Option<Bound<'_, PyAny>>,
        context: Option<Bound<'_, PyAny>>,
        swap_bytes: i64,
        num_tokens: i64,
        prefill_tokens: i64,
        admitted: i64,
        queue_blocked: bool,
        queue_stamp: i64,
        preempted: Option<Bound<'_, PyAny>>,
        cache_hits: Option<Vec<(Bound<'_, Sequence>, i64)>>,
        lora: Option<Py<PyAny>>,
        draft_tokens: Option<Vec<i64>>,
    ) -> PyResult<Self> {
        let seqs_list = seqs.map(Bound::unbind);
        let num_new_list = counts_list(num_new)?;
        let context_list = counts_list(context)?;
        let (seqs_pending, counts_pending) = (seqs_list.is_some(), num_new_list.is_some() || context_list.is_some());
        Ok(ScheduledBatch {
            seqs: Vec::new(),
            seqs_list,
            num_new_list,
            context_list,
            seqs_pending,
            counts_pending,
            num_new: Vec::new(),
            context: Vec::new(),
            swap_bytes,
            num_tokens,
            prefill_tokens,
            admitted,
            queue_blocked,
            queue_stamp,
            preempted: preempted.map(|p| seqs_of(&p)).transpose()?.unwrap_or_default(),
            cache_hits: cache_hits.unwrap_or_default().into_iter().map(|(seq, n)| (seq.unbind(), n)).collect(),
            lora,
            draft_tokens: draft_tokens.unwrap_or_default(),
        })
    }

    /// The sequences, in scheduling order (the same list at every call).
    #[getter]
    fn seqs<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        if let Some(list) = &self.seqs_list {
            return Ok(list.bind(py).clone());
        }
        let made = list(py, &self.seqs)?;
        self.seqs_list = Some(made.clone().unbind());
        Ok(made)
    }

    /// Tokens each computes in this step (the same list at every call).
    #[getter]
    fn num_new<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        shown(py, &mut self.num_new_list, &self.num_new)
    }

    /// Tokens each already holds in KV (the same list at every call).
    #[getter]
    fn context<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        shown(py, &mut self.context_list, &self.context)
    }

    #[getter]
    fn draft_tokens(&self) -> Vec<i64> {
        self.draft_tokens.clone()
    }

    #[getter]
    fn preempted<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        list(py, &self.preempted)
    }

    #[setter]
    fn set_preempted(&mut self, preempted: &Bound<'_, PyAny>) -> PyResult<()> {
        self.preempted = seqs_of(preempted)?;
        Ok(())
    }

    #[getter]
    fn cache_hits(&self, py: Python<'_>) -> Vec<(Py<Sequence>, i64)> {
        self.cache_hits.iter().map(|(seq, n)| (same(py, seq), *n)).collect()
    }

    /// Adds `seq` to compute `num_tokens` tokens.
    #[pyo3(name = "add")]
    fn py_add(&mut self, seq: &Bound<'_, Sequence>, num_tokens: i64) -> PyResult<()> {
        self.ensure(seq.py())?;
        let (computed, prefill) = {
            let s = seq.borrow();
            (s.num_computed, s.is_prefill(s.num_computed))
        };
        self.push(same(seq.py(), seq.as_unbound()), num_tokens, computed, prefill);
        Ok(())
    }

    /// Takes `seq` out of the step if it is in it (preempted after it was scheduled, which a
    /// least-important victim may be: vLLM gives its tokens back to the step's budget); whether it was.
    #[pyo3(name = "drop")]
    fn py_drop(&mut self, seq: &Bound<'_, Sequence>) -> PyResult<bool> {
        self.ensure(seq.py())?;
        Ok(self.drop_seq(seq.py(), seq.as_unbound()))
    }

    /// Its StepBatch fields beyond the new and context tokens, as (name, values) pairs:
    /// speculative drafts, LoRA adapters (none for a plain batch).
    #[getter]
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let mut extra: Vec<Bound<'py, PyAny>> = Vec::new();
        if self.draft_tokens.iter().any(|&d| d != 0) {
            let drafts = PyTuple::new(py, &self.draft_tokens)?;
            extra.push(
                PyTuple::new(py, [intern!(py, "draft_tokens").clone().into_any(), drafts.into_any()])?.into_any(),
            );
        }
        if let Some(lora) = &self.lora {
            for field in lora.bind(py).getattr(intern!(py, "key"))?.try_iter()? {
                extra.push(field?);
            }
        }
        PyTuple::new(py, extra)
    }

    /// `(new tokens, context)` per sequence, then :attr:`fields`: what times the step.
    #[getter]
    pub fn signature<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let mut parts = vec![self.num_new(py)?.to_tuple().into_any(), self.context(py)?.to_tuple().into_any()];
        parts.extend(self.fields(py)?.iter());
        PyTuple::new(py, parts)
    }

    fn __repr__(&mut self, py: Python<'_>) -> PyResult<String> {
        self.ensure(py)?;
        Ok(format!(
            "ScheduledBatch({} sequences, {} tokens, num_new={:?}, context={:?})",
            self.seqs.len(),
            self.num_tokens,
            self.num_new,
            self.context
        ))
    }
}

impl ScheduledBatch {
    /// An empty batch whose queue is blocked or not.
    pub fn blocked(queue_blocked: bool) -> Self {
        ScheduledBatch { queue_blocked, ..Default::default() }
    }

    /// A decode run's step: `seqs` and `ones` are the run's lists, shared by its steps (`seqs` read
    /// in Rust only if the step is handed back), `context` each sequence's tokens in KV.
    pub fn of_run(
        seqs: Py<PyList>,
        ones: Py<PyList>,
        context: Vec<i64>,
        queue_stamp: i64,
        lora: Option<Py<PyAny>>,
    ) -> Self {
        let num_tokens = context.len() as i64;
        ScheduledBatch {
            seqs_list: Some(seqs),
            num_new_list: Some(ones),
            seqs_pending: true,
            num_new: vec![1; context.len()],
            context,
            num_tokens,
            queue_blocked: true,
            queue_stamp,
            lora,
            ..Default::default()
        }
    }

    /// `batch` (in flight) on other sequences, `seqs` (a scheduler copy's): what a forecast applies
    /// on its copy (its tokens and queue state; preemptions, swaps and adapters are done already).
    pub fn on_copy(seqs: Vec<Py<Sequence>>, batch: &ScheduledBatch) -> Self {
        ScheduledBatch {
            seqs,
            num_new: batch.num_new.clone(),
            context: batch.context.clone(),
            draft_tokens: batch.draft_tokens.clone(),
            num_tokens: batch.num_tokens,
            admitted: batch.admitted,
            queue_blocked: batch.queue_blocked,
            queue_stamp: batch.queue_stamp,
            ..Default::default()
        }
    }

    /// A decode run's step on Rust data alone, no list made (what a forecast's copy applies):
    /// `seqs` decoding a token each, `context` each one's tokens in KV.
    pub fn of_decodes(seqs: Vec<Py<Sequence>>, context: Vec<i64>, queue_stamp: i64, lora: Option<Py<PyAny>>) -> Self {
        let num_tokens = seqs.len() as i64;
        ScheduledBatch {
            seqs,
            num_new: vec![1; context.len()],
            context,
            num_tokens,
            queue_blocked: true,
            queue_stamp,
            lora,
            ..Default::default()
        }
    }

    /// Makes room for `more` sequences at once (a step of the running ones grows no vector).
    pub fn reserve(&mut self, more: usize) {
        self.seqs.reserve(more);
        self.num_new.reserve(more);
        self.context.reserve(more);
    }

    /// Adds `seq`, which holds `computed` tokens, to compute `num` (a prefill's count, `prefill`).
    #[inline]
    pub fn push(&mut self, seq: Py<Sequence>, num: i64, computed: i64, prefill: bool) {
        debug_assert!(
            !self.seqs_pending && !self.counts_pending,
            "a batch made in Python is read (ensure) before it changes"
        );
        self.forget_lists();
        self.seqs.push(seq);
        self.num_new.push(num);
        self.context.push(computed);
        self.num_tokens += num;
        if prefill {
            self.prefill_tokens += num;
        }
    }

    /// Adds `seq` (Rust data at hand) to compute `num` tokens.
    #[inline]
    pub fn add(&mut self, handle: Py<Sequence>, seq: &Sequence, num: i64) {
        self.push(handle, num, seq.num_computed, seq.is_prefill(seq.num_computed));
    }

    /// Reads the lists a batch made in Python was given (see `seqs_pending`), before Rust works on it.
    pub fn ensure(&mut self, py: Python<'_>) -> PyResult<()> {
        self.ensure_counts(py)?;
        if self.seqs_pending {
            if let Some(list) = &self.seqs_list {
                self.seqs = seqs_of(list.bind(py).as_any())?;
            }
            self.seqs_pending = false;
        }
        Ok(())
    }

    /// Reads the counts a batch made in Python was given (see `counts_pending`).
    fn ensure_counts(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.counts_pending {
            if let Some(list) = &self.num_new_list {
                self.num_new = list.bind(py).extract()?;
            }
            if let Some(list) = &self.context_list {
                self.context = list.bind(py).extract()?;
            }
            self.counts_pending = false;
        }
        Ok(())
    }

    /// Its timing key (`signature`'s, read from Rust data; a LoRA step's adapters from Python);
    /// a decode run's step leaves its sequences unread.
    pub fn key(&mut self, py: Python<'_>) -> PyResult<StepKey> {
        self.ensure_counts(py)?;
        let mut key = StepKey { new: self.num_new.clone(), context: self.context.clone(), fields: Vec::new() };
        if self.draft_tokens.iter().any(|&d| d != 0) {
            key.fields.push(("draft_tokens".to_owned(), self.draft_tokens.clone()));
        }
        if let Some(lora) = &self.lora {
            key.extend_fields(&lora.bind(py).getattr(intern!(py, "key"))?)?;
        }
        Ok(key)
    }

    /// Whether this is a step of the decode run whose sequences are `seqs` (its batches share the list).
    pub fn is_step_of(&self, seqs: &Py<PyList>) -> bool {
        self.seqs_list.as_ref().is_some_and(|list| list.is(seqs))
    }

    /// Drops the lists Python saw: the batch changed.
    fn forget_lists(&mut self) {
        self.seqs_list = None;
        self.num_new_list = None;
        self.context_list = None;
    }

    /// See `drop`.
    pub fn drop_seq(&mut self, py: Python<'_>, seq: &Py<Sequence>) -> bool {
        let Some(i) = self.seqs.iter().position(|s| s.is(seq)) else {
            return false;
        };
        self.forget_lists();
        self.seqs.remove(i);
        let num = self.num_new.remove(i);
        let computed = self.context.remove(i);
        self.num_tokens -= num;
        if seq.borrow(py).is_prefill(computed) {
            // as add() counted it
            self.prefill_tokens -= num;
        }
        true
    }
}

/// What a step changed, for the client to record.
///
/// Attributes:
///     sampled: sequences that sampled a token at the end of the step, in batch order.
///     forked: (parent, its new sibling branches) for multi-path reasoning.
///     finished: sequences whose stage ended (their KV blocks are freed).
///     kv_blocks_used: blocks in use after the step, before the finished freed theirs.
///     num_waiting: the waiting queue's length at that moment.
///     extra_tokens: speculative decoding: (sequence, tokens it sampled beyond one).
#[pyclass(module = "cosim_core")]
pub struct StepOutcome {
    pub sampled: Vec<Py<Sequence>>,
    pub forked: Vec<(Py<Sequence>, Vec<Py<Sequence>>)>,
    pub finished: Vec<Py<Sequence>>,
    #[pyo3(get)]
    pub kv_blocks_used: i64,
    #[pyo3(get)]
    pub num_waiting: i64,
    pub extra_tokens: Vec<(Py<Sequence>, i64)>,
}

#[pymethods]
impl StepOutcome {
    #[getter]
    fn sampled<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        list(py, &self.sampled)
    }

    #[getter]
    fn finished<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        list(py, &self.finished)
    }

    #[getter]
    fn forked<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            py,
            self.forked
                .iter()
                .map(|(parent, children)| {
                    PyTuple::new(py, [parent.bind(py).clone().into_any(), list(py, children)?.into_any()])
                })
                .collect::<PyResult<Vec<_>>>()?,
        )
    }

    #[getter]
    fn extra_tokens(&self, py: Python<'_>) -> Vec<(Py<Sequence>, i64)> {
        self.extra_tokens.iter().map(|(seq, n)| (same(py, seq), *n)).collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "StepOutcome({} sampled, {} finished, {} forked)",
            self.sampled.len(),
            self.finished.len(),
            self.forked.len()
        )
    }
}

/// Steps certain to be the same sequences decoding while no work arrives
/// (`Scheduler.steady_decodes`): what a decode run (`crate::runs::DecodeRun`) takes.
///
/// Attributes:
///     seqs: the sequences (the scheduler's running list when the steps begin).
///     contexts: each one's computed tokens when the steps begin.
///     new_blocks: KV blocks they grow into at each step, in order.
///     queue_stamp: the queue stamp of each step's batch (no one queued since).
///     lora: their LoRA adapters, the same every step (None: the base model only).
#[pyclass(module = "cosim_core", get_all)]
pub struct SteadyDecodes {
    pub seqs: Py<PyList>,
    pub contexts: Py<PyList>,
    pub new_blocks: Py<PyList>,
    pub queue_stamp: i64,
    pub lora: Option<Py<PyAny>>,
}
