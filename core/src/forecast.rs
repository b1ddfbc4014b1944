//! Lookahead: the steps that follow a client's step in flight if no work arrives.
//!
//! A [`Forecast`] runs the client's own scheduler policy on a copy of its state
//! (`Scheduler.copy`), with decode runs ([`crate::runs::DecodeRun`]) taken in bulk, so there is
//! one model of admission, preemption and KV growth. It is extended on demand and kept: when the
//! client is asked for predictions again (a top-up while another client misses, or its own miss
//! once they run out) and nothing changed its scheduler but its own steps, the forecast continues
//! where it stopped instead of copying the scheduler and predicting the same steps again. What it
//! returns for a step in flight is what a fresh copy would predict from there ([`predict`]), so
//! keeping it changes no call and no result. For a client with a drafter model it also keeps each
//! predicted step's drafter forwards (`drafts`), which the drafter's own session times ahead; the
//! drafter stays Python, called back per formed step.

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;

use crate::batch::{ScheduledBatch, StepOutcome};
use crate::manager::BlockManager;
use crate::runs::DecodeRun;
use crate::scheduler::Scheduler;
use crate::sequence::{ident, same, Sequence};
use crate::timing::{SharedKey, StepKey};

/// The signatures of up to `depth` batches that follow `in_flight` if no work arrives.
///
/// A backlog is predicted while it lasts, since arrivals join the queue's tail. Once the
/// predicted steps empty the queue, an arrival could join the next admission, so prediction
/// stops at the next departure.
#[pyfunction]
pub fn predict(
    scheduler: &Bound<'_, Scheduler>,
    in_flight: &Bound<'_, ScheduledBatch>,
    depth: i64,
) -> PyResult<Vec<PyObject>> {
    let mut forecast = Forecast::new(scheduler, in_flight, None)?;
    let keys = forecast.keys_after(scheduler.py(), 0, depth, in_flight)?;
    signatures(scheduler.py(), &keys.expect("the origin's own step always matches"))
}

/// The Python signature tuples of `keys`.
fn signatures(py: Python<'_>, keys: &[SharedKey]) -> PyResult<Vec<PyObject>> {
    keys.iter().map(|key| Ok(key.key().to_signature(py)?.into_any().unbind())).collect()
}

/// Predicted steps after an origin (the step in flight when it was made), grown on demand.
///
/// Step `k` is the k-th after the origin (the origin is step 0). Per step it keeps the timing key,
/// and once the step is applied on the copy, whether requests wait after it and whether it is a
/// departure with none waiting (where a backlog's prediction stops), so that `after` can answer
/// for any later step in flight as a fresh copy made then would. Valid only while the scheduler
/// changes by its own steps alone: a caller drops it when work arrives or KV is released.
///
/// Args:
///     scheduler: the client's scheduler (copied).
///     in_flight: its step in flight, the origin.
///     drafts_of: the signatures of the drafter model's forwards after a formed batch
///         (`cosim.hub.sim.clients.drafter.Drafter.forwards`), kept per step; None: none.
#[pyclass(module = "cosim_core")]
pub struct Forecast {
    sim: Py<Scheduler>,
    /// The step formed last on the copy: applied if `applied` reaches it, else pending.
    last: Py<ScheduledBatch>,
    /// What the copy's last applied step changed.
    outcome: StepOutcome,
    /// Of steps 1, 2, ...: their timing keys (signatures), handed out to the timing cache as they are.
    keys: Vec<SharedKey>,
    drafts_of: Option<PyObject>,
    /// Of steps 1, 2, ...: the drafter's forwards after each.
    drafts: Vec<Vec<PyObject>>,
    /// Per applied step from 0: requests wait after it.
    waiting: Vec<bool>,
    /// Per applied step from 0: someone finished and none wait.
    departs: Vec<bool>,
    /// Steps applied on the copy; the one after them, if formed, is pending.
    applied: usize,
    /// The copy can run nothing more (a wait is no step).
    #[pyo3(get)]
    ended: bool,
}

#[pymethods]
impl Forecast {
    #[new]
    #[pyo3(signature = (scheduler, in_flight, drafts_of = None))]
    pub fn new(
        scheduler: &Bound<'_, Scheduler>,
        in_flight: &Bound<'_, ScheduledBatch>,
        drafts_of: Option<PyObject>,
    ) -> PyResult<Self> {
        let sim = scheduler.borrow().copy(scheduler.py())?;
        Self::on(scheduler, sim, in_flight, drafts_of)
    }

    /// Steps predicted so far.
    #[getter]
    pub fn num_steps(&self) -> usize {
        self.keys.len()
    }

    /// The signatures of up to `depth` steps after step `step`, now in flight as `in_flight`, as
    /// `predict` would give them from a fresh copy; None when the forecast does not hold that step
    /// (it ended before it, or predicted another batch).
    fn after(
        &mut self,
        py: Python<'_>,
        step: i64,
        depth: i64,
        in_flight: &Bound<'_, ScheduledBatch>,
    ) -> PyResult<Option<Vec<PyObject>>> {
        self.keys_after(py, step, depth, in_flight)?.map(|keys| signatures(py, &keys)).transpose()
    }

    /// The drafter's forwards after each of the `count` predicted steps after step `step` (those
    /// `after` gave), in order; none without `drafts_of`.
    pub fn drafts(&self, py: Python<'_>, step: usize, count: usize) -> Vec<PyObject> {
        let end = (step + count).min(self.drafts.len());
        let start = step.min(end);
        self.drafts[start..end].iter().flatten().map(|forward| forward.clone_ref(py)).collect()
    }
}

impl Forecast {
    /// `after`'s keys, as the timing cache takes them.
    pub fn keys_after(
        &mut self,
        py: Python<'_>,
        step: i64,
        depth: i64,
        in_flight: &Bound<'_, ScheduledBatch>,
    ) -> PyResult<Option<Vec<SharedKey>>> {
        let step = step.max(0) as usize;
        let limit = step + depth.max(0) as usize;
        while self.applied < step && !self.ended {
            // the step in flight, and what it changes
            self.advance(py, limit.saturating_sub(self.keys.len()))?;
        }
        if self.applied < step {
            return Ok(None);
        }
        if step > 0 && *self.keys[step - 1].key() != in_flight.borrow_mut().key(py)? {
            return Ok(None);
        }
        let backlog = self.waiting[step];
        let mut checked = step + 1; // the next step whose departure is to be checked
        loop {
            // the step at the depth ends the call unchecked
            let last_checked = self.applied.min(limit.saturating_sub(1));
            while checked <= last_checked && limit > 0 {
                if backlog && self.departs[checked] {
                    return Ok(Some(self.slice(step, checked))); // the backlog is gone: an arrival joins next
                }
                checked += 1;
            }
            if self.keys.len() >= limit || self.ended {
                return Ok(Some(self.slice(step, limit)));
            }
            self.advance(py, limit - self.keys.len())?;
        }
    }

    /// `Forecast(scheduler, in_flight, drafts_of)` on `sim`, a copy of `scheduler` made just
    /// now (`Scheduler.copy`, or `Scheduler::copy_reusing` with an earlier forecast's KV blocks,
    /// from [`Forecast::into_spare`]).
    pub fn on(
        scheduler: &Bound<'_, Scheduler>,
        sim: Scheduler,
        in_flight: &Bound<'_, ScheduledBatch>,
        drafts_of: Option<PyObject>,
    ) -> PyResult<Self> {
        let py = scheduler.py();
        let original = scheduler.borrow();
        let mut origin = in_flight.borrow_mut();
        origin.ensure(py)?;
        let running = &original.running;
        let seqs: Vec<Py<Sequence>> = if origin.seqs.len() == running.len()
            && origin.seqs.iter().zip(running).all(|(a, b)| a.is(b))
        {
            sim.running.iter().map(|seq| same(py, seq)).collect() // the common case: every running sequence, in order
        } else {
            origin
                .seqs
                .iter()
                .map(|seq| {
                    let i = running.iter().position(|r| r.is(seq)).ok_or_else(|| PyKeyError::new_err(ident(seq)))?;
                    Ok(same(py, &sim.running[i]))
                })
                .collect::<PyResult<_>>()?
        };
        let last = Py::new(py, ScheduledBatch::on_copy(seqs, &origin))?;
        drop(origin);
        let sim = Py::new(py, sim)?;
        let outcome = sim.borrow_mut(py).update(py, last.bind(py).borrow_mut())?;
        let waiting = !sim.borrow(py).waiting.is_empty();
        Ok(Forecast {
            sim,
            last,
            outcome,
            keys: Vec::new(),
            drafts_of,
            drafts: Vec::new(),
            waiting: vec![waiting],
            departs: vec![false],
            applied: 0,
            ended: false,
        })
    }

    /// The KV blocks of a forecast being dropped, for the next one to reuse; None if anything
    /// besides it may still hold them.
    pub fn into_spare(forecast: Py<Forecast>, py: Python<'_>) -> Option<Py<BlockManager>> {
        let sim = forecast.borrow(py).sim.clone_ref(py);
        drop(forecast);
        let kv = sim.borrow(py).kv.clone_ref(py);
        drop(sim);
        (kv.get_refcnt(py) == 1).then_some(kv)
    }

    /// Keys of steps `start + 1 ..= end` (clamped to those predicted).
    fn slice(&self, start: usize, end: usize) -> Vec<SharedKey> {
        let end = end.min(self.keys.len());
        self.keys[start.min(end)..end].to_vec()
    }

    /// Applies the pending step on the copy, or forms the next (a decode run: up to `room`).
    fn advance(&mut self, py: Python<'_>, room: usize) -> PyResult<()> {
        if self.applied < self.keys.len() {
            self.outcome = self.sim.borrow_mut(py).update(py, self.last.bind(py).borrow_mut())?;
            let waiting = !self.sim.borrow(py).waiting.is_empty();
            self.waiting.push(waiting);
            self.departs.push(!self.outcome.finished.is_empty() && !waiting);
            self.applied += 1;
            return Ok(());
        }
        let sim = self.sim.bind(py);
        let run = DecodeRun::after(sim, &self.last.borrow(py), &self.outcome, room.max(1))?; // no longer than taken
        if let Some(mut run) = run {
            let steps = (run.steps_left().max(0) as usize).min(room).max(1); // room: at least this step
            self.keys.extend(run.keys(py, steps as i64)?.into_iter().map(StepKey::shared));
            if self.drafts_of.is_some() {
                // kept aligned (a speculating client takes no decode runs)
                self.drafts.extend((0..steps).map(|_| Vec::new()));
            }
            self.last = Py::new(py, run.take_in_bulk(py, steps as i64)?)?; // its last step applied like any other
                                                                           // A run's steps before its last change no queue and finish no one.
            let waiting = *self.waiting.last().expect("the origin's step is applied");
            self.waiting.extend(std::iter::repeat_n(waiting, steps - 1));
            self.departs.extend(std::iter::repeat_n(false, steps - 1));
            self.applied += steps - 1;
            return Ok(());
        }
        let batch = sim.borrow_mut().schedule(py)?;
        if batch.seqs.is_empty() {
            self.ended = true; // nothing can run
            return Ok(());
        }
        let batch = Bound::new(py, batch)?;
        self.keys.push(batch.borrow_mut().key(py)?.shared());
        if let Some(drafts_of) = &self.drafts_of {
            // formed, not applied: who proposes is known
            self.drafts.push(drafts_of.call1(py, (batch.clone(),))?.extract(py)?);
        }
        self.last = batch.unbind();
        Ok(())
    }
}
