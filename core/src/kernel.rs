//! The discrete-event kernel: a clock and a heap of events. No gRPC, no I/O.
//!
//! Events are ordered by `(time_ns, priority, seq)`; `seq` comes from the kernel's own counter, so
//! events at the same time and priority run in the order they were scheduled and every run is
//! deterministic. Each event carries a label (`arrival`, `wake c0`, `step done c0`, ...), and the
//! kernel can keep the first events it handles (`cosim run --log-events N`). An event is a Python
//! call, `fn(*args)`; the heap and the loop are here, so scheduling and handling one costs no
//! Python frame of its own.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyFloat, PyInt, PyList, PyString, PyTuple};

/// Simulated times are int64 nanoseconds on the wire and in numpy (292 years).
pub const MAX_SIM_NS: i64 = i64::MAX;

// Priorities at equal times: finished work frees resources before new work arrives, and clients pick
// their next batch only after both.
/// A step, transfer or service that ends.
pub const DONE: i64 = 0;
/// Work that arrives.
pub const ARRIVAL: i64 = 1;
/// A client's wake-up to pick its next batch.
pub const WAKE: i64 = 2;

/// The error class `name` of `cosim.hub.errors` (imported once).
fn hub_error<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static ERRORS: GILOnceCell<Py<PyModule>> = GILOnceCell::new();
    let errors = ERRORS.get_or_try_init(py, || py.import("cosim.hub.errors").map(Bound::unbind))?;
    errors.bind(py).getattr(name)
}

/// A call of `fn(*args)` at a simulated time, with a label saying what it is.
struct Event {
    time_ns: i64,
    priority: i64,
    seq: u64,
    call: PyObject,
    args: Py<PyTuple>,
    label: String,
}

impl Event {
    fn order(&self) -> (i64, i64, u64) {
        (self.time_ns, self.priority, self.seq)
    }

    /// The label (else the function's name), with the request it concerns where its first argument
    /// is a request record (an integer `id`).
    fn describe(&self, py: Python<'_>) -> PyResult<String> {
        let label = if self.label.is_empty() {
            match self.call.bind(py).getattr(intern!(py, "__qualname__")) {
                Ok(name) => name.extract()?,
                Err(_) => "event".to_owned(),
            }
        } else {
            self.label.clone()
        };
        let args = self.args.bind(py);
        if !args.is_empty() {
            if let Ok(id) = args.get_item(0)?.getattr(intern!(py, "id")) {
                if id.is_instance_of::<PyInt>() {
                    return Ok(format!("{label} request {id}"));
                }
            }
        }
        Ok(label)
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.order() == other.order()
    }
}

impl Eq for Event {}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        self.order().cmp(&other.order())
    }
}

/// A run's stop sign (`Kernel.run`'s `flag`): set by a signal handler or another thread, read by the
/// kernel between two events without a Python call (a callable `stop` costs one per event).
#[pyclass(module = "cosim_core", frozen)]
#[derive(Default)]
pub struct StopFlag {
    raised: AtomicBool,
}

#[pymethods]
impl StopFlag {
    #[new]
    fn new() -> Self {
        StopFlag::default()
    }

    /// Stops the run before its next event.
    fn set(&self) {
        self.raised.store(true, AtomicOrdering::Relaxed);
    }

    /// Whether it was set.
    fn is_set(&self) -> bool {
        self.raised.load(AtomicOrdering::Relaxed)
    }
}

/// Clock plus event heap.
///
/// Args:
///     log_limit: how many of the first events to keep in `log`.
///     in_place: callers may handle the events due before any other in place (`advance`); off,
///         `peek` says something always comes next, so every event goes through the heap (a check
///         that handling them in place changes nothing).
///
/// Attributes:
///     now_ns: the simulated time of the event being handled.
///     num_events: events handled so far.
///     log: (time_ns, description) of the first `log_limit` events handled.
#[pyclass(module = "cosim_core")]
pub struct Kernel {
    #[pyo3(get, set)]
    pub(crate) now_ns: i64,
    #[pyo3(get)]
    num_events: i64,
    #[pyo3(get)]
    log_limit: i64,
    #[pyo3(get)]
    log: Py<PyList>,
    #[pyo3(get)]
    in_place: bool,
    heap: BinaryHeap<Reverse<Event>>,
    seq: u64,
    /// `run`'s `stop` and `flag`, while it runs.
    stop: Option<PyObject>,
    flag: Option<Py<StopFlag>>,
}

#[pymethods]
impl Kernel {
    #[new]
    #[pyo3(signature = (*, log_limit = 0, in_place = true))]
    fn new(py: Python<'_>, log_limit: i64, in_place: bool) -> Self {
        Kernel {
            now_ns: 0,
            num_events: 0,
            log_limit,
            log: PyList::empty(py).unbind(),
            in_place,
            heap: BinaryHeap::new(),
            seq: 0,
            stop: None,
            flag: None,
        }
    }

    // Events hold the simulation's callbacks, which hold the kernel: the collector sees those cycles.
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.log)?;
        visit.call(&self.stop)?;
        visit.call(&self.flag)?;
        for Reverse(event) in &self.heap {
            visit.call(&event.call)?;
            visit.call(&event.args)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.heap.clear();
        self.stop = None;
        self.flag = None;
    }

    /// Schedules `fn(*args)` at `time_ns` (never in the past).
    #[pyo3(signature = (time_ns, priority, r#fn, *args, label = String::new()))]
    pub(crate) fn call_at(
        &mut self,
        py: Python<'_>,
        time_ns: i128,
        priority: i64,
        r#fn: PyObject,
        args: Py<PyTuple>,
        label: String,
    ) -> PyResult<()> {
        if time_ns < i128::from(self.now_ns) {
            let label = PyString::new(py, &label).repr()?;
            return Err(PyErr::from_value(
                hub_error(py, "HubError")?
                    .call1((format!("event {label} scheduled at {time_ns} ns, before now ({} ns)", self.now_ns),))?,
            ));
        }
        if time_ns > i128::from(MAX_SIM_NS) {
            // The config's bounds keep runs far below; a backend's step time may not.
            let message = format!(
                "event {} would happen at {} s, past the {} s int64 nanoseconds hold: a time, rate, bandwidth or \
                 step time of the scenario is out of all proportion",
                PyString::new(py, &label).repr()?,
                g4(py, time_ns as f64 / 1e9)?,
                g4(py, MAX_SIM_NS as f64 / 1e9)?
            );
            return Err(PyErr::from_value(hub_error(py, "ScenarioError")?.call1(("simulated time", message))?));
        }
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Reverse(Event { time_ns: time_ns as i64, priority, seq, call: r#fn, args, label }));
        Ok(())
    }

    /// When the next event is handled: the first pending event's time; `now_ns` when the run stops
    /// before its next event (`run`'s `stop` or `flag`), or always where events are not handled in place
    /// (`in_place`); past `MAX_SIM_NS` when none is pending. Nothing else happens in the simulation
    /// before then (see `advance`).
    pub(crate) fn peek(&self, py: Python<'_>) -> PyResult<i128> {
        if !self.in_place {
            return Ok(i128::from(self.now_ns));
        }
        if stopped(py, self.stop.as_ref(), self.flag.as_ref())? {
            return Ok(i128::from(self.now_ns));
        }
        Ok(self.heap.peek().map_or(i128::from(MAX_SIM_NS) + 1, |Reverse(event)| i128::from(event.time_ns)))
    }

    /// Handles an event its caller handles itself, at `time_ns`, instead of scheduling it: one before
    /// `peek`, so it is the event the heap would handle next. Saves the heap's work on the steps of a
    /// client alone in the simulation; the order of events is the heap's.
    pub(crate) fn advance(&mut self, py: Python<'_>, time_ns: i64, label: &str) -> PyResult<()> {
        self.now_ns = time_ns;
        self.num_events += 1;
        if self.num_events <= self.log_limit {
            self.log.bind(py).append((time_ns, label))?;
        }
        Ok(())
    }

    /// Events scheduled and not yet handled.
    #[getter]
    fn num_pending(&self) -> usize {
        self.heap.len()
    }

    /// Handles events in order until the heap is empty, `flag` is set or `stop()` is true (each
    /// checked before every event).
    ///
    /// NOTE: time never goes backwards: every event is at or after `now_ns`, which `call_at` enforces.
    #[pyo3(signature = (*, stop = None, flag = None))]
    fn run(slf: &Bound<'_, Self>, stop: Option<PyObject>, flag: Option<Py<StopFlag>>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut this = slf.borrow_mut();
            this.stop = stop.as_ref().map(|stop| stop.clone_ref(py));
            this.flag = flag.as_ref().map(|flag| flag.clone_ref(py));
        }
        let handled = Self::handle_events(slf, stop.as_ref(), flag.as_ref());
        let mut this = slf.borrow_mut();
        this.stop = None;
        this.flag = None;
        handled
    }
}

impl Kernel {
    fn handle_events(slf: &Bound<'_, Self>, stop: Option<&PyObject>, flag: Option<&Py<StopFlag>>) -> PyResult<()> {
        let py = slf.py();
        loop {
            if slf.borrow().heap.is_empty() {
                return Ok(());
            }
            if stopped(py, stop, flag)? {
                // the kernel not borrowed: `stop` may call it
                return Ok(());
            }
            let event = {
                let mut this = slf.borrow_mut();
                let Reverse(event) = this.heap.pop().expect("not empty");
                this.now_ns = event.time_ns;
                this.num_events += 1;
                if this.num_events <= this.log_limit {
                    this.log.bind(py).append((event.time_ns, event.describe(py)?))?;
                }
                event
            };
            event.call.call1(py, event.args.bind(py))?;
        }
    }
}

/// Whether a run stops before its next event: `flag` set, or `stop()` true (called only then).
fn stopped(py: Python<'_>, stop: Option<&PyObject>, flag: Option<&Py<StopFlag>>) -> PyResult<bool> {
    if flag.is_some_and(|flag| flag.get().is_set()) {
        return Ok(true);
    }
    match stop {
        Some(stop) => stop.call0(py)?.is_truthy(py),
        None => Ok(false),
    }
}

/// `x` in Python's `:.4g` format (for a message).
fn g4(py: Python<'_>, x: f64) -> PyResult<String> {
    PyFloat::new(py, x).call_method1(intern!(py, "__format__"), (".4g",))?.extract()
}
