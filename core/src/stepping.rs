//! A client's steps: begun, timed, ended and recorded, and taken in place while nothing else in the
//! simulation comes first.
//!
//! An LLM client (Python's `LLMClient`, `hub/sim/clients/llm.py`) states what a step is; its step
//! timer ([`StepTimer`]) does the common path of each here: a step begins (the scheduler forms it, or
//! a decode run's next; [`begin_step`]), is timed ([`time_step`]), ends (the scheduler applies it;
//! [`end_step`]) and is recorded on the requests and the client's [`Timeline`]. The client's Python
//! is called only for what is rare or its own: a step's LoRA adapters, pipeline micro-batches, an API
//! server in front (`frontend`), forks, finished stages (`finish_stage`: the coordinator takes them), a
//! request's decode stage beginning, and waiting for offload loads (`wake_for_loads`). The client's
//! kernel, timeline and event labels, which the loop reads at every step, were given to its timer once
//! (`StepTimer.attach`); its `busy` and `wake_pending` flags are the timer's, its busy time the
//! timeline's (the router and the autoscaler read them there through the client).
//!
//! A step's end is an event of the kernel's heap ([`step_done`]), and so is the client's wake-up for
//! its next ([`wake`], [`on_wake`]): both call the core, with no Python frame of the client's. When
//! nothing else happens before the step ends (its end is before [`Kernel::peek`]), its end and the
//! wake-up after it are the next events the heap would handle: [`take_steps`] handles them in place,
//! in the heap's order ([`Kernel::advance`] counts and logs them as events), and goes on to the next
//! step; a decode run's steps that end before anything else happens, and whose timings are cached,
//! are taken in one go ([`StepTimer::run_ahead`]), without a batch each. None of it changes a result:
//! `tests/scenarios/test_lookahead.py` compares the events and outputs with the heap's
//! (`Kernel.in_place` off).

use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::batch::{ScheduledBatch, StepOutcome};
use crate::kernel::{Kernel, DONE, WAKE};
use crate::power::StepJoules;
use crate::recording::{record_start, record_tokens, request_of};
use crate::step_timer::StepTimer;
use crate::timeline::Timeline;

/// A step whose end the kernel's heap handles: its batch, start and duration.
pub type Step = (Py<ScheduledBatch>, i64, i64);

/// What the step loop reads of the client, once a call: the parts its timer was given
/// (`StepTimer.attach`); the client's `busy` and `wake_pending` flags are the timer's.
struct Client<'py> {
    obj: Bound<'py, PyAny>,
    timer: Bound<'py, StepTimer>,
    kernel: Bound<'py, Kernel>,
    timeline: Bound<'py, Timeline>,
    wake_label: Arc<str>,
    done_label: Arc<str>,
    keep_itls: bool,
}

impl<'py> Client<'py> {
    fn of(timer: &Bound<'py, StepTimer>, client: &Bound<'py, PyAny>) -> PyResult<Self> {
        let py = client.py();
        let this = timer.borrow();
        let parts = this
            .client
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("the step timer has no client: StepTimer.attach was not called"))?;
        Ok(Client {
            obj: client.clone(),
            timer: timer.clone(),
            kernel: parts.kernel.bind(py).clone(),
            timeline: parts.timeline.bind(py).clone(),
            wake_label: parts.wake_label.clone(),
            done_label: parts.done_label.clone(),
            keep_itls: parts.keep_itls,
        })
    }

    fn now_ns(&self) -> i64 {
        self.kernel.borrow().now_ns
    }

    fn busy(&self) -> bool {
        self.timer.borrow().busy
    }

    fn set_busy(&self, busy: bool) {
        self.timer.borrow_mut().busy = busy;
    }

    /// Counts `ns` more of its devices' busy time (on its timeline, where the router and autoscaler read it).
    fn add_busy_ns(&self, ns: i64) {
        self.timeline.borrow_mut().busy_ns += ns;
    }
}

/// The client's next step (`LLMClient.begin_step`): its batch, or None when it is busy or nothing can
/// run. A step that is no decode run's records its start on its sequences' requests.
pub fn begin_step(timer: &Bound<'_, StepTimer>, client: &Bound<'_, PyAny>) -> PyResult<Option<Py<ScheduledBatch>>> {
    begin(timer, &Client::of(timer, client)?)
}

fn begin(timer: &Bound<'_, StepTimer>, client: &Client<'_>) -> PyResult<Option<Py<ScheduledBatch>>> {
    let py = timer.py();
    if client.busy() || !timer.borrow().scheduler.borrow(py).has_work() {
        return Ok(None);
    }
    let Some(batch) = StepTimer::begin(timer)? else {
        return Ok(None);
    };
    let bound = batch.bind(py);
    if !timer.borrow().in_run(py, bound) {
        record_start(bound, client.now_ns())?; // a run's sequences have all started
    }
    let lora = bound.borrow().lora.as_ref().map(|lora| lora.clone_ref(py));
    if let Some(lora) = lora {
        let stats = client.timeline.getattr(intern!(py, "lora"))?;
        if !stats.is_none() {
            stats.call_method1(intern!(py, "record"), (lora,))?; // the adapters it loads (a run's steps load none)
        }
    }
    client.set_busy(true);
    Ok(Some(batch))
}

/// How long the step of `batch` takes (`LLMClient.time_step`); its energy is counted.
pub fn time_step(
    timer: &Bound<'_, StepTimer>,
    client: &Bound<'_, PyAny>,
    batch: &Bound<'_, ScheduledBatch>,
    now_ns: i64,
    dp_rank_tokens: Vec<i64>,
) -> PyResult<i64> {
    time(timer, &Client::of(timer, client)?, batch, now_ns, dp_rank_tokens)
}

fn time(
    timer: &Bound<'_, StepTimer>,
    client: &Client<'_>,
    batch: &Bound<'_, ScheduledBatch>,
    now_ns: i64,
    dp_rank_tokens: Vec<i64>,
) -> PyResult<i64> {
    let py = timer.py();
    // Asked through Python's attribute lookup, as any caller of the timer's `duration_ns` (a test counts
    // the steps timed one by one there).
    let (duration, joules): (i64, Py<StepJoules>) =
        timer.call_method1(intern!(py, "duration_ns"), (batch, now_ns, dp_rank_tokens))?.extract()?;
    client.timeline.borrow_mut().add_energy(joules.get());
    Ok(duration)
}

/// Hands a finished step back to the scheduler and records what it did (`LLMClient.end_step`).
pub fn end_step(
    timer: &Bound<'_, StepTimer>,
    client: &Bound<'_, PyAny>,
    batch: &Bound<'_, ScheduledBatch>,
    start_ns: i64,
) -> PyResult<()> {
    end(timer, &Client::of(timer, client)?, batch, start_ns)
}

fn end(
    timer: &Bound<'_, StepTimer>,
    client: &Client<'_>,
    batch: &Bound<'_, ScheduledBatch>,
    start_ns: i64,
) -> PyResult<()> {
    let py = timer.py();
    let now = client.now_ns();
    let overlapping = timer.borrow().overlapping;
    if overlapping {
        client.obj.call_method0(intern!(py, "end_micro_batch"))?;
    } else {
        client.set_busy(false);
    }
    let Some(outcome) = StepTimer::end(timer, batch, start_ns, now)? else {
        return record_run_step(timer, client, start_ns, now, None); // its effects wait until its run is settled
    };
    if !overlapping {
        client.add_busy_ns(now - start_ns);
    }
    record(client, batch, outcome.bind(py), start_ns, now)
}

/// Records a decode run's step, ended one by one or taken in bulk: its tokens are recorded on the
/// requests when its run is settled (`StepTimer.settled`); `joules`: its energy, where no
/// [`time`] counted it (a step taken in bulk).
fn record_run_step(
    timer: &Bound<'_, StepTimer>,
    client: &Client<'_>,
    start_ns: i64,
    end_ns: i64,
    joules: Option<&StepJoules>,
) -> PyResult<()> {
    let py = timer.py();
    if let Some(joules) = joules {
        client.timeline.borrow_mut().add_energy(joules);
    }
    client.add_busy_ns(end_ns - start_ns);
    let (num_seqs, num_requests) = timer.borrow().run_size(py)?;
    let (num_seqs, num_requests) = (num_seqs as i64, num_requests as i64);
    let (kv_blocks_used, num_waiting) = {
        let this = timer.borrow();
        let scheduler = this.scheduler.borrow(py);
        let kv_blocks_used = scheduler.kv.borrow(py).num_used();
        (kv_blocks_used, scheduler.waiting.len() as i64)
    };
    let mut timeline = client.timeline.borrow_mut();
    timeline.push(py, [start_ns, end_ns, num_seqs, 0, num_seqs, kv_blocks_used, num_waiting, num_requests])?;
    // Each request of the run got a token one step after its last (runs step back to back).
    timeline.count_gap(end_ns - start_ns, num_requests);
    Ok(())
}

/// Records a step's tokens, forks and finished stages on the requests, and its row.
fn record(
    client: &Client<'_>,
    batch: &Bound<'_, ScheduledBatch>,
    outcome: &Bound<'_, StepOutcome>,
    start_ns: i64,
    now: i64,
) -> PyResult<()> {
    let py = batch.py();
    let client_obj = &client.obj;
    let begin_decode = client_obj.getattr(intern!(py, "begin_decode_stage"))?;
    let timed = record_tokens(outcome, now, &client.timeline, client.keep_itls, &begin_decode)?;
    let frontend = client_obj.getattr(intern!(py, "frontend"))?;
    if !frontend.is_none() {
        frontend.call_method1(intern!(py, "deliver"), (outcome.getattr(intern!(py, "sampled"))?, now))?;
    }
    let (extra_tokens, forked, finished, kv_blocks_used, num_waiting) = {
        let outcome = outcome.borrow();
        let extra: Vec<_> = outcome.extra_tokens.iter().map(|(seq, n)| (seq.clone_ref(py), *n)).collect();
        let forked: Vec<_> = outcome
            .forked
            .iter()
            .map(|(parent, children)| {
                (parent.clone_ref(py), children.iter().map(|c| c.clone_ref(py)).collect::<Vec<_>>())
            })
            .collect();
        let finished: Vec<_> = outcome.finished.iter().map(|seq| seq.clone_ref(py)).collect();
        (extra, forked, finished, outcome.kv_blocks_used, outcome.num_waiting)
    };
    for (seq, extra) in extra_tokens {
        // speculative: accepted drafts, sampled at the same time
        request_of(py, &seq.borrow(py))?.borrow_mut().generated_tokens += extra;
    }
    for (parent, children) in forked {
        let stage = {
            let parent = parent.borrow(py);
            request_of(py, &parent)?.borrow_mut().generated_tokens += children.len() as i64; // each branch's first token
            parent.stage.clone_ref(py)
        };
        for child in &children {
            child.borrow_mut(py).stage = stage.clone_ref(py);
        }
        client_obj.call_method1(intern!(py, "hold"), (parent, children.len()))?;
    }
    let (num_seqs, prefill_tokens, num_tokens) = {
        let mut batch = batch.borrow_mut();
        batch.ensure(py)?;
        (batch.seqs.len() as i64, batch.prefill_tokens, batch.num_tokens)
    };
    client.timeline.borrow_mut().push(
        py,
        [start_ns, now, num_seqs, prefill_tokens, num_tokens - prefill_tokens, kv_blocks_used, num_waiting, timed],
    )?;
    for seq in finished {
        client_obj.call_method1(intern!(py, "finish_stage"), (seq, now))?;
    }
    Ok(())
}

/// The client's wake-up (`StepClock.take_steps`): its steps taken in place while each ends before
/// anything else happens; the step whose end the heap must handle, or None (idle, or the wake-up
/// after a step ended in place is an event again).
///
/// NOTE: every step and wake-up handled here is the event the heap would handle next: a step's end
/// is before [`Kernel::peek`], and the wake-up after it at a time no pending event is due.
pub fn take_steps(timer: &Bound<'_, StepTimer>, client: &Bound<'_, PyAny>) -> PyResult<Option<Step>> {
    take(timer, &Client::of(timer, client)?)
}

fn take(timer: &Bound<'_, StepTimer>, client: &Client<'_>) -> PyResult<Option<Step>> {
    let py = timer.py();
    let kernel = &client.kernel;
    let (done_label, wake_label) = (&*client.done_label, &*client.wake_label);
    let overlapping = timer.borrow().overlapping;
    loop {
        let Some(batch) = begin(timer, client)? else {
            client.obj.call_method0(intern!(py, "wake_for_loads"))?;
            return Ok(None); // idle, or blocked (e.g. no KV blocks): a finishing stage elsewhere will wake it
        };
        let now = client.now_ns();
        let duration = time(timer, client, batch.bind(py), now, Vec::new())?;
        if overlapping || i128::from(now + duration) >= kernel.borrow().peek(py)? {
            return Ok(Some((batch, now, duration)));
        }
        kernel.borrow_mut().advance(py, now + duration, done_label)?;
        end(timer, client, batch.bind(py), now)?;
        let now = client.now_ns();
        if i128::from(now) >= kernel.borrow().peek(py)? {
            return schedule_wake(timer, client).map(|()| None); // the step's end scheduled other events first
        }
        kernel.borrow_mut().advance(py, now, wake_label)?;
        run_alone(timer, client, done_label, wake_label)?;
    }
}

/// Takes the decode run's steps that end before anything else happens in one go, each recorded
/// as a run's step, its end and the wake-up after it counted as the events they stand for.
fn run_alone(timer: &Bound<'_, StepTimer>, client: &Client<'_>, done_label: &str, wake_label: &str) -> PyResult<()> {
    let py = timer.py();
    let kernel = &client.kernel;
    let mut start = client.now_ns();
    while let Some((duration, joules)) = StepTimer::run_ahead(timer, start, || kernel.borrow().peek(py))? {
        let end = start + duration;
        kernel.borrow_mut().advance(py, end, done_label)?;
        record_run_step(timer, client, start, end, Some(&joules))?;
        kernel.borrow_mut().advance(py, end, wake_label)?;
        start = end;
    }
    Ok(())
}

/// Schedules the client's wake-up ([`on_wake`]) at the current time, after the events due then,
/// unless it is busy or one is pending (`LLMClient.wake`, for a client in no lock-step group).
pub fn wake(timer: &Bound<'_, StepTimer>, client: &Bound<'_, PyAny>) -> PyResult<()> {
    schedule_wake(timer, &Client::of(timer, client)?)
}

fn schedule_wake(timer: &Bound<'_, StepTimer>, client: &Client<'_>) -> PyResult<()> {
    let py = timer.py();
    if client.busy() || timer.borrow().wake_pending {
        return Ok(());
    }
    timer.borrow_mut().wake_pending = true;
    let now = client.now_ns();
    let on_wake = timer.getattr(intern!(py, "on_wake"))?.unbind();
    let args = PyTuple::new(py, [&client.obj])?.unbind();
    let label = client.wake_label.to_string();
    client.kernel.borrow_mut().call_at(py, i128::from(now), WAKE, on_wake, args, label)
}

/// The client's wake-up event: its steps taken ([`take_steps`]), and the end of the one the heap
/// handles scheduled ([`step_done`]); with pipeline micro-batches, the first stage's release too
/// (`LLMClient.start_micro_batch`).
pub fn on_wake(timer: &Bound<'_, StepTimer>, client: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = timer.py();
    let client = Client::of(timer, client)?;
    timer.borrow_mut().wake_pending = false;
    let Some((batch, now, duration)) = take(timer, &client)? else {
        return Ok(());
    };
    let step_done = timer.getattr(intern!(py, "step_done"))?.unbind();
    let args =
        PyTuple::new(py, [client.obj.clone(), batch.into_bound(py).into_any(), now.into_pyobject(py)?.into_any()])?;
    let label = client.done_label.to_string();
    client.kernel.borrow_mut().call_at(py, i128::from(now + duration), DONE, step_done, args.unbind(), label)?;
    if timer.borrow().overlapping {
        client.obj.call_method1(intern!(py, "start_micro_batch"), (now, duration))?;
    }
    Ok(())
}

/// A step's end the heap handles (scheduled by [`on_wake`]): ended and recorded ([`end_step`]), and
/// the client woken for its next.
pub fn step_done(
    timer: &Bound<'_, StepTimer>,
    client: &Bound<'_, PyAny>,
    batch: &Bound<'_, ScheduledBatch>,
    start_ns: i64,
) -> PyResult<()> {
    let client = Client::of(timer, client)?;
    end(timer, &client, batch, start_ns)?;
    schedule_wake(timer, &client)
}
