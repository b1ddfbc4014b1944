//! What a step did to its requests, written on their records without a Python loop over its sequences.
//!
//! An LLM client (Python's `LLMClient`) records every step on the request and stage records its
//! sequences point to (`RequestRecord`, `StageRecord`, plain Python objects read by the metrics):
//! when a step begins, the prompt tokens its admitted sequences found cached, their stages' start
//! and the preemptions it made ([`record_start`]); when it ends, each sampled token: the request's
//! token count, first-token and last-token times, longest gap and, where kept, every gap, and the
//! client's count of gaps ([`record_tokens`]); and a decode run's steps applied in bulk
//! ([`record_run`]). What only some configurations need stays a Python callback, called from here
//! only when it happens (a new decode stage at a request's first token).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::batch::{ScheduledBatch, StepOutcome};
use crate::sequence::Sequence;

/// An integer attribute of a Python record.
#[inline]
fn get(record: &Bound<'_, PyAny>, name: &Bound<'_, pyo3::types::PyString>) -> PyResult<i64> {
    record.getattr(name)?.extract()
}

/// Adds `count` to an integer attribute of a Python record.
#[inline]
fn add(record: &Bound<'_, PyAny>, name: &Bound<'_, pyo3::types::PyString>, count: i64) -> PyResult<()> {
    record.setattr(name, get(record, name)? + count)
}

/// Records that the step of `batch` began at `now_ns` (a decode run's steps, whose sequences have all
/// started, are not recorded): the prompt tokens its admitted sequences found in the prefix cache
/// (`cached_tokens`; a readmission after a preemption is not a prompt's hit), its sequences' stages'
/// `start_ns` where not set, and a preemption on the request of each sequence it preempted.
#[pyfunction]
pub fn record_start(batch: &Bound<'_, ScheduledBatch>, now_ns: i64) -> PyResult<()> {
    let py = batch.py();
    let start_ns = intern!(py, "start_ns");
    batch.borrow_mut().ensure(py)?;
    let batch = batch.borrow();
    for (seq, cached) in &batch.cache_hits {
        let seq = seq.borrow(py);
        if get(seq.stage.bind(py), start_ns)? < 0 {
            add(seq.request.bind(py), intern!(py, "cached_tokens"), *cached)?;
        }
    }
    for seq in &batch.seqs {
        let stage = seq.borrow(py).stage.clone_ref(py).into_bound(py);
        if get(&stage, start_ns)? < 0 {
            stage.setattr(start_ns, now_ns)?;
        }
    }
    for seq in &batch.preempted {
        add(seq.borrow(py).request.bind(py), intern!(py, "preemptions"), 1)?;
    }
    Ok(())
}

/// Counts of inter-token gaps to add to a client's `token_gaps` (gap ns -> tokens), gathered a run of
/// equal gaps at a time (a step gives most of its sequences the same gap) and added in the order they
/// came, so that the dict's keys are in the order counting them one by one gives.
struct GapCounts<'py> {
    gaps: &'py Bound<'py, PyDict>,
    pending: Option<(i64, i64)>,
}

impl<'py> GapCounts<'py> {
    fn count(&mut self, gap: i64) -> PyResult<()> {
        match &mut self.pending {
            Some((last, tokens)) if *last == gap => *tokens += 1,
            _ => {
                self.flush()?;
                self.pending = Some((gap, 1));
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> PyResult<()> {
        if let Some((gap, tokens)) = self.pending.take() {
            let before: i64 = match self.gaps.get_item(gap)? {
                Some(count) => count.extract()?,
                None => 0,
            };
            self.gaps.set_item(gap, before + tokens)?;
        }
        Ok(())
    }
}

/// Records the tokens sampled at the end of a step (`outcome.sampled`, at `now_ns`) on their requests:
/// `generated_tokens`; a request's first token its `first_token_ns` (and an empty `itl_ns` where
/// `keep_itls`), with `begin_decode(seq, now_ns)` called where the sequence goes on decoding (its
/// stage splits); a later one the gap since its last (`max_tbt_ns`, `itl_ns` where kept, and
/// `token_gaps`, gap ns -> tokens, unless parallel paths of the request sampled in this step already:
/// one path's gap counts, as TPOT); every one its `last_token_ns`. Returns the tokens a benchmark
/// client times now (first tokens and counted gaps).
#[pyfunction]
pub fn record_tokens(outcome: &Bound<'_, StepOutcome>, now_ns: i64, token_gaps: &Bound<'_, PyDict>,
                     keep_itls: bool, begin_decode: &Bound<'_, PyAny>) -> PyResult<i64> {
    let py = outcome.py();
    let (generated, first, last, max_tbt, itl) = (intern!(py, "generated_tokens"), intern!(py, "first_token_ns"),
                                                  intern!(py, "last_token_ns"), intern!(py, "max_tbt_ns"),
                                                  intern!(py, "itl_ns"));
    let mut counts = GapCounts { gaps: token_gaps, pending: None };
    let mut timed = 0;
    for handle in &outcome.borrow().sampled {
        let (request, decodes_on) = {
            let seq = handle.borrow(py);
            (seq.request.clone_ref(py).into_bound(py), seq.target_generated > 1)
        };
        add(&request, generated, 1)?;
        if get(&request, first)? < 0 {
            request.setattr(first, now_ns)?;
            timed += 1;
            if keep_itls {
                request.setattr(itl, PyList::empty(py))?;
            }
            if decodes_on {
                begin_decode.call1((handle.bind(py), now_ns))?;
            }
        } else {
            let gap = now_ns - get(&request, last)?;
            if gap > get(&request, max_tbt)? {
                request.setattr(max_tbt, gap)?;
            }
            if gap != 0 {
                counts.count(gap)?;
                timed += 1;
                let itls = request.getattr(itl)?;
                if !itls.is_none() {
                    itls.downcast::<PyList>()?.append(gap)?;
                }
            }
        }
        request.setattr(last, now_ns)?;
    }
    counts.flush()?;
    Ok(timed)
}

/// Records a decode run's `steps` applied steps on the requests of its sequences (`seqs`): each
/// sequence sampled a token per step, the longest gap between them `max_gap_ns`, the last at `last_ns`.
#[pyfunction]
pub fn record_run(seqs: &Bound<'_, PyList>, steps: i64, max_gap_ns: i64, last_ns: i64) -> PyResult<()> {
    let py = seqs.py();
    let (generated, max_tbt, last) = (intern!(py, "generated_tokens"), intern!(py, "max_tbt_ns"),
                                      intern!(py, "last_token_ns"));
    for seq in seqs.iter() {
        let seq = seq.downcast::<Sequence>()?.borrow();
        let request = seq.request.bind(py);
        add(request, generated, steps)?;
        if max_gap_ns > get(request, max_tbt)? {
            request.setattr(max_tbt, max_gap_ns)?;
        }
        request.setattr(last, last_ns)?;
    }
    Ok(())
}
