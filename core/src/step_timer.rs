//! A client's step timer: forms its steps (decode runs taken without forming each) and times each
//! by one formula, asking the runtime session with the lookahead that makes a miss rare.
//!
//! A step's time is the runtime backend's answer for its batch signature
//! ([`crate::timing::RuntimeSessionProxy`]), with the network backend's collectives in place of the
//! backend's own estimate where one times them, plus what the batch does before its forward pass
//! (the drafter's proposals, swapped KV copied back, LoRA adapters loaded), plus the host time the
//! engine loop exposes ([`StepTimer::step_ns`]). Those optional parts stay Python objects called
//! only where a config gives them; the energy model is the core's ([`StepEnergy`]), so a cached step
//! of a plain batch calls no other Python. On a miss the batches that follow if no work arrives ride along: they come from a
//! [`Forecast`] on a copy of the client's scheduler, kept until work arrives (`interrupt`) or KV is
//! released (`forget_forecast`), so asking again continues it; when another client of the session
//! misses, this one's predictions ride along too where they fall short (`top_up`). A dropped
//! forecast's KV blocks are kept, and the next forecast brings them up to date by the entries either
//! side wrote since ([`crate::pool::BlockPool::mirror_into`]) instead of copying them anew. The
//! predictions reach the session as the forecast's timing keys, with no Python in between, unless a
//! Python subclass replaces `_lookahead` (a test checking each against a fresh copy's). A decode
//! run's steps whose timings are cached (or timed natively on a miss) are taken back to back while
//! nothing else happens (`run_ahead`), and the client's steps are begun, timed, ended and recorded natively, in place
//! where nothing else comes first ([`crate::stepping`]).

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use crate::batch::{ScheduledBatch, StepOutcome};
use crate::forecast::Forecast;
use crate::kernel::Kernel;
use crate::manager::BlockManager;
use crate::power::{StepEnergy, StepJoules};
use crate::runs::DecodeRun;
use crate::scheduler::Scheduler;
use crate::stepping;
use crate::timeline::Timeline;
use crate::timing::{signature_keys, RuntimeSessionProxy, SharedKey, Timing};

/// A forecast longer than this is made again from the step in flight (bounds its memory).
const MAX_FORECAST_STEPS: usize = 1024;

/// What the step loop reads of its client at every step ([`StepTimer::attach`]).
pub struct ClientParts {
    pub kernel: Py<Kernel>,
    pub timeline: Py<Timeline>,
    pub wake_label: Arc<str>,
    pub done_label: Arc<str>,
    /// Each request's token gaps are kept (`RequestRecord.itl_ns`).
    pub keep_itls: bool,
}

/// Steps one client's scheduler and times each step (see the module docs).
///
/// Args:
///     name: the client's name (calls are made for it).
///     scheduler: the client's scheduler.
///     session: the runtime session timing its steps (the timer joins it as a rider).
///     settled: records a decode run's steps on the requests when they are applied
///         (`settled(seqs, steps, max_gap_ns, last_ns)`).
///     collectives_ns: the network backend's time of a step's collectives, by its tokens; None:
///         the runtime backend's own estimate stands.
///     host_bandwidth_gbps: device-host bandwidth for swapped KV.
///     next_arrival_ns: when the next request may arrive here (a lookahead hint), or None.
///     energy: how much energy each step uses ([`StepEnergy`]); None: only what
///         the backend reports.
///     max_lookahead: most batches predicted per call (0: none; none either where the session
///         looks nothing ahead, as where it times misses natively).
///     decode_runs: take decode runs in bulk; off, every step is formed and updated one by one.
///     host_time: the host time each step exposes (`cosim.hub.sim.clients.host.HostTime`); None: none.
///     drafter: the speculative drafter whose proposals each step adds; None: none.
///     alone: the client steps on its own; in a data-parallel lock-step group a step's time depends
///         on the other ranks' batches, unknown ahead, so nothing is predicted.
///     overlapping: the client's steps overlap (pipeline micro-batches): neither predictions nor
///         decode runs apply.
#[pyclass(module = "cosim_core", subclass)]
pub struct StepTimer {
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    pub(crate) scheduler: Py<Scheduler>,
    #[pyo3(get)]
    session: Py<RuntimeSessionProxy>,
    on_settled: PyObject,
    collectives_ns: Option<PyObject>,
    host_bandwidth_gbps: f64,
    next_arrival_ns: Option<PyObject>,
    energy: Option<Py<StepEnergy>>,
    #[pyo3(get)]
    max_lookahead: i64,
    #[pyo3(get)]
    decode_runs: bool,
    host_time: Option<PyObject>,
    drafter: Option<PyObject>,
    #[pyo3(get)]
    pub(crate) overlapping: bool,
    run: Option<Py<DecodeRun>>,
    in_flight: Option<Py<ScheduledBatch>>,
    last_duration_ns: i64,
    steps_begun: i64,
    /// The step (counted as `steps_begun`) up to which batches were predicted.
    predicted_through: i64,
    /// Kept until the scheduler changes other than by its steps.
    #[pyo3(get, name = "_forecast")]
    forecast: Option<Py<Forecast>>,
    /// The step (counted as `steps_begun`) in flight when it was made.
    forecast_origin: i64,
    /// The KV blocks of the last forecast dropped, which the next one brings up to date instead
    /// of copying the client's anew (`Scheduler::copy_reusing`).
    #[pyo3(get, name = "_spare")]
    spare: Option<Py<BlockManager>>,
    /// Whether its class replaces `_lookahead` (asked at its first prediction; see `lookahead`).
    lookahead_replaced: Option<bool>,
    /// What the step loop reads of its client at every step ([`ClientParts`], given by `attach`).
    pub(crate) client: Option<ClientParts>,
    /// A step (or, with micro-batches, the first pipeline stage) of its client's is in flight.
    #[pyo3(get, set)]
    pub busy: bool,
    /// Its client's wake-up is scheduled.
    #[pyo3(get, set)]
    pub wake_pending: bool,
}

#[pymethods]
impl StepTimer {
    #[new]
    #[pyo3(signature = (*, name, scheduler, session, settled, collectives_ns = None, host_bandwidth_gbps = 25.0,
                        next_arrival_ns = None, energy = None, max_lookahead = 256, decode_runs = true,
                        host_time = None, drafter = None, alone = true, overlapping = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: String,
        scheduler: Py<Scheduler>,
        session: Py<RuntimeSessionProxy>,
        settled: PyObject,
        collectives_ns: Option<PyObject>,
        host_bandwidth_gbps: f64,
        next_arrival_ns: Option<PyObject>,
        energy: Option<Py<StepEnergy>>,
        max_lookahead: i64,
        decode_runs: bool,
        host_time: Option<PyObject>,
        drafter: Option<PyObject>,
        alone: bool,
        overlapping: bool,
    ) -> Self {
        let predicts = alone && !overlapping && session.borrow(py).lookahead;
        StepTimer {
            name,
            scheduler,
            session,
            on_settled: settled,
            collectives_ns,
            host_bandwidth_gbps,
            next_arrival_ns,
            energy,
            max_lookahead: if predicts { max_lookahead } else { 0 },
            decode_runs: decode_runs && !overlapping,
            host_time,
            drafter,
            overlapping,
            run: None,
            in_flight: None,
            last_duration_ns: 0,
            steps_begun: 0,
            predicted_through: 0,
            forecast: None,
            forecast_origin: 0,
            spare: None,
            lookahead_replaced: None,
            client: None,
            busy: false,
            wake_pending: false,
        }
    }

    /// Gives the timer what its client's step loop ([`crate::stepping`]) reads at every step: the
    /// client's kernel and timeline, its events' labels, and whether it keeps each request's token
    /// gaps (`LLMClient` does, once; read as the client's attributes, they cost ~5% of a run).
    #[pyo3(signature = (*, kernel, timeline, wake_label, done_label, keep_itls))]
    fn attach(
        &mut self,
        kernel: Py<Kernel>,
        timeline: Py<Timeline>,
        wake_label: String,
        done_label: String,
        keep_itls: bool,
    ) {
        self.client = Some(ClientParts {
            kernel,
            timeline,
            wake_label: wake_label.into(),
            done_label: done_label.into(),
            keep_itls,
        });
    }

    // The client's callbacks and the session (whose riders include this timer) hold it back: the
    // garbage collector sees those cycles through these.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.scheduler)?;
        visit.call(&self.session)?;
        visit.call(&self.on_settled)?;
        for callback in [&self.collectives_ns, &self.next_arrival_ns, &self.host_time, &self.drafter] {
            visit.call(callback)?;
        }
        visit.call(&self.run)?;
        visit.call(&self.in_flight)?;
        visit.call(&self.forecast)?;
        if let Some(client) = &self.client {
            visit.call(&client.kernel)?; // its heap holds the client's events
            visit.call(&client.timeline)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.on_settled = Python::with_gil(|py| py.None());
        (self.collectives_ns, self.next_arrival_ns, self.energy, self.host_time, self.drafter) =
            (None, None, None, None, None);
        (self.run, self.in_flight, self.forecast, self.spare) = (None, None, None, None);
        self.client = None;
    }

    // -- stepping ----------------------------------------------------------------

    /// The next step: a decode run's, else the scheduler's choice; None when nothing can run.
    pub(crate) fn begin(slf: &Bound<'_, Self>) -> PyResult<Option<Py<ScheduledBatch>>> {
        let py = slf.py();
        let run = slf.borrow().run.as_ref().map(|run| run.clone_ref(py));
        let batch = match run {
            Some(run) if run.borrow(py).steps_left() > 0 => {
                let mut run = run.borrow_mut(py);
                run.begin(py)?;
                Py::new(py, run.step(py)?)?
            }
            _ => {
                Self::settle(slf)?;
                let scheduler = slf.borrow().scheduler.clone_ref(py);
                let mut scheduler = scheduler.borrow_mut(py);
                {
                    let mut this = slf.borrow_mut();
                    this.run = None;
                    if !scheduler.waiting.is_empty() {
                        // Forming the step may write queued sequences, which a forecast's copy shares until
                        // it writes them itself (Scheduler.copy): a later prediction needs a fresh copy.
                        this.drop_forecast(py);
                    }
                }
                let mut batch = scheduler.schedule(py)?;
                while batch.seqs.is_empty() && !batch.preempted.is_empty() {
                    // A step that only preempted admits no one (as vLLM's); vLLM's engine schedules again
                    // at once, and admits then. Idle here, no event would ever wake this client.
                    let mut again = scheduler.schedule(py)?;
                    let mut preempted = std::mem::take(&mut batch.preempted);
                    preempted.append(&mut again.preempted);
                    again.preempted = preempted;
                    batch = again;
                }
                if batch.seqs.is_empty() {
                    return Ok(None);
                }
                Py::new(py, batch)?
            }
        };
        let mut this = slf.borrow_mut();
        this.in_flight = Some(batch.clone_ref(py));
        this.steps_begun += 1;
        Ok(Some(batch))
    }

    /// Whether `batch` is a decode run's step (its effects are pending, see `settled`).
    pub(crate) fn in_run(&self, py: Python<'_>, batch: &Bound<'_, ScheduledBatch>) -> bool {
        self.run.as_ref().is_some_and(|run| run.borrow(py).owns(&batch.borrow()))
    }

    /// The decode run's sequences and requests (parallel paths of one count once).
    #[getter]
    pub(crate) fn run_size(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        let run = self.run.as_ref().ok_or_else(|| PyValueError::new_err("asked while no decode run's step ends"))?;
        let mut run = run.borrow_mut(py);
        Ok((run.num_seqs(), run.num_requests(py)))
    }

    /// Hands a finished step back to the scheduler; None for a decode run's step (applied later).
    pub(crate) fn end(
        slf: &Bound<'_, Self>,
        batch: &Bound<'_, ScheduledBatch>,
        start_ns: i64,
        end_ns: i64,
    ) -> PyResult<Option<Py<StepOutcome>>> {
        let py = slf.py();
        let run = {
            let mut this = slf.borrow_mut();
            this.in_flight = None;
            this.run.as_ref().map(|run| run.clone_ref(py))
        };
        if let Some(run) = run {
            if run.borrow(py).owns(&batch.borrow()) {
                if run.borrow(py).steps_left() > 0 {
                    run.borrow_mut(py).end_step(start_ns, end_ns);
                    return Ok(None);
                }
                Self::settle(slf)?; // the run's earlier steps; its last is handed back like any other
                slf.borrow_mut().run = None;
            }
        }
        let scheduler = slf.borrow().scheduler.clone_ref(py);
        let outcome = scheduler.borrow_mut(py).update(py, batch.borrow_mut())?;
        let run = if slf.borrow().decode_runs {
            DecodeRun::after(scheduler.bind(py), &batch.borrow(), &outcome, usize::MAX)?
                .map(|run| Py::new(py, run))
                .transpose()?
        } else {
            None
        };
        slf.borrow_mut().run = run;
        Ok(Some(Py::new(py, outcome)?))
    }

    /// Work arrived: the current decode run ends after its steps begun, and the steps after the one
    /// in flight may now differ from those predicted.
    fn interrupt(&mut self, py: Python<'_>) {
        if let Some(run) = &self.run {
            run.borrow_mut(py).cut();
        }
        self.predicted_through = self.steps_begun;
        self.drop_forecast(py);
    }

    /// The scheduler changed other than by its steps (KV released): predict from a fresh copy.
    fn forget_forecast(&mut self, py: Python<'_>) {
        self.drop_forecast(py);
    }

    /// The scheduler, every step taken so far applied to its sequences and recorded on the requests
    /// (a decode run's pending steps): the one view of sequence state to read.
    fn settled(slf: &Bound<'_, Self>) -> PyResult<Py<Scheduler>> {
        Self::settle(slf)?;
        Ok(slf.borrow().scheduler.clone_ref(slf.py()))
    }

    // -- timing ------------------------------------------------------------------

    /// How long `batch` takes, and the energy it uses (`StepEnergy.step`; the time added here to the
    /// backend's, host and swaps, counts at idle power); `dp_rank_tokens`: the tokens of every rank of
    /// its data-parallel lock-step group, if any.
    #[pyo3(signature = (batch, now_ns, dp_rank_tokens = Vec::new()))]
    fn duration_ns(
        slf: &Bound<'_, Self>,
        batch: &Bound<'_, ScheduledBatch>,
        now_ns: i64,
        dp_rank_tokens: Vec<i64>,
    ) -> PyResult<(i64, Py<StepJoules>)> {
        let py = slf.py();
        let (session, predicts, drafter) = {
            let this = slf.borrow();
            (this.session.clone_ref(py), this.max_lookahead > 0, this.drafter.as_ref().map(|d| d.clone_ref(py)))
        };
        let session = session.bind(py);
        let key = batch.borrow_mut().key(py)?.finish(dp_rank_tokens, session.borrow().shape);
        let mut ahead = |depth: i64| -> PyResult<Vec<SharedKey>> {
            let depth = slf.borrow().depth(py, now_ns, depth)?;
            Self::lookahead(slf, batch, depth)
        };
        let rider = slf.as_any();
        let timing = RuntimeSessionProxy::time(session, key, now_ns, predicts.then_some(&mut ahead), Some(rider))?;
        let (swap_bytes, lora) = {
            let b = batch.borrow();
            (b.swap_bytes, b.lora.as_ref().map(|lora| lora.clone_ref(py)))
        };
        let bandwidth = slf.borrow().host_bandwidth_gbps;
        let mut added_ns = if swap_bytes != 0 { (swap_bytes as f64 / bandwidth) as i64 } else { 0 };
        if let Some(drafter) = drafter {
            let drafts = if predicts {
                Some(Py::new(py, DraftsAhead { timer: slf.clone().unbind(), batch: batch.clone().unbind(), now_ns })?)
            } else {
                None
            };
            added_ns +=
                drafter.bind(py).call_method1(intern!(py, "propose_ns"), (batch, now_ns, drafts))?.extract::<i64>()?;
        }
        if let Some(lora) = lora {
            // adapters copied into GPU slots before the forward pass
            added_ns += lora.bind(py).getattr(intern!(py, "load_ns"))?.extract::<i64>()?;
        }
        let num_new = batch.borrow().num_new.clone();
        let this = slf.borrow();
        let lists = StepLists::Batch(batch);
        let duration = this.step_duration(py, &timing, &num_new, &lists, added_ns)?;
        let joules = this.joules(py, &timing, duration, &lists)?;
        drop(this);
        slf.borrow_mut().last_duration_ns = duration;
        Ok((duration, joules))
    }

    /// How long a step takes: the formula for every step applied, one by one or in a decode run.
    ///
    /// The runtime backend's time (`timing`), with the network backend's collectives in place of
    /// the backend's own estimate where one times them, plus what the batch does before its forward
    /// pass (`added_ns`: the drafter's proposals, swapped KV copied back, LoRA adapters loaded; a
    /// decode run's steps do none of it), plus the host time the engine loop exposes.
    #[pyo3(signature = (timing, num_new, added_ns = 0))]
    fn step_ns(&self, py: Python<'_>, timing: &Timing, num_new: &Bound<'_, PyAny>, added_ns: i64) -> PyResult<i64> {
        let counts: Vec<i64> = num_new.extract()?;
        self.step_duration(py, timing, &counts, &StepLists::Given(num_new), added_ns)
    }

    /// The client's wake-up: its steps taken in place while nothing else comes first; the step whose
    /// end the heap handles, or None ([`stepping::take_steps`]).
    fn take_steps(slf: &Bound<'_, Self>, client: &Bound<'_, PyAny>) -> PyResult<Option<stepping::Step>> {
        stepping::take_steps(slf, client)
    }

    /// The client's next step, or None ([`stepping::begin_step`]).
    fn begin_step(slf: &Bound<'_, Self>, client: &Bound<'_, PyAny>) -> PyResult<Option<Py<ScheduledBatch>>> {
        stepping::begin_step(slf, client)
    }

    /// How long the client's step of `batch` takes, its energy counted ([`stepping::time_step`]).
    #[pyo3(signature = (client, batch, now_ns, dp_rank_tokens = Vec::new()))]
    fn time_step(
        slf: &Bound<'_, Self>,
        client: &Bound<'_, PyAny>,
        batch: &Bound<'_, ScheduledBatch>,
        now_ns: i64,
        dp_rank_tokens: Vec<i64>,
    ) -> PyResult<i64> {
        stepping::time_step(slf, client, batch, now_ns, dp_rank_tokens)
    }

    /// Ends the client's step of `batch` and records it ([`stepping::end_step`]).
    fn end_step(
        slf: &Bound<'_, Self>,
        client: &Bound<'_, PyAny>,
        batch: &Bound<'_, ScheduledBatch>,
        start_ns: i64,
    ) -> PyResult<()> {
        stepping::end_step(slf, client, batch, start_ns)
    }

    /// Schedules the client's wake-up now, unless it is busy or one is pending ([`stepping::wake`]).
    fn wake(slf: &Bound<'_, Self>, client: &Bound<'_, PyAny>) -> PyResult<()> {
        stepping::wake(slf, client)
    }

    /// The client's wake-up event ([`stepping::on_wake`]).
    fn on_wake(slf: &Bound<'_, Self>, client: &Bound<'_, PyAny>) -> PyResult<()> {
        stepping::on_wake(slf, client)
    }

    /// A step's end the heap handles ([`stepping::step_done`]).
    fn step_done(
        slf: &Bound<'_, Self>,
        client: &Bound<'_, PyAny>,
        batch: &Bound<'_, ScheduledBatch>,
        start_ns: i64,
    ) -> PyResult<()> {
        stepping::step_done(slf, client, batch, start_ns)
    }

    /// The signatures of the batches after `batch` (in flight), as the kept forecast, or a new one,
    /// gives them: what the session is handed on a miss (a subclass may replace it, see `lookahead`).
    fn _lookahead(slf: &Bound<'_, Self>, batch: &Bound<'_, ScheduledBatch>, depth: i64) -> PyResult<Vec<PyObject>> {
        let py = slf.py();
        Self::lookahead_keys(slf, batch, depth)?
            .iter()
            .map(|key| Ok(key.key().to_signature(py)?.into_any().unbind()))
            .collect()
    }
}

/// Where a step's lists (`num_new`, `context`) come from; the Python list of `num_new` is made only if
/// an optional part reads it.
enum StepLists<'a, 'py> {
    Batch(&'a Bound<'py, ScheduledBatch>),
    Run(&'a Bound<'py, DecodeRun>, &'a [i64]),
    Given(&'a Bound<'py, PyAny>),
}

impl<'py> StepLists<'_, 'py> {
    fn num_new(&self) -> PyResult<Bound<'py, PyAny>> {
        match self {
            StepLists::Batch(batch) => batch.as_any().getattr(intern!(batch.py(), "num_new")),
            StepLists::Run(run, _) => Ok(run.borrow_mut().ones(run.py())?.into_any()),
            StepLists::Given(num_new) => Ok((*num_new).clone()),
        }
    }
}

impl StepTimer {
    /// The batches after the step in flight, when those predicted so far fall short of the
    /// lookahead horizon; the session asks when another client sharing it makes a call anyway, so
    /// that this client's next miss, and its round trip, mostly never come.
    pub fn top_up(slf: &Bound<'_, Self>, now_ns: i64, depth: i64) -> PyResult<Vec<SharedKey>> {
        let py = slf.py();
        let (batch, depth) = {
            let this = slf.borrow();
            let Some(batch) = this.in_flight.as_ref().filter(|_| this.max_lookahead > 0) else {
                return Ok(Vec::new());
            };
            let depth = this.depth(py, now_ns, depth)?;
            if this.predicted_through - this.steps_begun >= depth {
                return Ok(Vec::new());
            }
            (batch.clone_ref(py), depth)
        };
        Self::lookahead(slf, batch.bind(py), depth)
    }

    /// The keys of the batches after `batch` (in flight): the forecast's, or, where a Python
    /// subclass replaces `_lookahead` (a test checking each prediction against a fresh copy's),
    /// the signatures it returns.
    fn lookahead(slf: &Bound<'_, Self>, batch: &Bound<'_, ScheduledBatch>, depth: i64) -> PyResult<Vec<SharedKey>> {
        let py = slf.py();
        let replaced = slf.borrow().lookahead_replaced;
        let replaced = match replaced {
            Some(replaced) => replaced,
            None => {
                let name = intern!(py, "_lookahead");
                let replaced = !slf.get_type().getattr(name)?.is(&py.get_type::<StepTimer>().getattr(name)?);
                slf.borrow_mut().lookahead_replaced = Some(replaced);
                replaced
            }
        };
        if replaced {
            return signature_keys(&slf.call_method1(intern!(py, "_lookahead"), (batch, depth))?);
        }
        Self::lookahead_keys(slf, batch, depth)
    }

    /// See `_lookahead`: the keys, with the steps they reach noted (`predicted_through`).
    fn lookahead_keys(
        slf: &Bound<'_, Self>,
        batch: &Bound<'_, ScheduledBatch>,
        depth: i64,
    ) -> PyResult<Vec<SharedKey>> {
        let (_, _, keys) = Self::predicted(slf, batch, depth)?;
        let mut this = slf.borrow_mut();
        this.predicted_through = this.steps_begun + keys.len() as i64;
        Ok(keys)
    }

    /// Drops the kept forecast, keeping its copy's KV blocks for the next (`spare`).
    fn drop_forecast(&mut self, py: Python<'_>) {
        if let Some(forecast) = self.forecast.take() {
            if let Some(kv) = Forecast::into_spare(forecast, py) {
                self.spare = Some(kv);
            }
        }
    }

    /// See `step_ns`.
    fn step_duration(
        &self,
        py: Python<'_>,
        timing: &Timing,
        num_new: &[i64],
        lists: &StepLists<'_, '_>,
        added_ns: i64,
    ) -> PyResult<i64> {
        let mut duration = timing.duration_ns + added_ns;
        if let Some(collectives) = &self.collectives_ns {
            // The network backend times the TP all-reduces in place of the runtime backend's estimate.
            let tokens: i64 = num_new.iter().sum();
            duration += collectives.call1(py, (tokens,))?.extract::<i64>(py)? - timing.communication_ns;
        }
        if let Some(host_time) = &self.host_time {
            duration += host_time
                .call_method1(py, intern!(py, "exposed_ns"), (lists.num_new()?, duration))?
                .extract::<i64>(py)?;
        }
        Ok(duration)
    }

    /// The energy of a step of `duration_ns` ([`StepEnergy`]; the time added to the backend's
    /// counts at idle power), else what the backend reports.
    fn joules(
        &self,
        py: Python<'_>,
        timing: &Timing,
        duration_ns: i64,
        lists: &StepLists<'_, '_>,
    ) -> PyResult<Py<StepJoules>> {
        let joules = match &self.energy {
            Some(energy) => {
                let energy = energy.get();
                match lists {
                    StepLists::Batch(batch) => {
                        let batch = batch.borrow();
                        energy.joules_of(timing, duration_ns, &batch.num_new, &batch.context)
                    }
                    StepLists::Run(_, context) => {
                        energy.joules_of(timing, duration_ns, &vec![1; context.len()], context)
                    }
                    StepLists::Given(_) => return Err(PyValueError::new_err("no context given")),
                }
            }
            None => StepJoules { joules: timing.energy_j, device_s: 0.0, reported: timing.energy_j.is_some() },
        };
        Py::new(py, joules)
    }

    /// How many batches to predict: the steps that begin before the next request may arrive here
    /// and the first after it (step times drift; at least two), else `depth` (the session's, from how many predictions
    /// were used lately). Only a hint: predictions are exact or unused, and those past an arrival
    /// are mostly unused (an arrival changes the batch); a hint that comes early costs a call. Not
    /// while requests wait: an arrival then joins the queue's tail, which the predicted steps do not
    /// reach.
    fn depth(&self, py: Python<'_>, now_ns: i64, depth: i64) -> PyResult<i64> {
        let Some(next_arrival) = &self.next_arrival_ns else {
            return Ok(depth);
        };
        if !self.scheduler.borrow(py).waiting.is_empty() {
            return Ok(depth);
        }
        let arrival: Option<i64> = next_arrival.call1(py, (now_ns,))?.extract(py)?;
        let last = self.last_duration_ns;
        match arrival {
            Some(arrival) if last > 0 => {
                let steps = -(-(arrival - now_ns)).div_euclid(last);
                Ok(steps.min(self.max_lookahead).max(2))
            }
            _ => Ok(depth),
        }
    }

    /// Applies a decode run's finished steps to its sequences, and has them recorded; idempotent.
    fn settle(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let (run, on_settled) = {
            let this = slf.borrow();
            let Some(run) = this.run.as_ref() else {
                return Ok(());
            };
            (run.clone_ref(py), this.on_settled.clone_ref(py))
        };
        let (seqs, steps, gap, last) = {
            let mut run = run.borrow_mut(py);
            if run.taken == 0 {
                return Ok(());
            }
            let (gap, last) = (run.max_gap_ns, run.last_ns);
            (run.seqs(py)?.unbind(), run.settle(py)?, gap, last)
        };
        if steps != 0 {
            on_settled.call1(py, (seqs, steps, gap, last))?;
        }
        Ok(())
    }

    /// Up to `depth` batches after `batch` (in flight): the kept forecast's where it holds, else a
    /// new one's; with the forecast and the step in flight's number in it.
    fn predicted(
        slf: &Bound<'_, Self>,
        batch: &Bound<'_, ScheduledBatch>,
        depth: i64,
    ) -> PyResult<(Py<Forecast>, i64, Vec<SharedKey>)> {
        let py = slf.py();
        let (forecast, step) = {
            let this = slf.borrow();
            (this.forecast.as_ref().map(|f| f.clone_ref(py)), this.steps_begun - this.forecast_origin)
        };
        if let Some(forecast) = forecast {
            let batches = forecast.borrow_mut(py).keys_after(py, step, depth, batch)?;
            if let Some(batches) = batches {
                if forecast.borrow(py).num_steps() <= MAX_FORECAST_STEPS {
                    return Ok((forecast, step, batches));
                }
            }
        }
        Self::settle(slf)?; // the copy is taken from the sequences' state
        let (scheduler, drafter) = {
            let this = slf.borrow();
            (this.scheduler.clone_ref(py), this.drafter.as_ref().map(|d| d.clone_ref(py)))
        };
        let mut drafts_of = None;
        if let Some(drafter) = drafter {
            let drafter = drafter.bind(py);
            if !drafter.getattr(intern!(py, "session"))?.is_none() {
                drafts_of = Some(drafter.getattr(intern!(py, "forwards"))?.unbind());
            }
        }
        let spare = {
            let mut this = slf.borrow_mut();
            this.drop_forecast(py);
            this.spare.take()
        };
        let sim = scheduler.borrow(py).copy_reusing(py, spare)?;
        let forecast = Py::new(py, Forecast::on(scheduler.bind(py), sim, batch, drafts_of)?)?;
        {
            let mut this = slf.borrow_mut();
            this.forecast = Some(forecast.clone_ref(py));
            this.forecast_origin = this.steps_begun;
        }
        let batches =
            forecast.borrow_mut(py).keys_after(py, 0, depth, batch)?.expect("its origin is the step in flight");
        Ok((forecast, 0, batches))
    }
}

/// The drafter's forwards after the steps that follow a step in flight (`Drafter.propose_ns`'s
/// `ahead`): `depth` (the drafter session's hint) counts forwards, `k` a step.
#[pyclass(module = "cosim_core")]
pub struct DraftsAhead {
    timer: Py<StepTimer>,
    batch: Py<ScheduledBatch>,
    now_ns: i64,
}

#[pymethods]
impl DraftsAhead {
    fn __call__(&self, py: Python<'_>, depth: i64) -> PyResult<Vec<PyObject>> {
        let timer = self.timer.bind(py);
        let drafter = timer
            .borrow()
            .drafter
            .as_ref()
            .map(|d| d.clone_ref(py))
            .ok_or_else(|| PyValueError::new_err("no drafter"))?;
        let k: i64 = drafter.bind(py).getattr(intern!(py, "k"))?.extract()?;
        let steps = timer.borrow().depth(py, self.now_ns, -(-depth).div_euclid(k))?;
        let (forecast, step, batches) = StepTimer::predicted(timer, self.batch.bind(py), steps)?;
        let drafts = forecast.borrow(py).drafts(py, step.max(0) as usize, batches.len());
        Ok(drafts)
    }
}

impl StepTimer {
    /// Takes the decode run's next step from `start_ns` as `begin`, `duration_ns` and `end` take it,
    /// without forming its batch, if: it ends before `horizon_ns()` (when anything else next happens
    /// in the simulation), its timing is cached or the session times misses natively, and it is not
    /// the run's last (handed back like any other). Its duration and energy, for the client to
    /// record; None: the step is taken one by one.
    pub(crate) fn run_ahead(
        slf: &Bound<'_, Self>,
        start_ns: i64,
        horizon_ns: impl FnOnce() -> PyResult<i128>,
    ) -> PyResult<Option<(i64, StepJoules)>> {
        let py = slf.py();
        let Some(run) = slf.borrow().run.as_ref().map(|run| run.clone_ref(py)) else {
            return Ok(None);
        };
        let run = run.bind(py);
        if run.borrow().steps_left() <= 1 {
            return Ok(None);
        }
        let session = slf.borrow().session.clone_ref(py);
        let Some(run_timing) = session.borrow(py).run_timing(py, run)? else {
            return Ok(None);
        };
        let timing = *run_timing.timing();
        let context = run.borrow().next_context(); // the step's batch as run.step() would form it
        let ones = vec![1; context.len()];
        let lists = StepLists::Run(run, &context);
        let duration = slf.borrow().step_duration(py, &timing, &ones, &lists, 0)?;
        let end_ns = start_ns + duration;
        // The horizon may lie past i64 (`Kernel.peek` with nothing pending: MAX_SIM_NS + 1).
        if i128::from(end_ns) >= horizon_ns()? {
            return Ok(None);
        }
        session.borrow_mut(py).count_run_step(py, run_timing, Some(slf.as_any()))?;
        {
            let mut run = run.borrow_mut();
            run.begin(py)?;
            run.end_step(start_ns, end_ns);
        }
        {
            let mut this = slf.borrow_mut();
            this.steps_begun += 1;
            this.last_duration_ns = duration;
        }
        let joules = *slf.borrow().joules(py, &timing, duration, &lists)?.get();
        Ok(Some((duration, joules)))
    }
}
