//! Decode runs: steps certain to be the same sequences decoding, taken without forming or updating each.
//!
//! After a step, the scheduler says which steps follow for certain while no work arrives
//! (`Scheduler.steady_decodes`: the same sequences decoding, and the KV blocks each step takes).
//! A [`DecodeRun`] takes those steps one by one, as the client times and records them, without
//! forming a batch or updating the sequences: each step only takes its blocks
//! (`Scheduler.begin_decode_step`), and its effect waits until `settle` has the scheduler apply
//! the finished ones in bulk (`Scheduler.apply_decodes`). The run's last step is formed and handed
//! back like any other (sequences may finish in it). Work arriving cuts the run short after the
//! steps begun (`cut`). None of it changes a result.

use pyo3::exceptions::PyIndexError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::batch::{ScheduledBatch, StepOutcome};
use crate::scheduler::{Scheduler, Steady};
use crate::sequence::{same, Sequence};
use crate::timing::StepKey;

/// Steps of one unchanged decode batch whose effects on the sequences are pending.
///
/// Attributes:
///     seqs: the batch (the scheduler's running list at the start; every step's `seqs`).
///     ones: one new token per sequence (every step's `num_new`).
///     taken: steps begun so far (their blocks taken).
///     done: steps finished and not yet applied to the sequences.
///     max_gap_ns: longest of those steps (each sequence's gap between tokens).
///     last_ns: when the last of them ended.
///     lora: its sequences' LoRA adapters, the same every step (None: the base model only).
#[pyclass(module = "cosim_core")]
pub struct DecodeRun {
    scheduler: Py<Scheduler>,
    seq_handles: Vec<Py<Sequence>>,
    /// The lists Python sees as `seqs` and `ones`, shared by the steps `step` gives (which tells
    /// them as the run's); made when first asked: a forecast's runs are never shown.
    lists: Option<(Py<PyList>, Py<PyList>)>,
    /// Each sequence's computed tokens when the pending steps began.
    contexts: Vec<i64>,
    /// KV blocks the batch grows into at each step of the run, in order.
    new_blocks: Vec<i64>,
    queue_stamp: i64,
    #[pyo3(get)]
    pub taken: i64,
    #[pyo3(get)]
    done: i64,
    #[pyo3(get)]
    pub max_gap_ns: i64,
    #[pyo3(get)]
    pub last_ns: i64,
    #[pyo3(get)]
    lora: Option<Py<PyAny>>,
    /// Counted when first asked: most runs are cut before a step is recorded.
    num_requests: Option<usize>,
}

#[pymethods]
impl DecodeRun {
    /// The run of the steps after `batch` (just updated into `outcome`), if they are steady
    /// decodes (`Scheduler.steady_decodes`).
    #[staticmethod]
    fn start(
        scheduler: &Bound<'_, Scheduler>,
        batch: PyRef<'_, ScheduledBatch>,
        outcome: PyRef<'_, StepOutcome>,
    ) -> PyResult<Option<DecodeRun>> {
        DecodeRun::after(scheduler, &batch, &outcome, usize::MAX)
    }

    /// The batch (every step's `seqs`, the same list).
    #[getter]
    pub fn seqs<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        Ok(self.lists(py)?.0.bind(py).clone())
    }

    /// One new token per sequence (every step's `num_new`, the same list).
    #[getter]
    pub fn ones<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        Ok(self.lists(py)?.1.bind(py).clone())
    }

    /// Requests among its sequences (parallel paths of one count once).
    #[getter]
    pub fn num_requests(&mut self, py: Python<'_>) -> usize {
        let handles = &self.seq_handles;
        *self.num_requests.get_or_insert_with(|| {
            let mut requests: Vec<usize> = handles.iter().map(|seq| seq.borrow(py).request.as_ptr() as usize).collect();
            requests.sort_unstable();
            requests.dedup();
            requests.len()
        })
    }

    /// Steps left to begin.
    #[getter]
    pub fn steps_left(&self) -> i64 {
        self.new_blocks.len() as i64 - self.taken
    }

    /// The context of the run's next step: each sequence's tokens in KV.
    pub fn next_context(&self) -> Vec<i64> {
        self.contexts_at(self.done)
    }

    /// The batch of the run's next step (`begin` takes its blocks).
    pub fn step(&mut self, py: Python<'_>) -> PyResult<ScheduledBatch> {
        let (seqs, ones) = self.lists(py)?;
        let (seqs, ones) = (seqs.clone_ref(py), ones.clone_ref(py));
        Ok(ScheduledBatch::of_run(
            seqs,
            ones,
            self.contexts_at(self.done),
            self.queue_stamp,
            self.lora.as_ref().map(|lora| lora.clone_ref(py)),
        ))
    }

    /// Begins the run's next step: it takes its KV blocks, as `Scheduler.schedule` would.
    pub fn begin(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(&blocks) = self.new_blocks.get(self.taken as usize) else {
            return Err(PyIndexError::new_err("no step of the decode run is left to begin"));
        };
        self.scheduler.borrow_mut(py).begin_decode_step(py, blocks)?;
        self.taken += 1;
        Ok(())
    }

    /// A begun step ended (its effect pending until `settle`).
    pub fn end_step(&mut self, start_ns: i64, end_ns: i64) {
        self.done += 1;
        self.max_gap_ns = self.max_gap_ns.max(end_ns - start_ns);
        self.last_ns = end_ns;
    }

    /// Work arrived: the run ends after the steps begun.
    pub fn cut(&mut self) {
        self.new_blocks.truncate(self.taken as usize);
    }

    /// Has the scheduler apply the run's finished steps to its sequences, and credit them the
    /// blocks of the steps begun; returns how many steps it applied. Idempotent.
    pub fn settle(&mut self, py: Python<'_>) -> PyResult<i64> {
        if self.taken == 0 {
            return Ok(0);
        }
        let k = self.done;
        self.scheduler.borrow_mut(py).apply_decodes_to(py, &self.seq_handles, k, self.taken - k)?;
        if k != 0 {
            self.contexts.iter_mut().for_each(|c| *c += k);
            self.taken -= k;
            self.new_blocks.drain(..k as usize);
            self.done = 0;
            self.max_gap_ns = 0;
        }
        Ok(k)
    }

    /// The signatures of the run's next `steps` steps, as `ScheduledBatch.signature` gives them.
    fn signatures<'py>(&self, py: Python<'py>, steps: i64) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.keys(py, steps)?.iter().map(|key| key.to_signature(py)).collect()
    }

    /// Lookahead on a scheduler's copy: begins the run's next `steps` steps at once and applies
    /// all but the last, whose batch it returns (in flight, to be handed back like any other). As
    /// `begin` does, the first step frees what the step before it finished (async scheduling).
    pub fn take_in_bulk(&mut self, py: Python<'_>, steps: i64) -> PyResult<ScheduledBatch> {
        let blocks = self.new_blocks.iter().skip(self.taken as usize).take(steps as usize).sum();
        self.scheduler.borrow_mut(py).begin_decode_step(py, blocks)?;
        self.taken += steps;
        self.done += steps - 1;
        self.settle(py)?;
        let seqs = self.seq_handles.iter().map(|seq| same(py, seq)).collect();
        Ok(ScheduledBatch::of_decodes(
            seqs,
            self.contexts_at(self.done),
            self.queue_stamp,
            self.lora.as_ref().map(|lora| lora.clone_ref(py)),
        ))
    }

    fn __repr__(&self) -> String {
        format!("DecodeRun({} sequences, {} steps left, {} done)", self.seq_handles.len(), self.steps_left(), self.done)
    }
}

impl DecodeRun {
    /// See `start`; a run of `most` steps at most (a lookahead takes no more).
    pub fn after(
        scheduler: &Bound<'_, Scheduler>,
        batch: &ScheduledBatch,
        outcome: &StepOutcome,
        most: usize,
    ) -> PyResult<Option<DecodeRun>> {
        let py = scheduler.py();
        let sched = scheduler.borrow();
        let Some(Steady { new_blocks, contexts, lora }) = sched.steady(py, batch, outcome, most)? else {
            return Ok(None);
        };
        let seq_handles: Vec<Py<Sequence>> = sched.running.iter().map(|seq| same(py, seq)).collect();
        Ok(Some(DecodeRun {
            scheduler: scheduler.clone().unbind(),
            lists: None,
            seq_handles,
            contexts,
            new_blocks,
            queue_stamp: batch.queue_stamp,
            taken: 0,
            done: 0,
            max_gap_ns: 0,
            last_ns: 0,
            lora,
            num_requests: None,
        }))
    }

    /// The timing keys of the run's next `steps` steps (as their batches' `signature`).
    pub fn keys(&self, py: Python<'_>, steps: i64) -> PyResult<Vec<StepKey>> {
        let fields = self.fields(py)?;
        Ok((self.done..self.done + steps)
            .map(|k| StepKey {
                new: vec![1; self.seq_handles.len()],
                context: self.contexts_at(k),
                fields: fields.clone(),
            })
            .collect())
    }

    /// The timing key of the run's next step (as its batch's `signature`).
    pub fn next_key(&self, py: Python<'_>) -> PyResult<StepKey> {
        Ok(StepKey {
            new: vec![1; self.seq_handles.len()],
            context: self.contexts_at(self.done),
            fields: self.fields(py)?,
        })
    }

    /// The StepBatch fields of its steps' keys: their LoRA adapters' (none for the base model).
    fn fields(&self, py: Python<'_>) -> PyResult<Vec<(String, Vec<i64>)>> {
        match &self.lora {
            Some(lora) => lora.bind(py).getattr(intern!(py, "key"))?.extract(),
            None => Ok(Vec::new()),
        }
    }

    /// Each sequence's tokens in KV at the run's pending step `k` (0: the first not applied).
    fn contexts_at(&self, k: i64) -> Vec<i64> {
        self.contexts.iter().map(|c| c + k).collect()
    }

    /// Whether `batch` is one of the run's steps (`step` gave it).
    pub fn owns(&self, batch: &ScheduledBatch) -> bool {
        self.lists.as_ref().is_some_and(|(seqs, _)| batch.is_step_of(seqs))
    }

    /// Sequences in the batch.
    pub fn num_seqs(&self) -> usize {
        self.seq_handles.len()
    }

    /// `seqs` and `ones`, made at the first call.
    fn lists(&mut self, py: Python<'_>) -> PyResult<&(Py<PyList>, Py<PyList>)> {
        if self.lists.is_none() {
            let seqs = PyList::new(py, self.seq_handles.iter().map(|seq| seq.bind(py)))?.unbind();
            let ones = PyList::new(py, std::iter::repeat_n(1i64, self.seq_handles.len()))?.unbind();
            self.lists = Some((seqs, ones));
        }
        Ok(self.lists.as_ref().expect("made just now"))
    }
}
