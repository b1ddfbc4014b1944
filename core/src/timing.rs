//! The timing cache: a runtime session's step timings, keyed by batch signature.
//!
//! A client's step is timed by the runtime backend's answer for its batch signature (new and
//! context tokens per sequence, and the further StepBatch fields: speculative drafts, LoRA
//! adapters, a data-parallel group's tokens). A [`RuntimeSessionProxy`] answers from its cache
//! ([`TimingCache`]); on a miss it asks the backend, through the Python `RuntimeClient`
//! (`step_batch` + `predict_steps`), for the step and the batches predicted to follow (the
//! caller's `ahead`, the other riders' `top_up`) in one call, and caches every answer. Each step
//! is still looked up by its exact signature, so results are those of asking step by step; a wrong
//! prediction only costs backend work. How far to look ahead adapts to how many of a rider's
//! predictions were used since its last miss.
//!
//! Runs of one process that open equal sessions share a cache ([`SharedTimings`]). The common
//! path, a hit for a batch the step timer formed (`crate::step_timer`, through
//! [`RuntimeSessionProxy::time`]) or a decode run's step ([`RuntimeSessionProxy::run_timing`]),
//! builds its key from Rust data and calls no Python. Where the backend is the in-process roofline,
//! a miss calls its compiled model ([`RooflineModel`]) directly, with the backend's checks and cache,
//! counted as the client's call (`native`). Such a miss costs about a microsecond, less than the
//! forecast lookahead would, so nothing rides along with it, and a decode run's step that misses is
//! timed there too, its run kept going in bulk.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};
use rustc_hash::FxBuildHasher;

use crate::bounded_cache::{BoundedCache, Hashed};
use crate::roofline::cache::BatchRef;
use crate::roofline::py::{check_batch, RooflineModel};
use crate::runs::DecodeRun;
use crate::step_timer::StepTimer;

/// The parts of a StepTiming the hub uses (`energy_j` None: the backend reported none).
#[pyclass(module = "cosim_core", frozen, get_all, eq)]
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub struct Timing {
    pub duration_ns: i64,
    pub energy_j: Option<f64>,
    pub out_of_range: bool,
    pub communication_ns: i64,
    pub compute_ns: i64,
    pub memory_ns: i64,
    pub dispatch_ns: i64,
}

#[pymethods]
impl Timing {
    #[new]
    #[pyo3(signature = (duration_ns, energy_j = None, out_of_range = false, communication_ns = 0, compute_ns = 0,
                        memory_ns = 0, dispatch_ns = 0))]
    fn new(
        duration_ns: i64,
        energy_j: Option<f64>,
        out_of_range: bool,
        communication_ns: i64,
        compute_ns: i64,
        memory_ns: i64,
        dispatch_ns: i64,
    ) -> Self {
        Timing { duration_ns, energy_j, out_of_range, communication_ns, compute_ns, memory_ns, dispatch_ns }
    }

    fn __repr__(&self) -> String {
        format!(
            "Timing(duration_ns={}, energy_j={:?}, out_of_range={}, communication_ns={}, compute_ns={}, \
                 memory_ns={}, dispatch_ns={})",
            self.duration_ns,
            self.energy_j,
            self.out_of_range,
            self.communication_ns,
            self.compute_ns,
            self.memory_ns,
            self.dispatch_ns
        )
    }
}

impl Timing {
    /// A backend's `StepTiming` (read once per answer).
    fn from_step_timing(timing: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = timing.py();
        let energy_j = if timing.call_method1(intern!(py, "HasField"), (intern!(py, "energy_j"),))?.is_truthy()? {
            Some(timing.getattr(intern!(py, "energy_j"))?.extract()?)
        } else {
            None
        };
        Ok(Timing {
            duration_ns: timing.getattr(intern!(py, "duration_ns"))?.extract()?,
            energy_j,
            out_of_range: timing.getattr(intern!(py, "out_of_range"))?.extract()?,
            communication_ns: timing.getattr(intern!(py, "communication_ns"))?.extract()?,
            compute_ns: timing.getattr(intern!(py, "compute_ns"))?.extract()?,
            memory_ns: timing.getattr(intern!(py, "memory_ns"))?.extract()?,
            dispatch_ns: timing.getattr(intern!(py, "dispatch_ns"))?.extract()?,
        })
    }

    /// Its duration and the duration's parts times `scale` (a prediction interval's edge, rounded
    /// as Python's `round`); a reported energy stays the backend's.
    fn scaled(self, scale: f64) -> Self {
        let times = |ns: i64| (ns as f64 * scale).round_ties_even() as i64;
        Timing {
            duration_ns: times(self.duration_ns),
            communication_ns: times(self.communication_ns),
            compute_ns: times(self.compute_ns),
            memory_ns: times(self.memory_ns),
            dispatch_ns: times(self.dispatch_ns),
            ..self
        }
    }
}

/// Up to `depth` keys of the batches predicted to follow a step.
pub type Ahead<'a> = &'a mut dyn FnMut(i64) -> PyResult<Vec<SharedKey>>;

/// A step's key, hashed once and shared: from the forecast that predicts the step to the cache
/// that stores its timing.
pub type SharedKey = Arc<Hashed<StepKey>>;

/// A batch's signature: what times it (Python's `Signature`: `(new, context, *fields)`).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct StepKey {
    pub new: Vec<i64>,
    pub context: Vec<i64>,
    /// Further StepBatch fields, (name, values), in the signature's order.
    pub fields: Vec<(String, Vec<i64>)>,
}

impl StepKey {
    /// The key of a Python signature tuple.
    pub fn from_signature(signature: &Bound<'_, PyAny>) -> PyResult<Self> {
        let parts = signature.downcast::<PyTuple>()?;
        let mut key =
            StepKey { new: ints(&parts.get_item(0)?)?, context: ints(&parts.get_item(1)?)?, fields: Vec::new() };
        for field in parts.iter().skip(2) {
            key.fields.push(field.extract()?);
        }
        Ok(key)
    }

    /// With its hash, computed once (a key is looked up, deduplicated and stored), to share.
    pub fn shared(self) -> SharedKey {
        Arc::new(Hashed::new(self))
    }

    /// The Python signature tuple of this key.
    pub fn to_signature<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let mut parts = vec![PyTuple::new(py, &self.new)?.into_any(), PyTuple::new(py, &self.context)?.into_any()];
        for (name, values) in &self.fields {
            parts.push((name.as_str(), PyTuple::new(py, values)?).into_pyobject(py)?.into_any());
        }
        PyTuple::new(py, parts)
    }

    /// Adds the fields `(name, values)` of a Python iterable of pairs.
    pub fn extend_fields(&mut self, fields: &Bound<'_, PyAny>) -> PyResult<()> {
        for field in fields.try_iter()? {
            self.fields.push(field?.extract()?);
        }
        Ok(())
    }

    /// With a data-parallel lock-step group's tokens (none: unchanged), shaped as the session's keys.
    pub fn finish(mut self, dp_rank_tokens: Vec<i64>, shape: KeyShape) -> Self {
        if !dp_rank_tokens.is_empty() {
            self.fields.push(("dp_rank_tokens".to_owned(), dp_rank_tokens));
        }
        self.shaped(shape)
    }

    /// As a session of key shape `shape` looks it up and times it: each context rounded up to a
    /// multiple of the bucket, then the decodes pooled.
    pub fn shaped(mut self, shape: KeyShape) -> Self {
        let bucket = shape.bucket_tokens;
        if bucket > 0 {
            self.context.iter_mut().for_each(|c| *c = (*c + bucket - 1).div_euclid(bucket) * bucket);
        }
        if shape.pooled_decodes {
            self.pool_decodes();
        }
        self
    }

    /// The representative batch of a backend declaring `pooled_decodes`: the sequences that are no
    /// decode (new tokens != 1) in their order, then the decodes, each at their mean context rounded
    /// as Python's `round`. Unchanged where a per-sequence field (drafts, LoRA) may set decodes apart.
    fn pool_decodes(&mut self) {
        let n = self.new.len();
        if self.context.len() != n || self.fields.iter().any(|(name, _)| name != "dp_rank_tokens") {
            return;
        }
        let (mut decodes, mut sum) = (0usize, 0i64);
        for (&new, &context) in self.new.iter().zip(&self.context) {
            if new == 1 {
                decodes += 1;
                sum += context;
            }
        }
        if decodes == 0 {
            return;
        }
        let mean = (sum as f64 / decodes as f64).round_ties_even() as i64;
        let mut at = 0;
        for i in 0..n {
            if self.new[i] != 1 {
                self.new[at] = self.new[i];
                self.context[at] = self.context[i];
                at += 1;
            }
        }
        self.new[at..].fill(1);
        self.context[at..].fill(mean);
    }

    /// The batch the client sends for this key: `make(new_tokens=..., context_tokens=..., **fields)`.
    fn to_batch<'py>(&self, make: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = make.py();
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "new_tokens"), PyTuple::new(py, &self.new)?)?;
        kwargs.set_item(intern!(py, "context_tokens"), PyTuple::new(py, &self.context)?)?;
        for (name, values) in &self.fields {
            kwargs.set_item(name, PyTuple::new(py, values)?)?;
        }
        make.call((), Some(&kwargs))
    }
}

/// How a session's keys are shaped before they are looked up and timed ([`StepKey::shaped`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct KeyShape {
    /// Each context rounded up to a multiple of this (0: exact); the caller checked the backend
    /// declares `bucketed_cache_safe`.
    pub bucket_tokens: i64,
    /// The decodes pooled into the representative batch; the session declares `pooled_decodes`.
    pub pooled_decodes: bool,
}

/// Integers of a tuple (the common case, read item by item) or of any sequence.
fn ints(values: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    match values.downcast::<PyTuple>() {
        Ok(tuple) => tuple.iter_borrowed().map(|value| value.extract()).collect(),
        Err(_) => values.extract(),
    }
}

/// The keys of an iterable of Python signature tuples.
pub fn signature_keys(signatures: &Bound<'_, PyAny>) -> PyResult<Vec<SharedKey>> {
    signatures.try_iter()?.map(|signature| Ok(StepKey::from_signature(&signature?)?.shared())).collect()
}

/// A session's step timings by key, the oldest stored dropped first past a bound.
#[pyclass(module = "cosim_core")]
#[derive(Default)]
pub struct TimingCache {
    entries: BoundedCache<StepKey, Timing>,
}

#[pymethods]
impl TimingCache {
    #[new]
    fn new() -> Self {
        TimingCache::default()
    }

    fn __len__(&self) -> usize {
        self.entries.len()
    }
}

impl TimingCache {
    pub fn get(&self, key: &Hashed<StepKey>) -> Option<Timing> {
        self.entries.get(key).copied()
    }

    pub fn contains(&self, key: &Hashed<StepKey>) -> bool {
        self.entries.contains(key)
    }

    /// Stores `timing` under `key` (a key stored already keeps its place), dropping the oldest
    /// past `max_entries`.
    pub fn store(&mut self, key: SharedKey, timing: Timing, max_entries: usize) {
        self.entries.store(key, timing, max_entries);
    }
}

/// Step timings kept across the runs of one process, by backend and session spec.
///
/// A backend's timings are a function of its session's spec and the batch (what the cache of a
/// single run relies on already), so runs that open equal sessions, such as the replications and
/// rates of a goodput search, can share one cache: a run then asks the backend only for the
/// batches no earlier run timed. Results are the same; only the backend work differs.
///
/// Args:
///     max_sessions: the sessions' caches kept, the least recently used dropped first.
#[pyclass(module = "cosim_core")]
pub struct SharedTimings {
    #[pyo3(get)]
    max_sessions: usize,
    /// (key, cache), the least recently used first.
    caches: Vec<(PyObject, Py<TimingCache>)>,
}

#[pymethods]
impl SharedTimings {
    #[new]
    #[pyo3(signature = (max_sessions = 16))]
    fn new(max_sessions: usize) -> Self {
        SharedTimings { max_sessions, caches: Vec::new() }
    }

    /// The sessions' caches kept.
    fn __len__(&self) -> usize {
        self.caches.len()
    }

    /// The cache of the sessions identified by `key` (backend and spec), empty at first.
    fn cache(&mut self, key: &Bound<'_, PyAny>) -> PyResult<Py<TimingCache>> {
        let py = key.py();
        let mut found = None;
        for (i, (known, _)) in self.caches.iter().enumerate() {
            if known.bind(py).eq(key)? {
                found = Some(i);
                break;
            }
        }
        let entry = match found {
            Some(i) => self.caches.remove(i),
            None => (key.clone().unbind(), Py::new(py, TimingCache::default())?),
        };
        let cache = entry.1.clone_ref(py);
        self.caches.push(entry);
        if self.caches.len() > self.max_sessions {
            self.caches.remove(0);
        }
        Ok(cache)
    }
}

/// Times the steps of the clients sharing one runtime session, caching by batch signature.
///
/// Args:
///     client: the backend's `RuntimeClient` (its `step_batch` makes a batch, `predict_steps` times them).
///     session_id: the open session.
///     client_name: the hub client the session was opened for (named in calls made for no rider).
///     cache: whether to cache timings (a backend is deterministic per session).
///     lookahead: whether a miss carries the batches predicted to follow; never where misses are
///         timed natively (`native`), which costs less than predicting them.
///     max_cache_entries: bound on the cache, so long runs keep bounded memory.
///     bucket_tokens: time every batch with its contexts rounded up to a multiple of this (0:
///         exact); the caller checked the backend declares `bucketed_cache_safe`.
///     pooled_decodes: time every batch as its representative one, its decodes at their mean
///         context (`StepKey::shaped`); the session declares `pooled_decodes`.
///     shared_cache: the cache to use, shared with earlier runs' proxies of an equal session
///         (`SharedTimings.cache`); None: its own. It holds the timings as scaled.
///     scale: every step's duration is the backend's times this (a prediction interval's edge).
///     native: the backend's compiled model (`RuntimeClient.native_model`), timed in place of
///         `predict_steps` where it is a [`RooflineModel`]; anything else (None) is ignored.
#[pyclass(module = "cosim_core")]
pub struct RuntimeSessionProxy {
    #[pyo3(get)]
    client: PyObject,
    #[pyo3(get)]
    session_id: String,
    #[pyo3(get)]
    client_name: String,
    #[pyo3(get)]
    scale: f64,
    #[pyo3(get)]
    use_cache: bool,
    #[pyo3(get)]
    pub(crate) lookahead: bool,
    #[pyo3(get, set)]
    max_cache_entries: usize,
    /// How keys are shaped before lookup (bucketed, pooled).
    pub shape: KeyShape,
    cache: Py<TimingCache>,
    native: Option<Py<RooflineModel>>,
    /// Per rider (its address; 0: none): its own predictions used since its last miss.
    hits_since_miss: HashMap<usize, i64>,
    riders: Vec<PyObject>,
    #[pyo3(get)]
    num_lookups: i64,
    #[pyo3(get)]
    num_hits: i64,
    #[pyo3(get)]
    num_out_of_range: i64,
    /// Calls of the client's that the compiled model answered in its place (the client counts the others).
    #[pyo3(get)]
    num_native_calls: i64,
}

fn rider_id(rider: Option<&Bound<'_, PyAny>>) -> usize {
    rider.map_or(0, |rider| rider.as_ptr() as usize)
}

#[pymethods]
impl RuntimeSessionProxy {
    /// At least 8: an RPC costs about as much as a dozen predicted batches (docs/performance.md).
    #[classattr]
    pub const MIN_LOOKAHEAD: i64 = 8;
    #[classattr]
    pub const MAX_LOOKAHEAD: i64 = 256;

    #[new]
    #[pyo3(signature = (client, session_id, *, client_name = String::new(), cache = true, lookahead = true,
                        max_cache_entries = 20_000, bucket_tokens = 0, pooled_decodes = false, shared_cache = None,
                        scale = 1.0, native = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: PyObject,
        session_id: String,
        client_name: String,
        cache: bool,
        lookahead: bool,
        max_cache_entries: usize,
        bucket_tokens: i64,
        pooled_decodes: bool,
        shared_cache: Option<Py<TimingCache>>,
        scale: f64,
        native: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let cache_store = match shared_cache {
            Some(shared) => shared,
            None => Py::new(py, TimingCache::default())?,
        };
        let native =
            native.and_then(|model| model.downcast::<RooflineModel>().ok()).map(|model| model.clone().unbind());
        Ok(RuntimeSessionProxy {
            client,
            session_id,
            client_name,
            scale,
            use_cache: cache,
            lookahead: lookahead && cache && native.is_none(),
            max_cache_entries,
            shape: KeyShape { bucket_tokens, pooled_decodes },
            cache: cache_store,
            native,
            hits_since_miss: HashMap::new(),
            riders: Vec::new(),
            num_lookups: 0,
            num_hits: 0,
            num_out_of_range: 0,
            num_native_calls: 0,
        })
    }

    // The riders (step timers) hold the proxy: the garbage collector sees the cycle through these.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.client)?;
        if let Some(native) = &self.native {
            visit.call(native)?;
        }
        for rider in &self.riders {
            visit.call(rider)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.riders.clear();
    }

    /// Adds a client whose top-ups (`rider.top_up(now_ns, depth)`) ride along when another
    /// client's step misses.
    fn join(&mut self, rider: PyObject) {
        self.riders.push(rider);
    }

    /// Timing of one step of `rider`. On a miss, `ahead(n)` (up to n predicted next batches) and
    /// the other riders' top-ups ride along in the same call. `dp_rank_tokens`: the tokens of every
    /// rank of a data-parallel lock-step group; `fields`: the batch's further StepBatch fields,
    /// (name, values) pairs.
    #[pyo3(signature = (new_tokens, context_tokens, *, now_ns, ahead = None, rider = None,
                        dp_rank_tokens = Vec::new(), fields = None))]
    #[allow(clippy::too_many_arguments)]
    fn step_time(
        slf: &Bound<'_, Self>,
        new_tokens: Vec<i64>,
        context_tokens: Vec<i64>,
        now_ns: i64,
        ahead: Option<&Bound<'_, PyAny>>,
        rider: Option<&Bound<'_, PyAny>>,
        dp_rank_tokens: Vec<i64>,
        fields: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Timing> {
        let mut key = StepKey { new: new_tokens, context: context_tokens, fields: Vec::new() };
        if let Some(fields) = fields {
            key.extend_fields(fields)?;
        }
        let key = key.finish(dp_rank_tokens, slf.borrow().shape);
        let mut call = |depth: i64| signature_keys(&ahead.expect("called only when given").call1((depth,))?);
        Self::time(slf, key, now_ns, ahead.map(|_| &mut call as Ahead<'_>), rider)
    }

    /// The cached timing of the batch of signature `signature` (exact, as cached), if any, not
    /// counted as a lookup.
    fn peek(&self, py: Python<'_>, signature: &Bound<'_, PyAny>) -> PyResult<Option<Timing>> {
        if !self.use_cache {
            return Ok(None);
        }
        Ok(self.cache.borrow(py).get(&Hashed::new(StepKey::from_signature(signature)?)))
    }

    #[getter]
    fn bucket_tokens(&self) -> i64 {
        self.shape.bucket_tokens
    }

    #[getter]
    fn pooled_decodes(&self) -> bool {
        self.shape.pooled_decodes
    }

    /// Whether misses are timed by the backend's compiled model, in process.
    #[getter]
    fn native(&self) -> bool {
        self.native.is_some()
    }

    #[getter]
    fn hit_rate(&self) -> f64 {
        if self.num_lookups > 0 {
            self.num_hits as f64 / self.num_lookups as f64
        } else {
            0.0
        }
    }

    /// The signatures cached, oldest first (for tests and inspection).
    fn cached(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTuple>>> {
        self.cache.borrow(py).entries.keys().map(|key| Ok(key.to_signature(py)?.unbind())).collect()
    }
}

impl RuntimeSessionProxy {
    /// The timing of the decode run's next step without asking the client: cached, or, missing,
    /// the compiled model's where misses are timed natively; None otherwise. Neither counted nor
    /// stored until the step is taken ([`Self::count_run_step`]).
    pub fn run_timing(&self, py: Python<'_>, run: &Bound<'_, DecodeRun>) -> PyResult<Option<RunTiming>> {
        if !self.use_cache {
            return Ok(None);
        }
        let key = Hashed::new(run.borrow().next_key(py)?.shaped(self.shape));
        if let Some(hit) = self.cache.borrow(py).get(&key) {
            return Ok(Some(RunTiming::Cached(hit)));
        }
        let Some(model) = &self.native else {
            return Ok(None); // the client is asked, with lookahead, by the step taken one by one
        };
        let key = Arc::new(key);
        Ok(Self::time_natively(model.bind(py), std::slice::from_ref(&key), self.scale)?
            .map(|timings| RunTiming::Timed(key, timings[0])))
    }

    /// Counts a decode run's step taken in bulk as `step_time` would have counted it: a hit, or a
    /// miss timed natively (one call of the client's), now cached.
    pub fn count_run_step(
        &mut self,
        py: Python<'_>,
        timing: RunTiming,
        rider: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        match timing {
            RunTiming::Cached(hit) => self.count_hit(&hit, rider),
            RunTiming::Timed(key, timing) => {
                self.num_lookups += 1;
                self.num_native_calls += 1;
                self.cache.borrow_mut(py).store(key, timing, self.max_cache_entries);
                self.num_out_of_range += i64::from(timing.out_of_range);
            }
        }
        Ok(())
    }

    /// Counts a lookup that found `hit`: `step_time`'s, or a decode run's step taken in bulk.
    fn count_hit(&mut self, hit: &Timing, rider: Option<&Bound<'_, PyAny>>) {
        self.num_lookups += 1;
        self.num_hits += 1;
        *self.hits_since_miss.entry(rider_id(rider)).or_insert(0) += 1;
        self.num_out_of_range += i64::from(hit.out_of_range);
    }

    /// Looks `key` up; on a miss asks the backend for it and the predicted batches in one call:
    /// `ahead(depth)`'s, then the other riders' top-ups, each once, none cached already.
    pub fn time<'py>(
        slf: &Bound<'py, Self>,
        key: StepKey,
        now_ns: i64,
        ahead: Option<Ahead<'_>>,
        rider: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Timing> {
        let py = slf.py();
        let key = Hashed::new(key);
        {
            let mut this = slf.borrow_mut();
            if this.use_cache {
                let hit = this.cache.borrow(py).get(&key);
                if let Some(hit) = hit {
                    this.count_hit(&hit, rider);
                    return Ok(hit);
                }
            }
            this.num_lookups += 1; // a miss: the backend is asked
        }
        let mut keys = vec![Arc::new(key)];
        if slf.borrow().lookahead {
            let predicted = Self::predicted(slf, now_ns, ahead, rider)?;
            let this = slf.borrow();
            let cache = this.cache.borrow(py);
            let mut seen: HashSet<&Hashed<StepKey>, FxBuildHasher> =
                HashSet::with_capacity_and_hasher(predicted.len(), FxBuildHasher);
            keys.reserve(predicted.len());
            for k in &predicted {
                if **k != *keys[0] && !cache.contains(k) && seen.insert(&**k) {
                    keys.push(k.clone());
                }
            }
        }
        let (client, scale) = {
            let this = slf.borrow();
            (this.client.clone_ref(py), this.scale)
        };
        let client = client.bind(py);
        let native = slf.borrow().native.as_ref().map(|model| model.clone_ref(py));
        let natively = match &native {
            Some(model) => Self::time_natively(model.bind(py), &keys, scale)?,
            None => None,
        };
        let timings = match natively {
            Some(timings) => {
                slf.borrow_mut().num_native_calls += 1;
                timings
            }
            None => {
                let (session_id, name) = {
                    let this = slf.borrow();
                    let name = match rider {
                        Some(rider) => rider.getattr(intern!(py, "name"))?.extract::<String>()?,
                        None => this.client_name.clone(),
                    };
                    (this.session_id.clone(), name)
                };
                let make = client.getattr(intern!(py, "step_batch"))?;
                let batches =
                    PyList::new(py, keys.iter().map(|k| k.key().to_batch(&make)).collect::<PyResult<Vec<_>>>()?)?;
                let kwargs = PyDict::new(py);
                kwargs.set_item(intern!(py, "sim_time_ns"), now_ns)?;
                kwargs.set_item(intern!(py, "client"), name)?;
                kwargs.set_item(intern!(py, "omit_breakdown"), true)?; // the hub reads no breakdown
                let answers = client.call_method(intern!(py, "predict_steps"), (session_id, batches), Some(&kwargs))?;
                let mut timings = answers
                    .try_iter()?
                    .map(|answer| Timing::from_step_timing(&answer?))
                    .collect::<PyResult<Vec<_>>>()?;
                if scale != 1.0 {
                    timings.iter_mut().for_each(|timing| *timing = timing.scaled(scale));
                }
                timings
            }
        };
        let first = *timings
            .first()
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("the backend answered no timing"))?;
        let mut this = slf.borrow_mut();
        if this.use_cache {
            let max_entries = this.max_cache_entries;
            let mut cache = this.cache.borrow_mut(py);
            for (k, timing) in keys.into_iter().zip(timings) {
                cache.store(k, timing, max_entries);
            }
        }
        this.num_out_of_range += i64::from(first.out_of_range); // the steps run, not the batches predicted
        Ok(first)
    }

    /// Times `keys` with the backend's compiled model, as `predict_steps` would (its checks, its
    /// timing cache, no breakdown), scaled by `scale`; the caller counts the call
    /// (`num_native_calls`). None, before anything is timed, where a batch is not one the hub forms (a
    /// field the backend does not read, counts the checks refuse): the Python path then answers,
    /// or raises its error.
    fn time_natively(
        model: &Bound<'_, RooflineModel>,
        keys: &[SharedKey],
        scale: f64,
    ) -> PyResult<Option<Vec<Timing>>> {
        let py = model.py();
        let mut batches = Vec::with_capacity(keys.len());
        for k in keys {
            match native_batch(k.key()) {
                Some(batch) => batches.push(batch),
                None => return Ok(None),
            }
        }
        let mut model = model.borrow_mut();
        let mut timings = Vec::with_capacity(batches.len());
        for batch in &batches {
            let t = model.predict(py, batch, true)?;
            let timing = Timing {
                duration_ns: t.duration_ns,
                energy_j: t.energy_j,
                out_of_range: false,
                communication_ns: t.communication_ns,
                compute_ns: t.compute_ns,
                memory_ns: t.memory_ns,
                dispatch_ns: t.dispatch_ns,
            };
            timings.push(if scale != 1.0 { timing.scaled(scale) } else { timing });
        }
        Ok(Some(timings))
    }

    /// The batches to time along with a miss: the caller's `ahead(depth)` (the depth from how many
    /// of its predictions were used since its last miss), then the other riders' top-ups; shaped.
    fn predicted(
        slf: &Bound<'_, Self>,
        now_ns: i64,
        ahead: Option<Ahead<'_>>,
        rider: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<SharedKey>> {
        let py = slf.py();
        let (depth, riders, shape) = {
            let mut this = slf.borrow_mut();
            let used = this.hits_since_miss.remove(&rider_id(rider)).unwrap_or(0);
            let depth = (2 * used).clamp(Self::MIN_LOOKAHEAD, Self::MAX_LOOKAHEAD);
            let riders: Vec<PyObject> = this.riders.iter().map(|r| r.clone_ref(py)).collect();
            (depth, riders, this.shape)
        };
        let mut predicted = match ahead {
            Some(ahead) => ahead(depth)?,
            None => Vec::new(),
        };
        for other in &riders {
            let other = other.bind(py);
            if rider.is_some_and(|rider| rider.is(other)) {
                continue;
            }
            predicted.extend(top_up(other, now_ns, Self::MIN_LOOKAHEAD)?);
        }
        if shape != KeyShape::default() {
            for key in &mut predicted {
                *key = key.key().clone().shaped(shape).shared();
            }
        }
        Ok(predicted)
    }
}

/// A decode run's step timed without asking the client ([`RuntimeSessionProxy::run_timing`]).
pub enum RunTiming {
    /// Found in the cache.
    Cached(Timing),
    /// Missing, timed by the compiled model: cached under its key once the step is taken.
    Timed(SharedKey, Timing),
}

impl RunTiming {
    pub fn timing(&self) -> &Timing {
        match self {
            RunTiming::Cached(timing) | RunTiming::Timed(_, timing) => timing,
        }
    }
}

/// A rider's top-up, the batches it wants timed along with another rider's miss: a step timer's
/// keys natively ([`StepTimer::top_up`]), any other rider's signatures from its `top_up(now_ns, depth)`.
fn top_up(rider: &Bound<'_, PyAny>, now_ns: i64, depth: i64) -> PyResult<Vec<SharedKey>> {
    match rider.downcast::<StepTimer>() {
        Ok(timer) => StepTimer::top_up(timer, now_ns, depth),
        Err(_) => signature_keys(&rider.call_method1(intern!(rider.py(), "top_up"), (now_ns, depth))?),
    }
}

/// The batch of `key` as the compiled roofline reads it, where it passes every check of the Python
/// path (`validate_batches`, the backend's): sequences with new tokens > 0 and contexts >= 0, and
/// only the StepBatch fields the roofline reads, one value per sequence (DP ranks aside).
fn native_batch(key: &StepKey) -> Option<BatchRef<'_>> {
    let n = key.new.len();
    if n == 0 || key.context.len() != n || key.new.iter().any(|&t| t <= 0) || key.context.iter().any(|&t| t < 0) {
        return None;
    }
    let mut batch = BatchRef {
        new: &key.new,
        context: &key.context,
        dp_rank_tokens: &[],
        drafts: &[],
        lora_ranks: &[],
        lora_ids: &[],
    };
    for (name, values) in &key.fields {
        if values.iter().any(|&v| v < 0) {
            return None;
        }
        match name.as_str() {
            "dp_rank_tokens" => batch.dp_rank_tokens = values,
            "draft_tokens" => batch.drafts = values,
            "lora_ranks" => batch.lora_ranks = values,
            "lora_ids" => batch.lora_ids = values,
            _ => return None,
        }
    }
    check_batch(n, batch.drafts.len(), batch.lora_ranks.len(), batch.lora_ids.len()).ok()?;
    Some(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(new: &[i64], context: &[i64], fields: &[(&str, &[i64])]) -> StepKey {
        StepKey {
            new: new.to_vec(),
            context: context.to_vec(),
            fields: fields.iter().map(|(name, values)| (name.to_string(), values.to_vec())).collect(),
        }
    }

    const POOLED: KeyShape = KeyShape { bucket_tokens: 0, pooled_decodes: true };

    #[test]
    fn decodes_go_last_at_their_mean_rounded_half_to_even() {
        // mean 10.5: rounds to 10 as Python's round; the chunks keep their order
        let mixed = key(&[1, 64, 1, 32], &[9, 0, 12, 100], &[("dp_rank_tokens", &[98, 90])]);
        assert_eq!(mixed.shaped(POOLED), key(&[64, 32, 1, 1], &[0, 100, 10, 10], &[("dp_rank_tokens", &[98, 90])]));
        assert_eq!(key(&[1, 1], &[10, 13], &[]).shaped(POOLED), key(&[1, 1], &[12, 12], &[])); // 11.5: 12
        assert_eq!(key(&[1, 1, 1], &[1, 1, 2], &[]).shaped(POOLED), key(&[1, 1, 1], &[1, 1, 1], &[]));
    }

    #[test]
    fn pooling_follows_bucketing_and_leaves_other_keys_exact() {
        let shape = KeyShape { bucket_tokens: 16, pooled_decodes: true };
        assert_eq!(key(&[1, 1], &[1, 40], &[]).shaped(shape), key(&[1, 1], &[32, 32], &[])); // 16 and 48
        for exact in [
            key(&[8, 4], &[1, 2], &[]),
            key(&[1, 1], &[1, 2], &[("draft_tokens", &[2, 0])]),
            key(&[1, 1], &[1, 2], &[("lora_ranks", &[8, 0]), ("lora_ids", &[1, 0])]),
        ] {
            assert_eq!(exact.clone().shaped(POOLED), exact);
        }
        assert_eq!(key(&[1, 1], &[1, 2], &[]).shaped(KeyShape::default()), key(&[1, 1], &[1, 2], &[]));
    }
}
