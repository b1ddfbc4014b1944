//! What a request table keeps of each request's stages: [`StageSums`] and [`attributed_client`].
//!
//! A run takes each request as it finishes (`RequestColumns.add`, hub/metrics/request_table.py):
//! its queueing and whether it started, the client its latency is attributed to, the start of each
//! of its trace spans, and integer sums per stage kind (summary.json's `stages`) and per template and
//! component (`breakdown_s`, HERMES Fig. 9). One pass over the request's stage records here does all
//! of it, where Python built a tuple per stage and walked them four times. Integer sums are exact, so
//! the finishing order does not change them; every map keeps its keys in the order they first came,
//! as the Python dicts it replaces did (a plot's legend follows it).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet, PyString};

use crate::records::{stage_spans, RequestRecord, StageRecord};
use crate::rows::RowBuffer;

/// A stage kind that counts as the end of decoding: the latency is attributed to its client.
const DECODE: &str = "decode";
/// The components every template's breakdown starts with.
const QUEUE: &str = "queue";
const COMMUNICATION: &str = "communication";

/// Values by string key, in the order the keys first came (a run has a few kinds and templates: a
/// linear search beats hashing, and the order is the Python dicts').
#[derive(Clone, Debug, Default, PartialEq)]
struct Ordered<V> {
    entries: Vec<(String, V)>,
}

impl<V: Default> Ordered<V> {
    /// The value of `key`, added with its default at the end if new.
    fn entry(&mut self, key: &str) -> &mut V {
        let index = match self.entries.iter().position(|(k, _)| k == key) {
            Some(index) => index,
            None => {
                self.entries.push((key.to_owned(), V::default()));
                self.entries.len() - 1
            }
        };
        &mut self.entries[index].1
    }
}

/// One stage's fields, read once from its record.
struct Stage<'a> {
    kind: &'a str,
    enqueue_ns: i64,
    start_ns: i64,
    end_ns: i64,
    transfer_ns: i64,
}

/// The top-level kind of a sub-stage (`rag` of `rag:embedding`); None for a top-level stage.
fn parent(kind: &str) -> Option<&str> {
    kind.split_once(':').map(|(head, _)| head)
}

/// Count, queue, service and transfer ns per stage kind; per template, ns per latency component;
/// finished requests per template; every stage kind seen; whether some request names a LoRA adapter.
///
/// Args (all optional: a table crossing processes is rebuilt from them, see `__reduce__`):
///     stages: kind -> [count, queue ns, service ns, transfer ns] of its ended top-level stages.
///     breakdown: template -> component (`queue`, `communication`, a stage kind) -> ns, over finished requests.
///     finished: template -> finished requests.
///     kinds: every stage kind seen, sub-stages and unended ones included.
///     has_lora: some request named a LoRA adapter.
#[pyclass(module = "cosim_core")]
#[derive(Clone, Default)]
pub struct StageSums {
    stages: Ordered<[i64; 4]>,
    breakdown: Ordered<Ordered<i64>>,
    finished: Ordered<i64>,
    kinds: Ordered<()>,
    /// Some request named a LoRA adapter.
    #[pyo3(get)]
    has_lora: bool,
}

#[pymethods]
impl StageSums {
    #[new]
    #[pyo3(signature = (stages = None, breakdown = None, finished = None, kinds = None, has_lora = false))]
    fn new(
        stages: Option<Vec<(String, [i64; 4])>>,
        breakdown: Option<Vec<(String, Vec<(String, i64)>)>>,
        finished: Option<Vec<(String, i64)>>,
        kinds: Option<Vec<String>>,
        has_lora: bool,
    ) -> Self {
        StageSums {
            stages: Ordered { entries: stages.unwrap_or_default() },
            breakdown: Ordered {
                entries: breakdown
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(template, totals)| (template, Ordered { entries: totals }))
                    .collect(),
            },
            finished: Ordered { entries: finished.unwrap_or_default() },
            kinds: Ordered { entries: kinds.unwrap_or_default().into_iter().map(|kind| (kind, ())).collect() },
            has_lora,
        }
    }

    /// Adds a request (finished or not: only its ended stages are summed, and only a finished one's
    /// breakdown), under `template` (default: its own) in the breakdown. Appends the start of each
    /// of its trace spans (a transfer's, a stage's queueing and its service, as
    /// `cosim.hub.metrics.trace` draws them) to `spans`, if given.
    ///
    /// Returns:
    ///     its queueing ns over the stages that started, whether one started (1 or 0), and the client
    ///     its latency is attributed to ([`attributed_client`]).
    #[pyo3(signature = (record, spans = None, template = None))]
    fn add(
        &mut self,
        py: Python<'_>,
        record: &Bound<'_, RequestRecord>,
        spans: Option<&Bound<'_, RowBuffer>>,
        template: Option<&str>,
    ) -> PyResult<(i64, i64, Py<PyAny>)> {
        let record = record.borrow();
        let stages = stage_records(record.stages.bind(py))?;
        let borrowed = stages.iter().map(|stage| stage.borrow()).collect::<Vec<_>>();
        let kinds = stage_kinds(py, &borrowed)?;
        let stages = borrowed
            .iter()
            .zip(&kinds)
            .map(|(stage, kind)| Stage {
                kind,
                enqueue_ns: stage.enqueue_ns,
                start_ns: stage.start_ns,
                end_ns: stage.end_ns,
                transfer_ns: stage.transfer_ns,
            })
            .collect::<Vec<_>>();

        let (mut queue_ns, mut started) = (0, 0);
        let mut starts = Vec::with_capacity(3 * stages.len());
        for stage in &stages {
            starts.extend(
                stage_spans(stage.enqueue_ns, stage.start_ns, stage.end_ns, stage.transfer_ns)
                    .map(|(_, start, _)| start),
            );
            if stage.start_ns >= 0 {
                queue_ns += stage.start_ns - stage.enqueue_ns;
                started = 1;
            }
        }
        if let Some(spans) = spans {
            let mut spans = spans.borrow_mut();
            for start in starts {
                spans.push(py, &[start])?;
            }
        }

        self.add_stage_sums(&stages);
        if record.finish_ns >= 0 {
            let template = match template {
                Some(template) => template.to_owned(),
                None => record.template.bind(py).downcast::<PyString>()?.to_str()?.to_owned(),
            };
            add_breakdown(self.breakdown.entry(&template), &stages);
            *self.finished.entry(&template) += 1;
        }
        for stage in &stages {
            self.kinds.entry(stage.kind);
        }
        self.has_lora |= !record.lora.is_none(py);
        let owner = attributed(&kinds).map_or_else(|| py.None(), |index| borrowed[index].client.clone_ref(py));
        Ok((queue_ns, started, owner))
    }

    /// These sums and `other`'s (keys new to these come after theirs, in `other`'s order).
    fn merged(&self, other: &StageSums) -> StageSums {
        let mut out = self.clone();
        for (kind, sums) in &other.stages.entries {
            let mine = out.stages.entry(kind);
            for (a, b) in mine.iter_mut().zip(sums) {
                *a += b;
            }
        }
        for (template, totals) in &other.breakdown.entries {
            let mine = out.breakdown.entry(template);
            for (component, ns) in &totals.entries {
                *mine.entry(component) += ns;
            }
        }
        for (template, count) in &other.finished.entries {
            *out.finished.entry(template) += count;
        }
        for (kind, ()) in &other.kinds.entries {
            out.kinds.entry(kind);
        }
        out.has_lora |= other.has_lora;
        out
    }

    /// kind -> [count, queue ns, service ns, transfer ns] of the ended top-level stages.
    fn stages<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (kind, sums) in &self.stages.entries {
            out.set_item(kind, PyList::new(py, sums)?)?;
        }
        Ok(out)
    }

    /// template -> component -> ns, over finished requests (templates in the order they first finished).
    fn breakdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (template, totals) in &self.breakdown.entries {
            let inner = PyDict::new(py);
            for (component, ns) in &totals.entries {
                inner.set_item(component, ns)?;
            }
            out.set_item(template, inner)?;
        }
        Ok(out)
    }

    /// template -> finished requests.
    fn finished<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (template, count) in &self.finished.entries {
            out.set_item(template, count)?;
        }
        Ok(out)
    }

    /// Every stage kind seen.
    fn kinds<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PySet>> {
        PySet::new(py, self.kinds.entries.iter().map(|(kind, ())| kind))
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(
        Bound<'py, pyo3::types::PyType>,
        (Vec<(String, [i64; 4])>, Vec<(String, Vec<(String, i64)>)>, Vec<(String, i64)>, Vec<String>, bool),
    )> {
        let me = slf.borrow();
        let breakdown = me.breakdown.entries.iter().map(|(t, totals)| (t.clone(), totals.entries.clone())).collect();
        let kinds = me.kinds.entries.iter().map(|(kind, ())| kind.clone()).collect();
        Ok((slf.get_type(), (me.stages.entries.clone(), breakdown, me.finished.entries.clone(), kinds, me.has_lora)))
    }
}

impl StageSums {
    /// Adds the count, queue, service and transfer ns of the ended top-level stages, per kind.
    fn add_stage_sums(&mut self, stages: &[Stage<'_>]) {
        for stage in stages {
            if stage.end_ns < 0 || parent(stage.kind).is_some() {
                continue;
            }
            let entry = self.stages.entry(stage.kind);
            entry[0] += 1;
            entry[1] += stage.start_ns - stage.enqueue_ns;
            entry[2] += stage.end_ns - stage.start_ns;
            entry[3] += stage.transfer_ns;
        }
    }
}

/// Adds a finished request's components, ns: `queue` (every ended top-level stage's wait) and
/// `communication` (their transfers) first, then each stage kind's service time; a stage split into
/// sub-stages (`rag` into `rag:*`) is counted through its sub-stages.
fn add_breakdown(totals: &mut Ordered<i64>, stages: &[Stage<'_>]) {
    let split = stages.iter().filter_map(|stage| parent(stage.kind)).collect::<Vec<_>>();
    totals.entry(QUEUE);
    totals.entry(COMMUNICATION);
    let (mut queue_ns, mut communication_ns) = (0, 0);
    for stage in stages {
        if stage.end_ns < 0 {
            continue;
        }
        if parent(stage.kind).is_none() {
            queue_ns += stage.start_ns - stage.enqueue_ns;
            communication_ns += stage.transfer_ns;
            if split.contains(&stage.kind) {
                continue;
            }
        }
        *totals.entry(stage.kind) += stage.end_ns - stage.start_ns;
    }
    *totals.entry(QUEUE) += queue_ns;
    *totals.entry(COMMUNICATION) += communication_ns;
}

/// A request's stages (its `stages` list) as the core's records.
fn stage_records<'py>(stages: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, StageRecord>>> {
    stages.try_iter()?.map(|item| Ok(item?.downcast_into::<StageRecord>()?)).collect()
}

/// Each stage's kind, as text.
fn stage_kinds<'a>(py: Python<'a>, stages: &'a [PyRef<'_, StageRecord>]) -> PyResult<Vec<&'a str>> {
    stages.iter().map(|stage| Ok(stage.kind.bind(py).downcast::<PyString>()?.to_str()?)).collect()
}

/// The index of the stage a request's latency is attributed to: its last decode stage, else its
/// last stage; None with no stages.
fn attributed(kinds: &[&str]) -> Option<usize> {
    kinds.iter().rposition(|kind| *kind == DECODE).or(kinds.len().checked_sub(1))
}

/// The client a request's latency is attributed to: that of its last decode stage, else of its
/// last stage; None with no stages.
#[pyfunction]
pub fn attributed_client(py: Python<'_>, record: &Bound<'_, RequestRecord>) -> PyResult<Py<PyAny>> {
    let stages = stage_records(&record.borrow().stages.clone_ref(py).into_bound(py))?;
    let borrowed = stages.iter().map(|stage| stage.borrow()).collect::<Vec<_>>();
    let kinds = stage_kinds(py, &borrowed)?;
    Ok(attributed(&kinds).map_or_else(|| py.None(), |index| borrowed[index].client.clone_ref(py)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(kind: &str, enqueue_ns: i64, start_ns: i64, end_ns: i64, transfer_ns: i64) -> Stage<'_> {
        Stage { kind, enqueue_ns, start_ns, end_ns, transfer_ns }
    }

    #[test]
    fn the_breakdown_counts_a_split_stage_through_its_sub_stages_and_skips_unended_ones() {
        let stages = [
            stage("rag", 0, 5, 30, 0),
            stage("rag:embedding", 5, 5, 12, 0),
            stage("rag:retrieval", 12, 12, 30, 0),
            stage("prefill", 40, 50, 70, 10),
            stage("decode", 70, 75, -1, 0),
        ];
        let mut totals = Ordered::default();
        add_breakdown(&mut totals, &stages);
        // queue: 5 (rag) + 10 (prefill); the unended decode counts for nothing
        let expected =
            [("queue", 15), ("communication", 10), ("rag:embedding", 7), ("rag:retrieval", 18), ("prefill", 20)];
        assert_eq!(totals.entries, expected.map(|(k, v)| (k.to_owned(), v)).to_vec());
    }

    #[test]
    fn stage_sums_take_ended_top_level_stages_per_kind_in_first_seen_order() {
        let mut sums = StageSums::default();
        sums.add_stage_sums(&[
            stage("prefill", 0, 4, 10, 3),
            stage("rag:embedding", 0, 1, 2, 0),
            stage("decode", 10, 10, -1, 0),
        ]);
        sums.add_stage_sums(&[stage("decode", 10, 12, 20, 1), stage("prefill", 20, 20, 25, 0)]);
        assert_eq!(
            sums.stages.entries,
            vec![("prefill".to_owned(), [2, 4, 11, 3]), ("decode".to_owned(), [1, 2, 8, 1])]
        );
    }

    #[test]
    fn the_latency_goes_to_the_last_decode_stage_else_the_last_stage() {
        assert_eq!(attributed(&["prefill", "decode", "postprocess"]), Some(1));
        assert_eq!(attributed(&["decode", "prefill", "decode", "reasoning"]), Some(2));
        assert_eq!(attributed(&["prefill", "reasoning"]), Some(1));
        assert_eq!(attributed(&[]), None);
    }

    #[test]
    fn merging_adds_the_other_sums_and_appends_their_new_keys() {
        let mut a = StageSums::default();
        *a.finished.entry("chat") += 2;
        a.stages.entry("prefill")[0] += 1;
        let mut b = StageSums::default();
        *b.finished.entry("rag") += 1;
        *b.finished.entry("chat") += 1;
        b.stages.entry("decode")[2] += 5;
        b.has_lora = true;
        let merged = a.merged(&b);
        assert_eq!(merged.finished.entries, vec![("chat".to_owned(), 3), ("rag".to_owned(), 1)]);
        assert_eq!(
            merged.stages.entries,
            vec![("prefill".to_owned(), [1, 0, 0, 0]), ("decode".to_owned(), [0, 0, 5, 0])]
        );
        assert!(merged.has_lora);
    }
}
