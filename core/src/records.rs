//! What a run records of each request and each of its stages: [`RequestRecord`], [`StageRecord`].
//!
//! The coordinator and the clients fill them in, the core's per-step recording
//! ([`crate::recording`]) writes their token counts and times natively, and the metrics
//! (`cosim.hub.metrics`) turn them into summary.json, CSVs, traces and plots. Times are simulated
//! integer nanoseconds; -1 means "did not happen". Both behave as the Python dataclasses they
//! replace: built by keyword or position with the same defaults, every field read and written by
//! name, compared field by field, printed and pickled with their fields.

use pyo3::basic::CompareOp;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyType};

/// A field's value, or its default where none (or None) was given.
fn or_default(value: Option<Py<PyAny>>, default: impl FnOnce() -> PyResult<Py<PyAny>>) -> PyResult<Py<PyAny>> {
    value.map_or_else(default, Ok)
}

/// `Name(field=value, ...)`, as a dataclass prints itself.
fn repr(record: &Bound<'_, PyAny>, names: &[&str], values: &Bound<'_, PyTuple>) -> PyResult<String> {
    let parts = names
        .iter()
        .zip(values.iter())
        .map(|(name, value)| Ok(format!("{name}={}", value.repr()?)))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(format!("{}({})", record.get_type().name()?, parts.join(", ")))
}

/// Field-by-field comparison (as a dataclass's: a tuple of the fields each), for `==` and `!=`.
fn compare(
    py: Python<'_>,
    mine: &Bound<'_, PyTuple>,
    theirs: Option<Bound<'_, PyTuple>>,
    op: CompareOp,
) -> PyResult<Py<PyAny>> {
    match (theirs, op) {
        (Some(theirs), CompareOp::Eq | CompareOp::Ne) => Ok(mine.rich_compare(theirs, op)?.unbind()),
        _ => Ok(py.NotImplemented()),
    }
}

/// One stage of one request (prefill, decode, rag, ...).
///
/// Args:
///     kind: the stage's kind.
///     client: the client serving it.
///     enqueue_ns: the stage was handed to the client (after any transfer).
///     start_ns: the client first scheduled it.
///     end_ns: the client finished it.
///     transfer_ns: time spent moving its input (KV, context) before enqueue_ns.
#[pyclass(module = "cosim_core", get_all, set_all)]
pub struct StageRecord {
    pub kind: Py<PyAny>,
    pub client: Py<PyAny>,
    pub enqueue_ns: i64,
    pub start_ns: i64,
    pub end_ns: i64,
    pub transfer_ns: i64,
}

/// What a span of a stage's life is (trace.json draws each as a slice of its request's thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// Its input moving in, before it was enqueued (only where that took time).
    Transfer,
    /// Waiting at its client.
    Queue,
    /// Served by its client (only once it started).
    Service,
}

/// A stage's spans in order, as (kind, start_ns, end_ns; -1 while still open): the one definition
/// the trace's events and the request table's span starts (its event budget) both read.
pub fn stage_spans(
    enqueue_ns: i64,
    start_ns: i64,
    end_ns: i64,
    transfer_ns: i64,
) -> impl Iterator<Item = (SpanKind, i64, i64)> {
    let transfer = (transfer_ns > 0).then_some((SpanKind::Transfer, enqueue_ns - transfer_ns, enqueue_ns));
    let service = (start_ns >= 0).then_some((SpanKind::Service, start_ns, end_ns));
    transfer.into_iter().chain(std::iter::once((SpanKind::Queue, enqueue_ns, start_ns))).chain(service)
}

const STAGE_FIELDS: [&str; 6] = ["kind", "client", "enqueue_ns", "start_ns", "end_ns", "transfer_ns"];

#[pymethods]
impl StageRecord {
    #[new]
    #[pyo3(signature = (kind, client, enqueue_ns, start_ns = -1, end_ns = -1, transfer_ns = 0))]
    fn new(kind: Py<PyAny>, client: Py<PyAny>, enqueue_ns: i64, start_ns: i64, end_ns: i64, transfer_ns: i64) -> Self {
        StageRecord { kind, client, enqueue_ns, start_ns, end_ns, transfer_ns }
    }

    /// Its fields' names, in order (as a dataclass's `__match_args__`).
    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        Ok(PyTuple::new(py, STAGE_FIELDS)?.unbind())
    }

    /// Its fields' values, in order.
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            [
                self.kind.clone_ref(py).into_bound(py),
                self.client.clone_ref(py).into_bound(py),
                self.enqueue_ns.into_pyobject(py)?.into_any(),
                self.start_ns.into_pyobject(py)?.into_any(),
                self.end_ns.into_pyobject(py)?.into_any(),
                self.transfer_ns.into_pyobject(py)?.into_any(),
            ],
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        Ok((slf.get_type(), slf.borrow().values(slf.py())?))
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = other.py();
        let theirs = match other.downcast::<StageRecord>() {
            Ok(other) => Some(other.borrow().values(py)?),
            Err(_) => None,
        };
        compare(py, &self.values(py)?, theirs, op)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        repr(slf.as_any(), &STAGE_FIELDS, &slf.borrow().values(slf.py())?)
    }
}

/// One request from arrival to its last token.
///
/// TTFT is `first_token_ns - arrival_ns`; TPOT is
/// `(finish_ns - first_token_ns) / (output_tokens / branches - 1)` (one path's output tokens after the
/// first, as vLLM reports it; parallel paths decode side by side); E2E is `finish_ns - arrival_ns`.
/// As its client saw it through the API server (hub/sim/frontend.py): `client_send_ns`,
/// `client_first_token_ns`, `client_last_token_ns` (-1 without one; `arrival_ns` is then when the
/// engine got it). Every gap between its consecutive tokens (ns), at the engine and at its client,
/// where the run keeps them (output.benchmark_details: vllm bench serve's per-request itls):
/// `itl_ns`, `client_itl_ns`; None otherwise. Built as the dataclass was (None given for `template`,
/// `pipeline`, `data_at` or `stages` gives the default, a fresh list of stages for each record).
#[pyclass(module = "cosim_core", get_all, set_all)]
pub struct RequestRecord {
    /// The request's id.
    pub id: i64,
    /// The model it asks for.
    pub model: Py<PyAny>,
    /// When it arrived.
    pub arrival_ns: i64,
    /// Its prompt's tokens.
    pub input_tokens: i64,
    /// Tokens asked for.
    pub output_tokens: i64,
    /// Tokens produced.
    pub generated_tokens: i64,
    pub first_token_ns: i64,
    pub finish_ns: i64,
    /// Longest gap between consecutive output tokens.
    pub max_tbt_ns: i64,
    pub last_token_ns: i64,
    pub preemptions: i64,
    /// Prompt tokens served from a prefix cache.
    pub cached_tokens: i64,
    pub prefix_id: Py<PyAny>,
    pub prefix_tokens: i64,
    /// The prompt's ids, where known.
    pub prompt_token_ids: Py<PyAny>,
    pub template: Py<PyAny>,
    /// Parallel reasoning paths; output_tokens counts all of them.
    pub branches: i64,
    pub branches_done: i64,
    pub pipeline: Py<PyAny>,
    /// Next pipeline stage to push.
    pub stage_index: i64,
    /// Prompt tokens whose KV a kv_retrieval stage fetched.
    pub retrieved_tokens: i64,
    /// That KV was fetched to the decode side too (no P->D copy needed).
    pub retrieved_at_decode: bool,
    /// Retrieved text a RAG stage sends on to prefill.
    pub context_bytes: i64,
    /// Client holding data the next stage needs.
    pub data_at: Py<PyAny>,
    pub stages: Py<PyAny>,
    /// The LoRA adapter it names (None: the base model).
    pub lora: Py<PyAny>,
    /// That adapter's rank.
    pub lora_rank: i64,
    /// Its request class (workload.classes), if any.
    pub cls: Py<PyAny>,
    /// vLLM's request priority (lower first).
    pub priority: i64,
    /// When its first token is due (earliest deadline first); none: never.
    pub deadline_ns: i64,
    /// The session it is a turn of (hub/sim/conversations.py); -1: none.
    pub session: i64,
    /// Its turn's index in that session.
    pub turn: i64,
    /// Its output's ids, where a later turn reuses them.
    pub output_token_ids: Py<PyAny>,
    pub client_send_ns: i64,
    pub client_first_token_ns: i64,
    pub client_last_token_ns: i64,
    pub itl_ns: Py<PyAny>,
    pub client_itl_ns: Py<PyAny>,
}

const REQUEST_FIELDS: [&str; 38] = [
    "id",
    "model",
    "arrival_ns",
    "input_tokens",
    "output_tokens",
    "generated_tokens",
    "first_token_ns",
    "finish_ns",
    "max_tbt_ns",
    "last_token_ns",
    "preemptions",
    "cached_tokens",
    "prefix_id",
    "prefix_tokens",
    "prompt_token_ids",
    "template",
    "branches",
    "branches_done",
    "pipeline",
    "stage_index",
    "retrieved_tokens",
    "retrieved_at_decode",
    "context_bytes",
    "data_at",
    "stages",
    "lora",
    "lora_rank",
    "cls",
    "priority",
    "deadline_ns",
    "session",
    "turn",
    "output_token_ids",
    "client_send_ns",
    "client_first_token_ns",
    "client_last_token_ns",
    "itl_ns",
    "client_itl_ns",
];

#[pymethods]
impl RequestRecord {
    #[new]
    #[pyo3(signature = (id, model, arrival_ns, input_tokens, output_tokens, generated_tokens = 0,
                        first_token_ns = -1, finish_ns = -1, max_tbt_ns = 0, last_token_ns = -1, preemptions = 0,
                        cached_tokens = 0, prefix_id = None, prefix_tokens = 0, prompt_token_ids = None,
                        template = None, branches = 1, branches_done = 0, pipeline = None, stage_index = 0,
                        retrieved_tokens = 0, retrieved_at_decode = false, context_bytes = 0, data_at = None,
                        stages = None, lora = None, lora_rank = 0, cls = None, priority = 0, deadline_ns = 1 << 62,
                        session = -1, turn = -1, output_token_ids = None, client_send_ns = -1,
                        client_first_token_ns = -1, client_last_token_ns = -1, itl_ns = None, client_itl_ns = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        id: i64,
        model: Py<PyAny>,
        arrival_ns: i64,
        input_tokens: i64,
        output_tokens: i64,
        generated_tokens: i64,
        first_token_ns: i64,
        finish_ns: i64,
        max_tbt_ns: i64,
        last_token_ns: i64,
        preemptions: i64,
        cached_tokens: i64,
        prefix_id: Option<Py<PyAny>>,
        prefix_tokens: i64,
        prompt_token_ids: Option<Py<PyAny>>,
        template: Option<Py<PyAny>>,
        branches: i64,
        branches_done: i64,
        pipeline: Option<Py<PyAny>>,
        stage_index: i64,
        retrieved_tokens: i64,
        retrieved_at_decode: bool,
        context_bytes: i64,
        data_at: Option<Py<PyAny>>,
        stages: Option<Py<PyAny>>,
        lora: Option<Py<PyAny>>,
        lora_rank: i64,
        cls: Option<Py<PyAny>>,
        priority: i64,
        deadline_ns: i64,
        session: i64,
        turn: i64,
        output_token_ids: Option<Py<PyAny>>,
        client_send_ns: i64,
        client_first_token_ns: i64,
        client_last_token_ns: i64,
        itl_ns: Option<Py<PyAny>>,
        client_itl_ns: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let none = || py.None();
        // the defaults that are not None: a fresh list of stages, as the dataclass's default_factory
        let template = or_default(template, || Ok(intern!(py, "chat").clone().into_any().unbind()))?;
        let pipeline = or_default(pipeline, || Ok(PyTuple::new(py, ["prefill", "decode"])?.into_any().unbind()))?;
        let data_at = or_default(data_at, || Ok(intern!(py, "").clone().into_any().unbind()))?;
        let stages = or_default(stages, || Ok(PyList::empty(py).into_any().unbind()))?;
        Ok(RequestRecord {
            id,
            model,
            arrival_ns,
            input_tokens,
            output_tokens,
            generated_tokens,
            first_token_ns,
            finish_ns,
            max_tbt_ns,
            last_token_ns,
            preemptions,
            cached_tokens,
            prefix_id: prefix_id.unwrap_or_else(none),
            prefix_tokens,
            prompt_token_ids: prompt_token_ids.unwrap_or_else(none),
            template,
            branches,
            branches_done,
            pipeline,
            stage_index,
            retrieved_tokens,
            retrieved_at_decode,
            context_bytes,
            data_at,
            stages,
            lora: lora.unwrap_or_else(none),
            lora_rank,
            cls: cls.unwrap_or_else(none),
            priority,
            deadline_ns,
            session,
            turn,
            output_token_ids: output_token_ids.unwrap_or_else(none),
            client_send_ns,
            client_first_token_ns,
            client_last_token_ns,
            itl_ns: itl_ns.unwrap_or_else(none),
            client_itl_ns: client_itl_ns.unwrap_or_else(none),
        })
    }

    /// A request's record as it arrives, built without parsing keywords (about a fifth of the cost of
    /// a keyword call): `ints` are its integers in `RequestSpecs.INTS`' order (`id`, `arrival_ns`,
    /// `input_tokens`, `output_tokens`, `prefix_tokens`, `lora_rank`, `priority`, `deadline_ns`); every
    /// field not given (None for `template` or `pipeline` too) has the default it has by keyword.
    #[staticmethod]
    #[pyo3(signature = (ints, model, template, pipeline, branches))]
    fn arriving(
        py: Python<'_>,
        ints: [i64; 8],
        model: Py<PyAny>,
        template: Option<Py<PyAny>>,
        pipeline: Option<Py<PyAny>>,
        branches: i64,
    ) -> PyResult<Self> {
        let [id, arrival_ns, input_tokens, output_tokens, prefix_tokens, lora_rank, priority, deadline_ns] = ints;
        Self::new(
            py,
            id,
            model,
            arrival_ns,
            input_tokens,
            output_tokens,
            0,
            -1,
            -1,
            0,
            -1,
            0,
            0,
            None,
            prefix_tokens,
            None,
            template,
            branches,
            0,
            pipeline,
            0,
            0,
            false,
            0,
            None,
            None,
            None,
            lora_rank,
            None,
            priority,
            deadline_ns,
            -1,
            -1,
            None,
            -1,
            -1,
            -1,
            None,
            None,
        )
    }

    /// Whether it finished.
    #[getter]
    fn is_finished(&self) -> bool {
        self.finish_ns >= 0
    }

    /// Its fields' names, in order (as a dataclass's `__match_args__`).
    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        Ok(PyTuple::new(py, REQUEST_FIELDS)?.unbind())
    }

    /// The integer fields a request table's row takes (hub/metrics/request_table.py), read in one call
    /// rather than by a getter each, which costs from Python about as much as this whole call: `id`,
    /// `arrival_ns`, `first_token_ns`, `finish_ns`, `output_tokens`, `branches`, `max_tbt_ns`,
    /// `input_tokens`, `generated_tokens`, `preemptions`, `cached_tokens`, `session`, `turn`,
    /// `client_send_ns`, `client_first_token_ns`, `client_last_token_ns`.
    fn row_ints<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            [
                self.id,
                self.arrival_ns,
                self.first_token_ns,
                self.finish_ns,
                self.output_tokens,
                self.branches,
                self.max_tbt_ns,
                self.input_tokens,
                self.generated_tokens,
                self.preemptions,
                self.cached_tokens,
                self.session,
                self.turn,
                self.client_send_ns,
                self.client_first_token_ns,
                self.client_last_token_ns,
            ],
        )
    }

    /// Its fields' values, in order.
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            [
                self.id.into_pyobject(py)?.to_owned().into_any(),
                self.model.clone_ref(py).into_bound(py),
                self.arrival_ns.into_pyobject(py)?.to_owned().into_any(),
                self.input_tokens.into_pyobject(py)?.to_owned().into_any(),
                self.output_tokens.into_pyobject(py)?.to_owned().into_any(),
                self.generated_tokens.into_pyobject(py)?.to_owned().into_any(),
                self.first_token_ns.into_pyobject(py)?.to_owned().into_any(),
                self.finish_ns.into_pyobject(py)?.to_owned().into_any(),
                self.max_tbt_ns.into_pyobject(py)?.to_owned().into_any(),
                self.last_token_ns.into_pyobject(py)?.to_owned().into_any(),
                self.preemptions.into_pyobject(py)?.to_owned().into_any(),
                self.cached_tokens.into_pyobject(py)?.to_owned().into_any(),
                self.prefix_id.clone_ref(py).into_bound(py),
                self.prefix_tokens.into_pyobject(py)?.to_owned().into_any(),
                self.prompt_token_ids.clone_ref(py).into_bound(py),
                self.template.clone_ref(py).into_bound(py),
                self.branches.into_pyobject(py)?.to_owned().into_any(),
                self.branches_done.into_pyobject(py)?.to_owned().into_any(),
                self.pipeline.clone_ref(py).into_bound(py),
                self.stage_index.into_pyobject(py)?.to_owned().into_any(),
                self.retrieved_tokens.into_pyobject(py)?.to_owned().into_any(),
                self.retrieved_at_decode.into_pyobject(py)?.to_owned().into_any(),
                self.context_bytes.into_pyobject(py)?.to_owned().into_any(),
                self.data_at.clone_ref(py).into_bound(py),
                self.stages.clone_ref(py).into_bound(py),
                self.lora.clone_ref(py).into_bound(py),
                self.lora_rank.into_pyobject(py)?.to_owned().into_any(),
                self.cls.clone_ref(py).into_bound(py),
                self.priority.into_pyobject(py)?.to_owned().into_any(),
                self.deadline_ns.into_pyobject(py)?.to_owned().into_any(),
                self.session.into_pyobject(py)?.to_owned().into_any(),
                self.turn.into_pyobject(py)?.to_owned().into_any(),
                self.output_token_ids.clone_ref(py).into_bound(py),
                self.client_send_ns.into_pyobject(py)?.to_owned().into_any(),
                self.client_first_token_ns.into_pyobject(py)?.to_owned().into_any(),
                self.client_last_token_ns.into_pyobject(py)?.to_owned().into_any(),
                self.itl_ns.clone_ref(py).into_bound(py),
                self.client_itl_ns.clone_ref(py).into_bound(py),
            ],
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        Ok((slf.get_type(), slf.borrow().values(slf.py())?))
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = other.py();
        let theirs = match other.downcast::<RequestRecord>() {
            Ok(other) => Some(other.borrow().values(py)?),
            Err(_) => None,
        };
        compare(py, &self.values(py)?, theirs, op)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        repr(slf.as_any(), &REQUEST_FIELDS, &slf.borrow().values(slf.py())?)
    }
}

#[cfg(test)]
mod tests {
    use super::{stage_spans, SpanKind};

    #[test]
    fn a_stage_spans_its_transfer_where_it_took_time_its_queueing_and_its_service_once_started() {
        let spans = |args: (i64, i64, i64, i64)| stage_spans(args.0, args.1, args.2, args.3).collect::<Vec<_>>();
        assert_eq!(
            spans((100, 150, 400, 30)),
            [(SpanKind::Transfer, 70, 100), (SpanKind::Queue, 100, 150), (SpanKind::Service, 150, 400)]
        );
        assert_eq!(spans((100, 150, -1, 0)), [(SpanKind::Queue, 100, 150), (SpanKind::Service, 150, -1)]);
        assert_eq!(spans((100, -1, -1, 0)), [(SpanKind::Queue, 100, -1)]);
    }
}
