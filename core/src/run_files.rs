//! The rows of the run folder's big files as text: trace.json's events, requests.csv's and
//! clients.csv's rows (hub/metrics/trace.py and tables.py write the files, a chunk of rows a call).
//!
//! A row costs no Python: numbers come from the records' fields and numpy columns (read through the
//! buffer protocol) and are formatted by [`crate::text`]. Strings (client, model, stage kind, LoRA
//! and class names) are encoded by Python, once per distinct string ([`Encoded`]): `json.dumps` for
//! the trace, csv's quoting for the tables, so their escaping is Python's own.

use crate::records::{stage_spans, RequestRecord, SpanKind, StageRecord};
use crate::text::{push_g9, push_int, push_seconds, push_us};
use pyo3::buffer::{Element, PyBuffer};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use std::fmt::Write;

/// Between two events of trace.json (one a line).
const EVENT_SEPARATOR: &str = ",\n";

/// A numpy column's values (any contiguity; the caller gives int64 or float64 arrays).
fn column<T: Element + Copy>(array: &Bound<'_, PyAny>) -> PyResult<Vec<T>> {
    PyBuffer::<T>::get(array)?.to_vec(array.py())
}

/// Fails unless every column holds `n` values (`lengths`: the others').
fn equal_lengths(n: usize, lengths: &[usize]) -> PyResult<()> {
    if lengths.iter().any(|&m| m != n) {
        return Err(pyo3::exceptions::PyValueError::new_err("columns of different lengths"));
    }
    Ok(())
}

/// Python's text for values (strings mostly), computed once per distinct value and kept.
struct Encoded {
    encode: Py<PyAny>,
    texts: Py<PyDict>,
}

impl Encoded {
    fn new(py: Python<'_>, encode: Py<PyAny>) -> Self {
        Encoded { encode, texts: PyDict::new(py).unbind() }
    }

    /// Appends `encode(value)`'s text.
    fn push(&self, out: &mut String, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = value.py();
        let texts = self.texts.bind(py);
        let text = match texts.get_item(value)? {
            Some(text) => text,
            None => {
                let text = self.encode.bind(py).call1((value,))?;
                texts.set_item(value, &text)?;
                text
            }
        };
        out.push_str(text.downcast::<PyString>()?.to_str()?);
        Ok(())
    }
}

/// One request's stages of one kind, summed as requests.csv's five cells for that kind give them.
struct KindSums<'py> {
    /// Clients in the order they first come, without repeats.
    clients: Vec<Bound<'py, PyAny>>,
    stages: usize,
    /// (sum of queueing, earliest start) over the stages that started; None: none did.
    started: Option<(i64, i64)>,
    /// (ended stages, latest end).
    ended: (usize, i64),
    transfer_ns: i64,
}

impl<'py> KindSums<'py> {
    fn new() -> Self {
        KindSums { clients: Vec::new(), stages: 0, started: None, ended: (0, i64::MIN), transfer_ns: 0 }
    }

    fn add(&mut self, stage: &StageRecord, client: Bound<'py, PyAny>) -> PyResult<()> {
        self.stages += 1;
        let name = client.downcast::<PyString>()?.to_str()?;
        let mut seen = false;
        for known in &self.clients {
            if known.downcast::<PyString>()?.to_str()? == name {
                seen = true;
                break;
            }
        }
        if !seen {
            self.clients.push(client);
        }
        if stage.start_ns >= 0 {
            let queue = stage.start_ns - stage.enqueue_ns;
            self.started = Some(match self.started {
                Some((sum, first)) => (sum + queue, first.min(stage.start_ns)),
                None => (queue, stage.start_ns),
            });
        }
        if stage.end_ns >= 0 {
            self.ended = (self.ended.0 + 1, self.ended.1.max(stage.end_ns));
        }
        self.transfer_ns += stage.transfer_ns;
        Ok(())
    }

    /// The clients joined with ";" (a Python string).
    fn client(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.clients.len() == 1 {
            return Ok(self.clients[0].clone());
        }
        let names = self.clients.iter().map(|c| Ok(c.downcast::<PyString>()?.to_str()?.to_owned()));
        let names = names.collect::<PyResult<Vec<String>>>()?;
        Ok(PyString::new(py, &names.join(";")).into_any())
    }

    /// The latest end, where every stage ended.
    fn end_ns(&self) -> Option<i64> {
        (self.ended.0 == self.stages).then_some(self.ended.1)
    }
}

/// A request's stages summed per kind, in `kinds` order (None: no stage of that kind).
fn kind_sums<'py>(record: &Bound<'py, RequestRecord>, kinds: &[String]) -> PyResult<Vec<Option<KindSums<'py>>>> {
    let py = record.py();
    let mut sums: Vec<Option<KindSums<'py>>> = kinds.iter().map(|_| None).collect();
    let stages = record.borrow().stages.bind(py).clone();
    for stage in stages.try_iter()? {
        let stage = stage?;
        let stage = stage.downcast::<StageRecord>()?.borrow();
        let kind = stage.kind.bind(py);
        let kind = kind.downcast::<PyString>()?.to_str()?;
        if let Some(index) = kinds.iter().position(|k| k == kind) {
            sums[index].get_or_insert_with(KindSums::new).add(&stage, stage.client.bind(py).clone())?;
        }
    }
    Ok(sums)
}

/// requests.csv's five cells per stage kind of one request (in `kinds` order, flat), as values:
/// client names joined with ";", summed queueing ns, earliest start ns, latest end ns, summed transfer
/// ns; None where there is no value (requests.parquet's rows; requests.csv's text comes from the same sums).
#[pyfunction]
pub fn stage_cells<'py>(record: &Bound<'py, RequestRecord>, kinds: Vec<String>) -> PyResult<Bound<'py, PyList>> {
    let py = record.py();
    let cells = PyList::empty(py);
    for sums in kind_sums(record, &kinds)? {
        match sums {
            None => {
                for _ in 0..5 {
                    cells.append(py.None())?;
                }
            }
            Some(sums) => {
                cells.append(sums.client(py)?)?;
                cells.append(sums.started.map(|s| s.0))?;
                cells.append(sums.started.map(|s| s.1))?;
                cells.append(sums.end_ns())?;
                cells.append(sums.transfer_ns)?;
            }
        }
    }
    Ok(cells)
}

/// requests.csv's rows, a chunk of requests at a time (hub/metrics/tables.py has the columns).
///
/// Args:
///     kinds: the stage kinds with columns, in order.
///     with_lora, with_class, with_sessions: the optional columns written.
///     quote: a string's csv cell (csv.writer's quoting), called once per distinct string.
#[pyclass(module = "cosim_core")]
pub struct RequestsCsv {
    kinds: Vec<String>,
    with_lora: bool,
    with_class: bool,
    with_sessions: bool,
    cells: Encoded,
}

impl RequestsCsv {
    /// Appends a name's cell: empty for None (or, with `empty_if_false`, for "" too).
    fn push_name(&self, out: &mut String, value: &Bound<'_, PyAny>, empty_if_false: bool) -> PyResult<()> {
        if value.is_none() || (empty_if_false && !value.is_truthy()?) {
            return Ok(());
        }
        self.cells.push(out, value)
    }

    fn push_row(&self, out: &mut String, record: &Bound<'_, RequestRecord>, floats: [f64; 5]) -> PyResult<()> {
        let py = record.py();
        {
            let r = record.borrow();
            push_int(out, r.id);
            out.push(',');
            self.push_name(out, r.model.bind(py), false)?;
            out.push(',');
            push_seconds(out, r.arrival_ns);
            for value in [r.input_tokens, r.output_tokens, r.generated_tokens, r.cached_tokens] {
                out.push(',');
                push_int(out, value);
            }
            for x in floats {
                out.push(',');
                if !x.is_nan() {
                    push_g9(out, x);
                }
            }
            out.push(',');
            push_int(out, r.preemptions);
            if self.with_lora {
                out.push(',');
                self.push_name(out, r.lora.bind(py), true)?;
            }
            if self.with_class {
                out.push(',');
                self.push_name(out, r.cls.bind(py), true)?;
            }
            if self.with_sessions {
                for value in [r.session, r.turn] {
                    out.push(',');
                    push_int(out, value);
                }
            }
        }
        for sums in kind_sums(record, &self.kinds)? {
            match sums {
                None => out.push_str(",,,,,"),
                Some(sums) => {
                    out.push(',');
                    self.cells.push(out, &sums.client(py)?)?;
                    for ns in
                        [sums.started.map(|s| s.0), sums.started.map(|s| s.1), sums.end_ns(), Some(sums.transfer_ns)]
                    {
                        out.push(',');
                        if let Some(ns) = ns {
                            push_seconds(out, ns);
                        }
                    }
                }
            }
        }
        out.push('\n');
        Ok(())
    }
}

#[pymethods]
impl RequestsCsv {
    #[new]
    fn new(
        py: Python<'_>,
        kinds: Vec<String>,
        with_lora: bool,
        with_class: bool,
        with_sessions: bool,
        quote: Py<PyAny>,
    ) -> Self {
        RequestsCsv { kinds, with_lora, with_class, with_sessions, cells: Encoded::new(py, quote) }
    }

    /// The rows of `records` (in order), each ending in "\n"; `ttft_s` .. `queue_s`: their float
    /// columns (float64 arrays aligned with `records`; NaN: an empty cell).
    fn rows(
        &self,
        records: &Bound<'_, PyAny>,
        ttft_s: &Bound<'_, PyAny>,
        tpot_s: &Bound<'_, PyAny>,
        e2e_s: &Bound<'_, PyAny>,
        tbt_max_s: &Bound<'_, PyAny>,
        queue_s: &Bound<'_, PyAny>,
    ) -> PyResult<String> {
        let columns = [ttft_s, tpot_s, e2e_s, tbt_max_s, queue_s].map(column::<f64>);
        let [ttft, tpot, e2e, tbt, queue] = columns;
        let (ttft, tpot, e2e, tbt, queue) = (ttft?, tpot?, e2e?, tbt?, queue?);
        let mut out = String::new();
        for (i, record) in records.try_iter()?.enumerate() {
            let record = record?;
            let record = record.downcast::<RequestRecord>()?;
            if [&ttft, &tpot, &e2e, &tbt, &queue].iter().any(|c| i >= c.len()) {
                return Err(pyo3::exceptions::PyValueError::new_err("more records than metric values"));
            }
            let floats = [ttft[i], tpot[i], e2e[i], tbt[i], queue[i]];
            self.push_row(&mut out, record, floats)?;
        }
        Ok(out)
    }
}

/// clients.csv's rows of one client (`name_cell`: its name as a csv cell), from its (downsampled)
/// int64 columns and float64 `num_seqs`, each row ending in "\n".
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn client_rows(
    name_cell: &str,
    start_ns: &Bound<'_, PyAny>,
    end_ns: &Bound<'_, PyAny>,
    steps: &Bound<'_, PyAny>,
    num_seqs: &Bound<'_, PyAny>,
    prefill_tokens: &Bound<'_, PyAny>,
    decode_tokens: &Bound<'_, PyAny>,
    kv_blocks_used: &Bound<'_, PyAny>,
    num_waiting: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let (start, end, steps) = (column::<i64>(start_ns)?, column::<i64>(end_ns)?, column::<i64>(steps)?);
    let seqs = column::<f64>(num_seqs)?;
    let (prefill, decode) = (column::<i64>(prefill_tokens)?, column::<i64>(decode_tokens)?);
    let (kv, waiting) = (column::<i64>(kv_blocks_used)?, column::<i64>(num_waiting)?);
    let n = start.len();
    equal_lengths(n, &[end.len(), steps.len(), seqs.len(), prefill.len(), decode.len(), kv.len(), waiting.len()])?;
    let mut out = String::with_capacity(n * 64);
    for i in 0..n {
        out.push_str(name_cell);
        out.push(',');
        push_seconds(&mut out, start[i]);
        out.push(',');
        push_seconds(&mut out, end[i]);
        out.push(',');
        push_int(&mut out, steps[i]);
        out.push(',');
        if !seqs[i].is_nan() {
            push_g9(&mut out, seqs[i]);
        }
        for value in [prefill[i], decode[i], kv[i], waiting[i]] {
            out.push(',');
            push_int(&mut out, value);
        }
        out.push('\n');
    }
    Ok(out)
}

/// A step's slice name by the tokens in it.
fn step_name(prefill: i64, decode: i64) -> &'static str {
    match (prefill != 0, decode != 0) {
        (true, true) => "mixed",
        (true, false) => "prefill",
        (false, true) => "decode",
        (false, false) => "step",
    }
}

/// Appends a separator and a counter ("C") event: `{"args":{<key>:<value>},"name":<name>,...}`.
fn push_counter(out: &mut String, name: &str, key: &str, value: i64, pid_text: &str, ts: &str) {
    for piece in [EVENT_SEPARATOR, "{\"args\":{\"", key, "\":"] {
        out.push_str(piece);
    }
    push_int(out, value);
    for piece in ["},\"name\":\"", name, "\",\"ph\":\"C\",\"pid\":", pid_text, ",\"ts\":", ts, "}"] {
        out.push_str(piece);
    }
}

/// trace.json's events of a client's steps (process `pid`), three per step (a slice and two counter
/// samples), as `json` writes them (keys sorted, no spaces), joined with ",\n"; the int64 columns
/// hold the steps to write.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn step_events(
    py: Python<'_>,
    pid: i64,
    start_ns: &Bound<'_, PyAny>,
    end_ns: &Bound<'_, PyAny>,
    num_seqs: &Bound<'_, PyAny>,
    prefill_tokens: &Bound<'_, PyAny>,
    decode_tokens: &Bound<'_, PyAny>,
    kv_blocks_used: &Bound<'_, PyAny>,
    num_waiting: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let (start, end, seqs) = (column::<i64>(start_ns)?, column::<i64>(end_ns)?, column::<i64>(num_seqs)?);
    let (prefill, decode) = (column::<i64>(prefill_tokens)?, column::<i64>(decode_tokens)?);
    let (kv, waiting) = (column::<i64>(kv_blocks_used)?, column::<i64>(num_waiting)?);
    let n = start.len();
    equal_lengths(n, &[end.len(), seqs.len(), prefill.len(), decode.len(), kv.len(), waiting.len()])?;
    let mut out = String::with_capacity(n * 400);
    let mut ts = String::new();
    let pid_text = pid.to_string();
    for i in 0..n {
        if i > 0 {
            out.push_str(EVENT_SEPARATOR);
        }
        ts.clear();
        push_us(py, &mut ts, start[i])?;
        let fields = [
            ("{\"args\":{\"decode_tokens\":", decode[i]),
            (",\"kv_blocks_used\":", kv[i]),
            (",\"num_seqs\":", seqs[i]),
            (",\"num_waiting\":", waiting[i]),
            (",\"prefill_tokens\":", prefill[i]),
        ];
        for (key, value) in fields {
            out.push_str(key);
            push_int(&mut out, value);
        }
        out.push_str("},\"cat\":\"step\",\"dur\":");
        push_us(py, &mut out, end[i] - start[i])?;
        for piece in [
            ",\"name\":\"",
            step_name(prefill[i], decode[i]),
            "\",\"ph\":\"X\",\"pid\":",
            &pid_text,
            ",\"tid\":1,\"ts\":",
            &ts,
            "}",
        ] {
            out.push_str(piece);
        }
        push_counter(&mut out, "kv_blocks_used", "blocks", kv[i], &pid_text, &ts);
        push_counter(&mut out, "num_waiting", "requests", waiting[i], &pid_text, &ts);
    }
    Ok(out)
}

/// trace.json's events of requests: per request with events, its thread's name and sort index, then a
/// span per stage's transfer (where it had one), queueing and service, in stage order; a span still
/// open (no end) is a begin ("B") event.
///
/// Args:
///     pid: the ``requests`` process.
///     cutoff_ns: spans starting at or after it are left out (None: none are).
///     encode: a value's JSON text (`json.dumps`), called once per distinct stage kind and client.
#[pyclass(module = "cosim_core")]
pub struct RequestSpans {
    pid: i64,
    cutoff_ns: Option<i64>,
    json: Encoded,
}

impl RequestSpans {
    /// Appends one span's event (`name`: JSON text; `args`: the args object's text).
    #[allow(clippy::too_many_arguments)]
    fn push_span(
        &self,
        py: Python<'_>,
        out: &mut String,
        id: i64,
        start: i64,
        end: i64,
        name: &str,
        cat: &str,
        args: &str,
    ) -> PyResult<bool> {
        if self.cutoff_ns.is_some_and(|cutoff| start >= cutoff) {
            return Ok(false);
        }
        out.push_str(EVENT_SEPARATOR);
        let _ = write!(out, "{{\"args\":{args},\"cat\":\"{cat}\",");
        if end >= 0 {
            out.push_str("\"dur\":");
            push_us(py, out, end - start)?;
            out.push(',');
        }
        let ph = if end >= 0 { "X" } else { "B" };
        let _ = write!(out, "\"name\":{name},\"ph\":\"{ph}\",\"pid\":{},\"tid\":{id},\"ts\":", self.pid);
        push_us(py, out, start)?;
        out.push('}');
        Ok(true)
    }

    /// Appends a request's events, each after a separator; returns whether it had any.
    fn push_request(&self, out: &mut String, record: &Bound<'_, RequestRecord>) -> PyResult<bool> {
        let py = record.py();
        let r = record.borrow();
        let id = r.id;
        let mut events = String::new();
        let mut any = false;
        let (mut args, mut stage_name) = (String::new(), String::new());
        for stage in r.stages.bind(py).try_iter()? {
            let stage = stage?;
            let stage = stage.downcast::<StageRecord>()?.borrow();
            args.clear();
            args.push_str("{\"client\":");
            self.json.push(&mut args, stage.client.bind(py))?;
            let client_args_len = args.len();
            for (kind, start, end) in stage_spans(stage.enqueue_ns, stage.start_ns, stage.end_ns, stage.transfer_ns) {
                args.truncate(client_args_len);
                let (name, cat) = match kind {
                    SpanKind::Transfer => ("\"transfer\"", "transfer"),
                    SpanKind::Queue => ("\"queue\"", "queue"),
                    SpanKind::Service => {
                        let _ =
                            write!(args, ",\"input_tokens\":{},\"output_tokens\":{}", r.input_tokens, r.output_tokens);
                        stage_name.clear();
                        self.json.push(&mut stage_name, stage.kind.bind(py))?;
                        (stage_name.as_str(), "stage")
                    }
                };
                let _ = write!(args, ",\"request\":{id}}}");
                any |= self.push_span(py, &mut events, id, start, end, name, cat, &args)?;
            }
        }
        if any {
            let pid = self.pid;
            let _ = write!(
                out,
                "{EVENT_SEPARATOR}{{\"args\":{{\"name\":\"request {id}\"}},\"name\":\"thread_name\",\
                                 \"ph\":\"M\",\"pid\":{pid},\"tid\":{id}}}"
            );
            let _ = write!(
                out,
                "{EVENT_SEPARATOR}{{\"args\":{{\"sort_index\":{id}}},\"name\":\"thread_sort_index\",\
                                 \"ph\":\"M\",\"pid\":{pid},\"tid\":{id}}}"
            );
            out.push_str(&events);
        }
        Ok(any)
    }
}

#[pymethods]
impl RequestSpans {
    #[new]
    #[pyo3(signature = (pid, cutoff_ns, encode))]
    fn new(py: Python<'_>, pid: i64, cutoff_ns: Option<i64>, encode: Py<PyAny>) -> Self {
        RequestSpans { pid, cutoff_ns, json: Encoded::new(py, encode) }
    }

    /// The events of `records` (in order), joined with ",\n" ("" when none has any).
    fn events(&self, records: &Bound<'_, PyAny>) -> PyResult<String> {
        let mut out = String::new();
        for record in records.try_iter()? {
            let record = record?;
            self.push_request(&mut out, record.downcast::<RequestRecord>()?)?;
        }
        Ok(out.strip_prefix(EVENT_SEPARATOR).map(str::to_owned).unwrap_or(out))
    }
}

/// Registers the functions and classes of this module.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<RequestsCsv>()?;
    module.add_class::<RequestSpans>()?;
    module.add_function(wrap_pyfunction!(client_rows, module)?)?;
    module.add_function(wrap_pyfunction!(step_events, module)?)?;
    module.add_function(wrap_pyfunction!(stage_cells, module)?)?;
    module.add_function(wrap_pyfunction!(crate::text::float_repr, module)?)?;
    module.add_function(wrap_pyfunction!(crate::text::float_text, module)?)?;
    module.add_function(wrap_pyfunction!(crate::text::ns_to_s_text, module)?)?;
    Ok(())
}
