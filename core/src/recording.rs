//! What a step did to its requests, written on their records without a Python loop over its sequences.
//!
//! An LLM client (Python's `LLMClient`) records every step on the request and stage records its
//! sequences point to ([`RequestRecord`], [`StageRecord`], whose fields are native here):
//! when a step begins, the prompt tokens its admitted sequences found cached, their stages' start
//! and the preemptions it made ([`record_start`]); when it ends, each sampled token: the request's
//! token count, first-token and last-token times, longest gap and, where kept, every gap, and the
//! client's count of gaps ([`record_tokens`]); and a decode run's steps applied in bulk
//! ([`record_run`]). What only some configurations need stays a Python callback, called from here
//! only when it happens (a new decode stage at a request's first token).

use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::batch::{ScheduledBatch, StepOutcome};
use crate::records::{RequestRecord, StageRecord};
use crate::sequence::Sequence;
use crate::timeline::Timeline;

/// The request record a sequence points to.
#[inline]
pub(crate) fn request_of<'py>(py: Python<'py>, seq: &Sequence) -> PyResult<Bound<'py, RequestRecord>> {
    Ok(seq.request.bind(py).downcast::<RequestRecord>()?.clone())
}

/// The stage record a sequence points to.
#[inline]
fn stage_of<'py>(py: Python<'py>, seq: &Sequence) -> PyResult<Bound<'py, StageRecord>> {
    Ok(seq.stage.bind(py).downcast::<StageRecord>()?.clone())
}

/// Records that the step of `batch` began at `now_ns` (a decode run's steps, whose sequences have all
/// started, are not recorded): the prompt tokens its admitted sequences found in the prefix cache
/// (`cached_tokens`; a readmission after a preemption is not a prompt's hit), its sequences' stages'
/// `start_ns` where not set, and a preemption on the request of each sequence it preempted.
#[pyfunction]
pub fn record_start(batch: &Bound<'_, ScheduledBatch>, now_ns: i64) -> PyResult<()> {
    let py = batch.py();
    batch.borrow_mut().ensure(py)?;
    let batch = batch.borrow();
    for (seq, cached) in &batch.cache_hits {
        let seq = seq.borrow(py);
        if stage_of(py, &seq)?.borrow().start_ns < 0 {
            request_of(py, &seq)?.borrow_mut().cached_tokens += cached;
        }
    }
    for seq in &batch.seqs {
        let stage = stage_of(py, &seq.borrow(py))?;
        let mut stage = stage.borrow_mut();
        if stage.start_ns < 0 {
            stage.start_ns = now_ns;
        }
    }
    for seq in &batch.preempted {
        request_of(py, &seq.borrow(py))?.borrow_mut().preemptions += 1;
    }
    Ok(())
}

/// Records the tokens sampled at the end of a step (`outcome.sampled`, at `now_ns`) on their requests:
/// `generated_tokens`; a request's first token its `first_token_ns` (and an empty `itl_ns` where
/// `keep_itls`), with `begin_decode(seq, now_ns)` called where the sequence goes on decoding (its
/// stage splits); a later one the gap since its last (`max_tbt_ns`, `itl_ns` where kept, and
/// the client's count of gaps (`timeline`), unless parallel paths of the request sampled in this step already:
/// one path's gap counts, as TPOT); every one its `last_token_ns`. Returns the tokens a benchmark
/// client times now (first tokens and counted gaps).
#[pyfunction]
pub fn record_tokens(
    outcome: &Bound<'_, StepOutcome>,
    now_ns: i64,
    timeline: &Bound<'_, Timeline>,
    keep_itls: bool,
    begin_decode: &Bound<'_, PyAny>,
) -> PyResult<i64> {
    let py = outcome.py();
    let mut timed = 0;
    // Sequences that sampled in the same earlier step share a gap: counted once per run of equal gaps.
    let (mut gap_ns, mut gap_tokens) = (0, 0);
    for handle in &outcome.borrow().sampled {
        let (request, decodes_on) = {
            let seq = handle.borrow(py);
            (request_of(py, &seq)?, seq.target_generated > 1)
        };
        let first = {
            let mut request = request.borrow_mut();
            request.generated_tokens += 1;
            if request.first_token_ns < 0 {
                request.first_token_ns = now_ns;
                if keep_itls {
                    request.itl_ns = PyList::empty(py).into_any().unbind();
                }
                true
            } else {
                let gap = now_ns - request.last_token_ns;
                request.max_tbt_ns = request.max_tbt_ns.max(gap);
                if gap != 0 {
                    if gap != gap_ns {
                        if gap_tokens > 0 {
                            timeline.borrow_mut().count_gap(gap_ns, gap_tokens);
                        }
                        (gap_ns, gap_tokens) = (gap, 0);
                    }
                    gap_tokens += 1;
                    timed += 1;
                    if !request.itl_ns.is_none(py) {
                        request.itl_ns.bind(py).downcast::<PyList>()?.append(gap)?;
                    }
                }
                request.last_token_ns = now_ns;
                false
            }
        };
        if first {
            timed += 1;
            if decodes_on {
                begin_decode.call1((handle.bind(py), now_ns))?; // it reads the records: none borrowed
            }
            request.borrow_mut().last_token_ns = now_ns;
        }
    }
    if gap_tokens > 0 {
        timeline.borrow_mut().count_gap(gap_ns, gap_tokens);
    }
    Ok(timed)
}

/// Records a decode run's `steps` applied steps on the requests of its sequences (`seqs`): each
/// sequence sampled a token per step, the longest gap between them `max_gap_ns`, the last at `last_ns`.
#[pyfunction]
pub fn record_run(seqs: &Bound<'_, PyList>, steps: i64, max_gap_ns: i64, last_ns: i64) -> PyResult<()> {
    let py = seqs.py();
    for seq in seqs.iter() {
        let request = request_of(py, &seq.downcast::<Sequence>()?.borrow())?;
        let mut request = request.borrow_mut();
        request.generated_tokens += steps;
        request.max_tbt_ns = request.max_tbt_ns.max(max_gap_ns);
        request.last_token_ns = last_ns;
    }
    Ok(())
}
