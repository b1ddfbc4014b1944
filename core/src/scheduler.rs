//! The per-client LLM scheduler: every change to its sequences, through two calls: [`Scheduler`].
//!
//! As in vLLM, a client asks `schedule` for the next step ([`ScheduledBatch`]: which sequences
//! compute how many tokens) and hands it back after the step with `update`, which advances the
//! sequences, samples, forks reasoning branches, finishes stages and frees their KV
//! ([`StepOutcome`]). The batching policy ([`crate::policies`]) decides what a step holds, out of
//! two moves: `schedule_running` (running sequences in admission order, preempting the newest, or
//! least important, when KV blocks run out) and `admit` (waiting sequences in queue order while
//! budget, seats and blocks allow, each admission in named steps: whether the step may see it yet,
//! whether vLLM passes it over, how many tokens it computes, and taking it).
//!
//! KV blocks are allocated as tokens are scheduled. When a running sequence needs a block and none
//! is free, the newest running sequence is preempted (recompute: its KV is dropped and it re-enters
//! the front of the queue; swap: its KV moves to host memory and back, the copy time added to the
//! step), as vLLM does.
//!
//! With vLLM's async scheduling (`async_scheduling`; by default with chunked batching), the engine
//! forms step n+1 while step n runs, before n's outputs are known
//! (`EngineCore.step_with_batch_queue`), so a step is formed as from the start of the step before
//! it: a prompt queued after that start waits one more step, and a sequence that finished in the
//! step just done still holds its seat and KV blocks (vLLM skips scheduling it, as its
//! `max_tokens` is reached, but frees it only when that step's output is processed). When that
//! view gives nothing to run, vLLM waits for the step in flight and forms again with its outputs
//! applied; so does `schedule`.
//!
//! Lookahead schedules on a `copy` (the same policy code, on cloned sequences: running ones cloned,
//! waiting ones cloned when first changed). For decode runs (`crate::runs::DecodeRun`) the scheduler
//! says which steps are certain to be the same sequences decoding (`steady_decodes`) and applies
//! such steps in bulk (`apply_decodes`).
//!
//! With a KV offload tier (Python's `offload`, vLLM's CPU offloading), each step's new full blocks
//! are stored there as it ends, and a sequence the tier can give blocks to is admitted to load
//! them: it waits in the queue (LOADING), skipped without blocking it, until the copy is known to
//! be done. LoRA adapters' slots (Python's `lora`), the offload tier and speculative decoding
//! (Python's `speculative`) stay Python objects, called from here only where a config enables them.

use std::collections::HashSet;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PySet};

use crate::batch::{ScheduledBatch, SteadyDecodes, StepOutcome};
use crate::manager::{ceil_div, keys_list, BlockManager};
use crate::packing::Packing;
use crate::policies::Policy;
use crate::sequence::{ident, same, Sequence, State};

const LORA: &str = "cosim.hub.sim.scheduling.lora";
const SPECULATIVE: &str = "cosim.hub.sim.scheduling.speculative";

/// Steady decodes (`Scheduler::steady`).
pub struct Steady {
    /// KV blocks each step takes.
    pub new_blocks: Vec<i64>,
    /// Each running sequence's tokens in KV before the first.
    pub contexts: Vec<i64>,
    /// Their LoRA adapters, the same every step.
    pub lora: Option<Py<PyAny>>,
}

fn python<'py>(py: Python<'py>, module: &str, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import(module)?.getattr(name)
}

fn list<'py>(py: Python<'py>, seqs: &[Py<Sequence>]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, seqs.iter().map(|seq| seq.bind(py)))
}

fn position(seqs: &[Py<Sequence>], seq: &Py<Sequence>) -> Option<usize> {
    seqs.iter().position(|s| s.is(seq))
}

/// The KV blocks decoding sequences whose blocks have room for `rooms` more tokens take at each
/// of the next `steps` steps, as far as `free` blocks last.
///
/// A sequence whose blocks hold `room` more tokens needs a block at step `room` (0-based) and
/// every `block_size` steps after, so a step takes the blocks first needed then plus those taken
/// `block_size` steps before: one pass over the sequences and one over the steps.
fn decode_blocks(rooms: &[i64], steps: usize, block_size: i64, mut free: i64) -> Vec<i64> {
    let period = block_size as usize;
    let mut new_blocks = vec![0i64; steps];
    for &room in rooms {
        debug_assert!(room >= 0, "a sequence holds blocks for its computed tokens");
        if let Some(first) = new_blocks.get_mut(room.max(0) as usize) {
            *first += 1;
        }
    }
    for j in 0..steps {
        if j >= period {
            new_blocks[j] += new_blocks[j - period];
        }
        free -= new_blocks[j];
        if free < 0 {
            new_blocks.truncate(j);
            break;
        }
    }
    new_blocks
}

/// Waiting queue, running set and KV blocks of one client, stepped through `schedule` and
/// `update` (see the module).
///
/// Args:
///     config: the client's scheduler section.
///     kv: its KV blocks.
///     kv_bytes_per_token: KV bytes of one token (swap sizes).
///     micro_batches: batches in flight at once (pipeline parallelism).
///     hold_finished_kv: a finished sequence's KV stays until `release`.
///     lora: LoRA adapters' GPU slots and host cache (Python's `LoraSlots`), if enabled.
///     speculation: speculative decoding (Python's `Speculation`), if any.
///     offload: the KV offload tier (Python's `OffloadTier`), if any; a copy has none.
///     lock_step: a data-parallel rank stepping with others.
///     one_step_ahead: form each step as vLLM's async scheduling does (the client's
///         `forms_one_step_ahead`); None: the scheduler section's default. Never with micro-batches.
#[pyclass(module = "cosim_core")]
pub struct Scheduler {
    #[pyo3(get)]
    config: Py<PyAny>,
    #[pyo3(get)]
    pub(crate) kv: Py<BlockManager>,
    #[pyo3(get)]
    kv_bytes_per_token: f64,
    #[pyo3(get)]
    offload: Option<Py<PyAny>>,
    #[pyo3(get)]
    hold_finished_kv: bool,
    #[pyo3(get)]
    micro_batches: i64,
    /// Ids of the sequences of the batches in flight (micro_batches > 1).
    in_flight: HashSet<usize>,
    #[pyo3(get)]
    policy: Policy,
    packing: Packing,
    pub waiting: Vec<Py<Sequence>>,
    pub running: Vec<Py<Sequence>>,
    #[pyo3(get)]
    swap_free_bytes: i64,
    next_order: i64,
    #[pyo3(get)]
    one_step_ahead: bool,
    /// One step ahead: the queue orders below it were queued by then.
    visible: Option<i64>,
    #[pyo3(get)]
    lock_step: bool,
    /// One step ahead: finished in the step just done, seats still held.
    retiring: Vec<Py<Sequence>>,
    /// In a copy: ids of the original's waiting sequences, cloned on write.
    borrowed: HashSet<usize>,
    #[pyo3(get, set)]
    speculation: Option<Py<PyAny>>,
    /// The client's speculative counts (Python's `SpecStats`); None in a copy without speculation.
    #[pyo3(get)]
    spec_stats: Option<Py<PyAny>>,
    #[pyo3(get)]
    lora: Option<Py<PyAny>>,
    /// While a step forms beside micro-batches in flight: their sequences (their adapters stay busy).
    flying: Vec<Py<Sequence>>,
    max_num_seqs: i64,
    swap_preemption: bool,
    block_size: i64,
}

#[pymethods]
impl Scheduler {
    #[new]
    #[pyo3(signature = (config, kv, *, kv_bytes_per_token = 0.0, micro_batches = 1, hold_finished_kv = false,
                        lora = None, speculation = None, offload = None, lock_step = false, one_step_ahead = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        config: &Bound<'_, PyAny>,
        kv: Py<BlockManager>,
        kv_bytes_per_token: f64,
        micro_batches: i64,
        hold_finished_kv: bool,
        lora: Option<Py<PyAny>>,
        speculation: Option<Py<PyAny>>,
        offload: Option<Py<PyAny>>,
        lock_step: bool,
        one_step_ahead: Option<bool>,
    ) -> PyResult<Self> {
        let py = config.py();
        let packing: String = config.getattr(intern!(py, "packing"))?.extract()?;
        let preemption: String = config.getattr(intern!(py, "preemption"))?.extract()?;
        // vLLM's async scheduling (see the module): a step is formed one step ahead
        let ahead = match one_step_ahead {
            Some(ahead) => ahead,
            None => config.getattr(intern!(py, "forms_one_step_ahead"))?.extract()?,
        };
        let block_size = kv.borrow(py).block_size;
        Ok(Scheduler {
            config: config.clone().unbind(),
            kv,
            kv_bytes_per_token,
            offload,
            hold_finished_kv,
            micro_batches,
            in_flight: HashSet::new(),
            policy: Policy::new(config)?,
            packing: Packing::named(&packing)?,
            waiting: Vec::new(),
            running: Vec::new(),
            swap_free_bytes: config.getattr(intern!(py, "swap_space_bytes"))?.extract()?,
            next_order: 0,
            one_step_ahead: ahead && micro_batches == 1,
            visible: None,
            lock_step,
            retiring: Vec::new(),
            borrowed: HashSet::new(),
            speculation,
            spec_stats: Some(python(py, SPECULATIVE, "SpecStats")?.call0()?.unbind()),
            lora,
            flying: Vec::new(),
            max_num_seqs: config.getattr(intern!(py, "max_num_seqs"))?.extract()?,
            swap_preemption: preemption == "swap",
            block_size,
        })
    }

    // -- the queue ------------------------------------------------------------
    /// Queues a new sequence (ordered by the packing order); `front` puts it first (a branch of a
    /// request already running).
    #[pyo3(signature = (seq, *, front = false))]
    fn add(&mut self, seq: &Bound<'_, Sequence>, front: bool) -> PyResult<()> {
        self.queue_new(seq.py(), same(seq.py(), seq.as_unbound()), front)
    }

    /// The running sequences, in admission order (a new list).
    #[getter]
    fn running<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        list(py, &self.running)
    }

    /// The waiting queue, in order (a new list).
    #[getter]
    fn waiting<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        list(py, &self.waiting)
    }

    #[getter]
    pub(crate) fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Sequences running: a count right even while a decode run's steps are pending on them.
    #[getter]
    fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Sequences waiting.
    #[getter]
    fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Tokens left to process before the stages of all its sequences end (prefill plus decodes):
    /// the sum of their `remaining_work` (a router's `remaining_tokens` load).
    fn remaining_work(&self, py: Python<'_>) -> i64 {
        self.running.iter().chain(&self.waiting).map(|seq| seq.borrow(py).remaining_work()).sum()
    }

    /// Prompt (and recomputed) tokens still to prefill: every waiting sequence's missing tokens,
    /// and a running one's beyond a decode's one (a router's `prefill_tokens` load).
    fn remaining_prefill(&self, py: Python<'_>) -> i64 {
        let missing = |seq: &Py<Sequence>| {
            let s = seq.borrow(py);
            s.num_tokens - s.num_computed
        };
        self.waiting.iter().map(missing).sum::<i64>() + self.running.iter().map(missing).filter(|&m| m > 1).sum::<i64>()
    }

    /// Frees a finished sequence's KV held since it finished (`hold_finished_kv`).
    fn release(&mut self, seq: &Bound<'_, Sequence>) -> PyResult<()> {
        self.kv.bind(seq.py()).borrow_mut().release(seq)
    }

    /// When a copy back from the offload tier is next done, if one is under way (an idle client
    /// wakes then).
    fn next_load_ns(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        match &self.offload {
            Some(offload) => offload.bind(py).call_method0(intern!(py, "next_load_ns"))?.extract(),
            None => Ok(None),
        }
    }

    // -- the contract ----------------------------------------------------------
    /// Forms the next step (possibly empty: nothing can run).
    ///
    /// With micro-batches in flight (pipeline parallelism, vLLM's batch queue), a sequence in one
    /// of them cannot be scheduled again until it is handed back: the step is formed from the
    /// others, and its sequences are in flight until `update`.
    pub fn schedule(&mut self, py: Python<'_>) -> PyResult<ScheduledBatch> {
        let mut batch = if self.one_step_ahead {
            self.form_one_step_ahead(py)?
        } else if self.micro_batches == 1 {
            self.policy.clone().form(py, self)?
        } else {
            let batch = self.form_beside_in_flight(py)?;
            self.in_flight.extend(batch.seqs.iter().map(ident));
            batch
        };
        batch.queue_stamp = self.next_order;
        if let Some(offload) = &self.offload {
            if !batch.seqs.is_empty() {
                offload.bind(py).call_method0(intern!(py, "step_started"))?;
            }
        }
        if self.speculation.is_some() {
            // a prefill chunk verifies none
            batch.draft_tokens = batch
                .seqs
                .iter()
                .zip(&batch.num_new)
                .zip(&batch.context)
                .map(|((seq, num), computed)| (num - (seq.borrow(py).num_tokens - computed)).max(0))
                .collect();
        }
        if self.lora.is_some() && !batch.seqs.is_empty() {
            batch.lora = self.lora_step(py, &batch.seqs, batch.lora.take())?;
        }
        Ok(batch)
    }

    /// Applies a finished step: each sequence holds its new tokens; a sequence whose tokens are
    /// all computed samples one; reasoning branches fork; finished stages leave and free their KV.
    pub fn update(&mut self, py: Python<'_>, mut batch: PyRefMut<'_, ScheduledBatch>) -> PyResult<StepOutcome> {
        batch.ensure(py)?;
        if !self.in_flight.is_empty() {
            for seq in &batch.seqs {
                self.in_flight.remove(&ident(seq));
            }
        }
        if let Some(offload) = &self.offload {
            let offload = offload.bind(py);
            offload.call_method0(intern!(py, "step_ended"))?;
            offload.call_method1(intern!(py, "store_step"), (list(py, &batch.seqs)?, batch.num_new.clone()))?;
        }
        if self.speculation.is_some() {
            return self.update_speculative(py, &batch);
        }
        let mut sampled = Vec::with_capacity(batch.seqs.len());
        let mut forking = Vec::new();
        let mut finished = Vec::new();
        for (seq, &num) in batch.seqs.iter().zip(&batch.num_new) {
            let mut s = seq.borrow_mut(py);
            s.num_computed += num;
            if s.num_computed < s.num_tokens {
                continue; // a partial prefill chunk samples nothing
            }
            s.num_tokens += 1;
            s.generated += 1;
            sampled.push(same(py, seq));
            if s.forks != 0 {
                forking.push(same(py, seq));
            }
            if s.generated >= s.target_generated {
                finished.push(same(py, seq));
            }
        }
        drop(batch);
        self.conclude(py, sampled, forking, finished, Vec::new())
    }

    // -- decode runs: what timing may apply in bulk (crate::runs) -------
    /// The steps after `batch` (just updated into `outcome`) that are certain to be the running
    /// sequences decoding unchanged while no work arrives, and the KV blocks each takes.
    ///
    /// That holds when every running sequence sampled at the end of `batch` (so each now decodes,
    /// and its last token came then), the policy would take them all, and the queue can give no
    /// one: it is empty, or `batch` tried it, admitted no one, and since then nothing was queued
    /// and no one left (a step later only fewer blocks are free). The steps last until a sequence
    /// finishes, or its sequences would need more KV blocks than are free (a preemption or a
    /// prefix-cache eviction is `schedule`'s to decide); the last is formed by `schedule` and
    /// handed back with `update` like any other.
    fn steady_decodes(
        &self,
        py: Python<'_>,
        batch: PyRef<'_, ScheduledBatch>,
        outcome: PyRef<'_, StepOutcome>,
    ) -> PyResult<Option<SteadyDecodes>> {
        let Some(Steady { new_blocks, contexts, lora }) = self.steady(py, &batch, &outcome, usize::MAX)? else {
            return Ok(None);
        };
        Ok(Some(SteadyDecodes {
            seqs: list(py, &self.running)?.unbind(),
            contexts: PyList::new(py, contexts)?.unbind(),
            new_blocks: PyList::new(py, new_blocks)?.unbind(),
            queue_stamp: batch.queue_stamp,
            lora,
        }))
    }

    /// A step of `steady_decodes` begins without being formed (or several at once, on a copy:
    /// `DecodeRun.take_in_bulk`): it takes its new KV blocks (the sequences are credited them by
    /// `apply_decodes`), and the sequences finished in the step before free their seats, as
    /// `schedule` does.
    pub fn begin_decode_step(&mut self, py: Python<'_>, new_blocks: i64) -> PyResult<()> {
        self.kv.borrow_mut(py).take(new_blocks);
        if !self.retiring.is_empty() {
            self.retire(py)?;
        }
        Ok(())
    }

    /// Applies `steps` decode steps of `steady_decodes`'s sequences `seqs` at once, as `update`
    /// applies them one by one (each sampled a token per step, the blocks its steps filled
    /// cached), and credits them the blocks of `begun` more steps begun since (a step in flight
    /// holds its blocks already).
    fn apply_decodes(&mut self, seqs: &Bound<'_, PyList>, steps: i64, begun: i64) -> PyResult<()> {
        let py = seqs.py();
        let seqs: Vec<Py<Sequence>> =
            seqs.iter().map(|item| Ok(item.downcast_into::<Sequence>()?.unbind())).collect::<PyResult<_>>()?;
        self.apply_decodes_to(py, &seqs, steps, begun)
    }

    // -- lookahead ---------------------------------------------------------------
    /// A copy to schedule hypothetically: running sequences cloned, waiting ones cloned when
    /// first changed, KV blocks copied; the records stay the original's, and the copy writes none.
    pub fn copy(&self, py: Python<'_>) -> PyResult<Scheduler> {
        let kv = Py::new(py, self.kv.borrow(py).clone())?;
        self.copy_with(py, kv)
    }

    fn __repr__(&self) -> String {
        format!("Scheduler({} running, {} waiting)", self.running.len(), self.waiting.len())
    }
}

impl Scheduler {
    /// `copy`, with the KV blocks of a lookahead's earlier copy (`spare`, which nothing else
    /// holds) brought up to date rather than copied anew ([`BlockManager::mirror_into`]).
    pub fn copy_reusing(&self, py: Python<'_>, spare: Option<Py<BlockManager>>) -> PyResult<Scheduler> {
        let kv = match spare {
            Some(kv) => kv,
            None => Py::new(py, self.kv.borrow(py).clone())?,
        };
        self.kv.borrow_mut(py).mirror_into(&mut kv.borrow_mut(py));
        self.copy_with(py, kv)
    }

    /// `copy` with `kv` as the copy's KV blocks.
    fn copy_with(&self, py: Python<'_>, kv: Py<BlockManager>) -> PyResult<Scheduler> {
        let clone_all = |seqs: &[Py<Sequence>]| -> PyResult<Vec<Py<Sequence>>> {
            let mut clones = Vec::with_capacity(seqs.len()); // (collecting results would grow it step by step)
            for seq in seqs {
                clones.push(Py::new(py, seq.borrow(py).copy(py))?);
            }
            Ok(clones)
        };
        let speculation = self.speculation.as_ref().map(|s| s.clone_ref(py));
        let spec_stats = match &speculation {
            // a copy draws nothing (see add) and counts its own
            Some(_) => Some(python(py, SPECULATIVE, "SpecStats")?.call0()?.unbind()),
            None => None,
        };
        let lora = match &self.lora {
            Some(lora) => Some(lora.bind(py).call_method0(intern!(py, "copy"))?.unbind()),
            None => None,
        };
        Ok(Scheduler {
            config: self.config.clone_ref(py),
            kv,
            kv_bytes_per_token: self.kv_bytes_per_token,
            offload: None, // a prediction: the copy neither loads nor stores (LOADING sequences wait)
            hold_finished_kv: self.hold_finished_kv,
            micro_batches: 1, // a pipelined client predicts nothing (see LLMClient)
            in_flight: HashSet::new(),
            policy: self.policy.clone(),
            packing: self.packing,
            waiting: self.waiting.iter().map(|seq| same(py, seq)).collect(),
            running: clone_all(&self.running)?,
            swap_free_bytes: self.swap_free_bytes,
            next_order: self.next_order,
            one_step_ahead: self.one_step_ahead,
            visible: self.visible,
            lock_step: self.lock_step,
            retiring: clone_all(&self.retiring)?,
            borrowed: self.waiting.iter().map(ident).collect(),
            speculation,
            spec_stats,
            lora,
            flying: Vec::new(),
            max_num_seqs: self.max_num_seqs,
            swap_preemption: self.swap_preemption,
            block_size: self.block_size,
        })
    }
}

impl Scheduler {
    /// `steady_decodes`'s steps, the first `most` at most (a lookahead needs no more).
    pub fn steady(
        &self,
        py: Python<'_>,
        batch: &ScheduledBatch,
        outcome: &StepOutcome,
        most: usize,
    ) -> PyResult<Option<Steady>> {
        let n = self.running.len();
        if self.speculation.is_some() || self.offload.is_some() {
            return Ok(None); // each step advances a sequence by its accepted drafts; each step's blocks are stored
        }
        // sampled minus finished are running; a sampled sequence has forked already
        if n == 0 || outcome.sampled.len() - outcome.finished.len() != n || !self.policy.decodes_all(n as i64) {
            return Ok(None);
        }
        if !self.waiting.is_empty()
            && (!outcome.finished.is_empty() || batch.admitted != 0
            || !batch.preempted.is_empty() || batch.swap_bytes != 0
            || batch.num_tokens != n as i64 // a step of decodes only leaves the queue no more budget
            || !batch.queue_blocked || batch.queue_stamp != self.next_order)
        {
            return Ok(None);
        }
        // each sequence read once (a borrow costs more than the arithmetic)
        let mut length = i64::MAX;
        let mut rooms = Vec::with_capacity(n); // tokens each one's blocks have room for
        let mut contexts = Vec::with_capacity(n);
        for seq in &self.running {
            let s = seq.borrow(py);
            length = length.min(s.target_generated - s.generated);
            rooms.push((s.num_blocks + s.prefix_blocks) * self.block_size - s.num_computed);
            contexts.push(s.num_computed);
        }
        let free = self.kv.borrow(py).num_free();
        let new_blocks = decode_blocks(&rooms, (length.max(0) as usize).min(most), self.block_size, free);
        if new_blocks.is_empty() {
            return Ok(None);
        }
        // the same adapters every step: touched once here
        let lora = if self.lora.is_some() { self.lora_step(py, &self.running, None)? } else { None };
        Ok(Some(Steady { new_blocks, contexts, lora }))
    }

    /// See `apply_decodes`: on Rust sequences.
    pub fn apply_decodes_to(&mut self, py: Python<'_>, seqs: &[Py<Sequence>], steps: i64, begun: i64) -> PyResult<()> {
        let kv = self.kv.bind(py);
        let (block_size, caching) = (self.block_size, kv.borrow().enable_prefix_caching());
        for seq in seqs {
            let seq = seq.bind(py);
            let upto = {
                let mut s = seq.borrow_mut();
                s.num_computed += steps;
                let computed = s.num_computed;
                s.num_tokens += steps;
                s.generated += steps;
                let held = ceil_div(computed + begun, block_size) - s.prefix_blocks;
                if held > s.num_blocks {
                    s.num_blocks = held;
                }
                // the blocks its steps filled are cached, as each step's allocation caches them
                // (not asked when no block of its own filled: 15 steps in 16 at 16-token blocks)
                let upto = (computed + begun).min(s.num_tokens);
                (caching && upto.div_euclid(block_size) > s.prefix_blocks && s.num_blocks != 0).then_some(upto)
            };
            if let Some(upto) = upto {
                kv.borrow_mut().cache_full_blocks(seq, upto)?;
            }
        }
        Ok(())
    }

    // -- the queue ------------------------------------------------------------
    fn queue_new(&mut self, py: Python<'_>, seq: Py<Sequence>, front: bool) -> PyResult<()> {
        let draws = {
            let mut s = seq.borrow_mut(py);
            s.order = self.next_order;
            s.state = State::Waiting;
            match &self.speculation {
                Some(_) if s.spec_draws.is_none() => Some(s.target_generated - s.generated),
                _ => None,
            }
        };
        self.next_order += 1;
        if let (Some(speculation), Some(steps)) = (&self.speculation, draws) {
            let made = speculation.bind(py).call_method1(intern!(py, "draws"), (steps,))?.unbind();
            seq.borrow_mut(py).spec_draws = Some(made);
        }
        self.packing.queue(py, &mut self.waiting, seq, front)
    }

    /// Frees the seats (and, unless held, the KV) of the sequences finished in the step just done.
    fn retire(&mut self, py: Python<'_>) -> PyResult<()> {
        let retiring = std::mem::take(&mut self.retiring);
        if !self.hold_finished_kv {
            let mut kv = self.kv.borrow_mut(py);
            for seq in &retiring {
                kv.release(seq.bind(py))?;
            }
        }
        Ok(())
    }

    /// The waiting sequence at `i`, cloned first if it is the original's (in a copy).
    fn writable(&mut self, py: Python<'_>, i: usize) -> PyResult<Py<Sequence>> {
        if !self.borrowed.is_empty() && self.borrowed.contains(&ident(&self.waiting[i])) {
            let copy = self.waiting[i].borrow(py).copy(py);
            self.waiting[i] = Py::new(py, copy)?;
        }
        Ok(same(py, &self.waiting[i]))
    }

    // -- the changes moves are made of -------------------------------------------------------------
    /// Drops the shared KV blocks waiting sequences hold (they will recompute), so the sequence at
    /// `keep` (the head, less any skipped for their adapters) can evict them; a queue must never
    /// pin the blocks its head needs.
    fn unpin_waiting(&mut self, py: Python<'_>, keep: usize) -> PyResult<bool> {
        let mut pinned = false;
        for i in 0..self.waiting.len() {
            if i == keep {
                continue;
            }
            let pins = {
                let s = self.waiting[i].borrow(py);
                s.prefix_blocks != 0 && s.state != State::Loading
            };
            if pins {
                let seq = self.writable(py, i)?;
                self.kv.borrow_mut(py).release(seq.bind(py))?;
                seq.borrow_mut(py).num_computed = 0;
                pinned = true;
            }
        }
        Ok(pinned)
    }

    /// The adapters running sequences use (in flight included).
    fn busy_adapters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PySet>> {
        let busy = PySet::empty(py)?;
        for seq in self.running.iter().chain(&self.flying) {
            let lora = seq.borrow(py).request.bind(py).getattr(intern!(py, "lora"))?;
            if !lora.is_none() {
                busy.add(lora)?;
            }
        }
        Ok(busy)
    }

    /// The LoRA step of sequences `seqs` (Python's `lora.step_of`): their adapters, touched.
    fn lora_step(&self, py: Python<'_>, seqs: &[Py<Sequence>], step: Option<Py<PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        let Some(lora) = &self.lora else {
            return Ok(step);
        };
        let requests = PyList::new(py, seqs.iter().map(|seq| seq.borrow(py).request.clone_ref(py)))?;
        let made = python(py, LORA, "step_of")?.call1((lora.bind(py), requests, step))?;
        Ok(if made.is_none() { None } else { Some(made.unbind()) })
    }

    /// Multi-path reasoning: the parent's sibling branches start beside it.
    ///
    /// Each sibling shares the parent's prompt KV blocks (copy-on-write, as vLLM's parallel
    /// sampling), has sampled its own first token from the same prefill, and decodes its own
    /// tokens into its own blocks, beside the parent from the next step on (at the queue's front if
    /// no seat is free).
    fn fork(&mut self, py: Python<'_>, parent: &Py<Sequence>) -> PyResult<Vec<Py<Sequence>>> {
        let (request, stage, target, prefix_id, forks, draws, spec_step) = {
            let mut p = parent.borrow_mut(py);
            let forks = p.forks;
            p.forks = 0;
            (
                p.request.clone_ref(py),
                p.stage.clone_ref(py),
                p.target_generated,
                p.prefix_id.as_ref().map(|id| id.clone_ref(py)),
                forks,
                p.spec_draws.as_ref().map(|d| d.clone_ref(py)),
                p.spec_step,
            )
        };
        let input_tokens: i64 = request.bind(py).getattr(intern!(py, "input_tokens"))?.extract()?;
        let k: Option<i64> = match &self.speculation {
            Some(speculation) => Some(speculation.bind(py).getattr(intern!(py, "k"))?.extract()?),
            None => None,
        };
        let mut children = Vec::with_capacity(forks.max(0) as usize);
        for _ in 0..forks {
            let mut child = Sequence::new(
                request.clone_ref(py),
                stage.clone_ref(py),
                input_tokens + 1,
                input_tokens,
                target,
                0,
                prefix_id.as_ref().map(|id| id.clone_ref(py)),
                1,
                0,
            );
            if let Some(k) = k {
                // branches share the parent's draws and propose drafts of their own
                child.spec_draws = draws.as_ref().map(|d| d.clone_ref(py));
                child.spec_step = spec_step;
                child.drafts = k;
            }
            children.push(Py::new(py, child)?);
        }
        let bound: Vec<Bound<'_, Sequence>> = children.iter().map(|c| c.bind(py).clone()).collect();
        self.kv.borrow_mut(py).fork(parent.bind(py), bound, input_tokens)?;
        for child in &children {
            if (self.running.len() as i64) < self.max_num_seqs {
                {
                    let mut c = child.borrow_mut(py);
                    c.order = self.next_order;
                    c.state = State::Running;
                }
                self.next_order += 1;
                self.running.push(same(py, child));
            } else {
                self.queue_new(py, same(py, child), true)?;
            }
        }
        Ok(children)
    }

    /// Preempts running `seq` to make room for `batch`: swapped to host memory where it may be,
    /// else its KV dropped (recomputed when readmitted); requeued either way.
    fn preempt(&mut self, py: Python<'_>, seq: &Py<Sequence>, batch: &mut ScheduledBatch) -> PyResult<()> {
        if let Some(i) = position(&self.running, seq) {
            self.running.remove(i);
        }
        batch.drop_seq(py, seq); // a victim chosen by importance may be scheduled in this step already
        batch.preempted.push(same(py, seq));
        let bound = seq.bind(py);
        let (kv_bytes, swap) = {
            let s = bound.borrow();
            let kv_bytes = (s.num_computed as f64 * self.kv_bytes_per_token) as i64;
            (
                kv_bytes,
                self.swap_preemption && s.num_blocks != 0 && s.prefix_blocks == 0 && kv_bytes <= self.swap_free_bytes,
            )
        };
        if swap {
            self.swap_free_bytes -= kv_bytes;
            {
                let mut s = bound.borrow_mut();
                s.swapped_blocks = s.num_blocks;
                s.swapped_bytes = kv_bytes;
            }
            self.kv.borrow_mut(py).release(bound)?;
            bound.borrow_mut().state = State::Swapped;
        } else {
            self.kv.borrow_mut(py).release(bound)?; // with prefix caching its full blocks stay cached until evicted
            let mut s = bound.borrow_mut();
            s.num_computed = 0;
            s.drafts = 0; // vLLM drops a preempted request's drafts
            s.state = State::Waiting;
        }
        self.packing.requeue(py, &mut self.waiting, same(py, seq))
    }

    /// Brings a swapped sequence's KV back (space checked by the caller).
    fn swap_in(&mut self, py: Python<'_>, seq: &Py<Sequence>, batch: &mut ScheduledBatch) {
        let mut s = seq.borrow_mut(py);
        let blocks = s.swapped_blocks;
        self.kv.borrow_mut(py).grow_seq_by(&mut s, blocks);
        self.swap_free_bytes += s.swapped_bytes;
        batch.swap_bytes += 2 * s.swapped_bytes; // the copy out and the copy back both cost time
        s.swapped_blocks = 0;
        s.swapped_bytes = 0;
    }

    // -- the two moves -------------------------------------------------------------
    /// Adds running sequences in admission order, preempting the newest (or least important) when
    /// blocks run out.
    ///
    /// Args:
    ///     batch: the step so far.
    ///     budget: most tokens the whole step computes (None: no limit).
    ///     max_chunk_tokens: most tokens one sequence computes in the step (0: no cap), vLLM's
    ///         `long_prefill_token_threshold`.
    pub fn schedule_running(
        &mut self,
        py: Python<'_>,
        mut batch: ScheduledBatch,
        budget: Option<i64>,
        max_chunk_tokens: i64,
    ) -> PyResult<ScheduledBatch> {
        let block_size = self.block_size;
        batch.reserve(self.running.len());
        let mut i = 0;
        'running: while i < self.running.len() {
            let seq = same(py, &self.running[i]);
            let (computed, remaining, room) = {
                let s = seq.borrow(py);
                let computed = s.num_computed;
                let remaining = s.num_tokens + s.drafts - computed;
                let room = (s.num_blocks + s.prefix_blocks) * block_size;
                if remaining == 1
                    && s.generated != 0
                    && computed < room
                    && budget.is_none_or(|budget| batch.num_tokens < budget)
                {
                    // fast path, a decode its blocks have room for (the hot loop)
                    drop(s);
                    batch.push(seq, 1, computed, false);
                    i += 1;
                    continue;
                }
                (computed, remaining, room)
            };
            let mut num = match budget {
                None => remaining,
                Some(budget) => remaining.min(budget - batch.num_tokens),
            };
            if num <= 0 {
                break;
            }
            if max_chunk_tokens != 0 && num > max_chunk_tokens {
                num = max_chunk_tokens; // off the decode path: only a prefill (or recompute) has more than 1
            }
            if computed + num <= room {
                let prefill = seq.borrow(py).is_prefill(computed);
                batch.push(seq, num, computed, prefill); // its blocks already hold the new tokens
                i += 1;
                continue;
            }
            loop {
                if self.kv.borrow_mut(py).grow(seq.bind(py), num)? {
                    let (computed, prefill) = {
                        let s = seq.borrow(py);
                        (s.num_computed, s.is_prefill(s.num_computed))
                    };
                    batch.push(seq, num, computed, prefill);
                    i += 1;
                    continue 'running;
                }
                let v = self.packing.victim(py, &self.running)?;
                let victim = same(py, &self.running[v]);
                if v < i {
                    i -= 1; // seq moves up a place
                }
                self.preempt(py, &victim, &mut batch)?;
                if victim.is(&seq) {
                    break 'running; // seq itself was preempted: it was the newest (or the least important)
                }
            }
        }
        Ok(batch)
    }

    /// Admits waiting sequences in queue order while budget, seats and blocks allow.
    ///
    /// Args:
    ///     batch: the step so far.
    ///     budget: tokens the admitted sequences may compute in the step.
    ///     whole_prompts: admit whole prompts only; else the budget splits them.
    ///     max_chunk_tokens: most tokens one sequence computes in the step (0: no cap).
    ///     reserve_whole_prompt: admit a split prompt only if blocks for all of it are free, not
    ///         just for its first chunk (vLLM's `scheduler_reserve_full_isl`), so a long prompt
    ///         cannot be admitted into KV it will have to preempt others for.
    pub fn admit(
        &mut self,
        py: Python<'_>,
        mut batch: ScheduledBatch,
        mut budget: i64,
        whole_prompts: bool,
        max_chunk_tokens: i64,
        reserve_whole_prompt: bool,
    ) -> PyResult<ScheduledBatch> {
        let max_seqs = self.max_num_seqs as usize;
        let seats = (self.max_num_seqs - self.retiring.len() as i64).max(0) as usize;
        let busy = if self.lora.is_some() && !self.waiting.is_empty() { Some(self.busy_adapters(py)?) } else { None };
        let block_size = self.block_size;
        let mut i = 0; // the queue's first sequence not passed over
                       // a prompt queued while the step before ran: the next step sees it, so the queue is not blocked
        let mut unseen = false;
        while i < self.waiting.len() && batch.seqs.len() < max_seqs && self.running.len() < seats {
            let queued = same(py, &self.waiting[i]);
            let (too_late, loading) = {
                let q = queued.borrow(py);
                (self.queued_too_late(&q), q.state == State::Loading)
            };
            if too_late {
                unseen = true;
                if self.packing.arrival_order() {
                    break; // so was everyone behind it
                }
                i += 1;
                continue;
            }
            // (`passed_over` finds whether a loading sequence's copy is done)
            if self.passed_over(py, &queued, busy.as_ref())? {
                i += 1;
                continue;
            }
            // tokens an offload tier's copy computed
            let loaded = if loading { queued.borrow(py).num_computed } else { 0 };
            let seq = self.writable(py, i)?;
            // with prefix caching: blocks cached by content (its own, if preempted)
            let hit = self.kv.borrow(py).hit(seq.bind(py))?;
            let (cached, need, swapped) = {
                let s = seq.borrow(py);
                let cached = (hit.len() as i64 * block_size - s.num_computed).max(0); // tokens it need not compute
                (cached, s.remaining_tokens() - cached, s.state == State::Swapped)
            };
            if let Some(offload) = &self.offload {
                let reserve = if reserve_whole_prompt { need } else { 0 };
                let args = (seq.bind(py), keys_list(py, &hit)?, reserve);
                if offload.bind(py).call_method1(intern!(py, "start_load"), args)?.is_truthy()? {
                    i += 1; // it waits for its blocks from the offload tier
                    continue;
                }
            }
            let num = if whole_prompts || swapped {
                need
            } else {
                need.min(budget).min(if max_chunk_tokens != 0 { max_chunk_tokens } else { need })
            };
            // a whole prompt over the budget waits for a step of its own
            #[allow(clippy::nonminimal_bool)]
            let fits =
                num > 0 && !(whole_prompts && num > budget && (!batch.seqs.is_empty() || !self.running.is_empty()));
            let reserved = if reserve_whole_prompt { need } else { num }; // blocks are still taken for num only
            if !fits || !self.kv.borrow(py).fits_with(&seq.borrow(py), reserved, &hit)? {
                if fits && self.unpin_waiting(py, i)? {
                    continue; // blocks that queued sequences shared are evictable now: try again
                }
                break;
            }
            self.take(py, i, &seq, num, &hit, cached + loaded, &mut batch, busy.as_ref())?;
            budget -= num;
        }
        batch.queue_blocked = !self.waiting.is_empty() && !unseen;
        Ok(batch)
    }

    /// One step ahead (vLLM's async scheduling): whether `seq` is a prompt queued while the step
    /// before this one ran, which the step formed now cannot see yet.
    fn queued_too_late(&self, seq: &Sequence) -> bool {
        self.visible.is_some_and(|visible| seq.order >= visible && seq.generated == 0)
    }

    /// Whether vLLM skips `seq` and takes the ones behind it: its KV is still being copied back
    /// from the offload tier (once the copy is done, the tier gives it the blocks and it waits as
    /// any other), or its adapter would exceed `max_loras` beside the `busy` ones.
    fn passed_over(&self, py: Python<'_>, seq: &Py<Sequence>, busy: Option<&Bound<'_, PySet>>) -> PyResult<bool> {
        if seq.borrow(py).state == State::Loading {
            let loaded = match &self.offload {
                Some(offload) => offload.bind(py).call_method1(intern!(py, "loaded"), (seq.bind(py),))?.is_truthy()?,
                None => false,
            };
            if !loaded {
                return Ok(true);
            }
        }
        let (Some(lora), Some(busy)) = (&self.lora, busy) else {
            return Ok(false);
        };
        let name = seq.borrow(py).request.bind(py).getattr(intern!(py, "lora"))?;
        if name.is_none() {
            return Ok(false);
        }
        let spec = lora.bind(py).getattr(intern!(py, "spec"))?;
        let max_loras: usize = spec.getattr(intern!(py, "max_loras"))?.extract()?;
        Ok(!busy.contains(&name)? && busy.len() >= max_loras)
    }

    /// Admits `seq`, the waiting sequence at `i`, into `batch` to compute `num` tokens: its adapter
    /// brought in, its swapped KV back, its blocks allocated (`hit`: those cached), the `computed`
    /// tokens it need not compute (cached or loaded) counted as a cache hit.
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        py: Python<'_>,
        i: usize,
        seq: &Py<Sequence>,
        num: i64,
        hit: &[crate::key::Key],
        computed: i64,
        batch: &mut ScheduledBatch,
        busy: Option<&Bound<'_, PySet>>,
    ) -> PyResult<()> {
        if let (Some(lora), Some(busy)) = (&self.lora, busy) {
            let request = seq.borrow(py).request.clone_ref(py);
            if !request.bind(py).getattr(intern!(py, "lora"))?.is_none() {
                let step = python(py, LORA, "activate")?.call1((lora.bind(py), request, batch.lora.take(), busy))?;
                batch.lora = Some(step.unbind());
            }
        }
        if seq.borrow(py).state == State::Swapped {
            self.swap_in(py, seq, batch);
        }
        self.kv.borrow_mut(py).allocate_with(seq.bind(py), num, hit)?;
        if computed != 0 {
            batch.cache_hits.push((same(py, seq), computed));
        }
        self.waiting.remove(i);
        let mut s = seq.borrow_mut(py);
        s.state = State::Running;
        self.running.push(same(py, seq));
        batch.add(same(py, seq), &s, num);
        batch.admitted += 1;
        Ok(())
    }

    // -- forming a step ---------------------------------------------------------------
    /// The step as vLLM's async scheduling forms it, while the step before it still runs; if that
    /// gives nothing, the step formed once that one's outputs are applied. A data-parallel rank in
    /// lock-step (`lock_step`) then has nothing for this step: vLLM's DP engine loop, its early
    /// step empty, waits for the step in flight and runs a dummy batch with the other ranks' next
    /// step (`DPEngineCoreProc.run_busy_loop`: `if not executed: execute_dummy_batch()`) before it
    /// schedules again with everything it knows.
    fn form_one_step_ahead(&mut self, py: Python<'_>) -> PyResult<ScheduledBatch> {
        let retiring = !self.retiring.is_empty();
        let ahead = retiring || self.visible.is_some();
        let policy = self.policy.clone();
        let mut batch = policy.form(py, self)?;
        self.retire(py)?;
        if batch.seqs.is_empty() && ahead {
            self.visible = None;
            if self.lock_step {
                return Ok(batch);
            }
            batch = policy.form(py, self)?;
        } else if retiring {
            batch.queue_blocked = false; // the seats and blocks freed now may admit someone next step
        }
        self.visible = if batch.seqs.is_empty() { None } else { Some(self.next_order) };
        Ok(batch)
    }

    /// The policy's step over the running sequences not in flight; the running order is kept (in
    /// flight, they stay where they were; the admitted join the end).
    fn form_beside_in_flight(&mut self, py: Python<'_>) -> PyResult<ScheduledBatch> {
        let policy = self.policy.clone();
        if self.in_flight.is_empty() {
            return policy.form(py, self);
        }
        let everyone = std::mem::take(&mut self.running);
        self.running =
            everyone.iter().filter(|seq| !self.in_flight.contains(&ident(seq))).map(|seq| same(py, seq)).collect();
        if self.lora.is_some() {
            self.flying =
                everyone.iter().filter(|seq| self.in_flight.contains(&ident(seq))).map(|seq| same(py, seq)).collect();
        }
        let formed = policy.form(py, self);
        self.flying.clear();
        let kept: HashSet<usize> = self.running.iter().map(ident).collect();
        let before: HashSet<usize> = everyone.iter().map(ident).collect();
        let joined: Vec<Py<Sequence>> =
            self.running.iter().filter(|seq| !before.contains(&ident(seq))).map(|seq| same(py, seq)).collect();
        self.running = everyone
            .into_iter()
            .filter(|seq| self.in_flight.contains(&ident(seq)) || kept.contains(&ident(seq)))
            .chain(joined)
            .collect();
        formed
    }

    // -- applying a step ---------------------------------------------------------------
    /// `update` with speculative decoding: a sequence whose tokens are all computed verifies the
    /// drafts scheduled with them, keeps the accepted ones plus one token, and gets `k` new drafts
    /// (see Python's `speculative`).
    fn update_speculative(&mut self, py: Python<'_>, batch: &ScheduledBatch) -> PyResult<StepOutcome> {
        let speculation = self.speculation.as_ref().expect("speculating").clone_ref(py).into_bound(py);
        let k: i64 = speculation.getattr(intern!(py, "k"))?.extract()?;
        let (mut verifications, mut drafted, mut accepted_all) = (0i64, 0i64, 0i64);
        let mut sampled = Vec::new();
        let mut forking = Vec::new();
        let mut finished = Vec::new();
        let mut extra = Vec::new();
        for (seq, &num) in batch.seqs.iter().zip(&batch.num_new) {
            let mut s = seq.borrow_mut(py);
            let real = s.num_tokens - s.num_computed; // its tokens, then the drafts
            if num < real {
                s.num_computed += num; // a partial prefill chunk samples nothing
                continue;
            }
            let drafts = num - real;
            let mut accepted = 0;
            if drafts != 0 {
                let draws = s.spec_draws.as_ref().expect("a speculating sequence's draws").bind(py);
                let u: f64 = draws.get_item(s.spec_step)?.extract()?;
                accepted = speculation.call_method1(intern!(py, "accepted"), (u, drafts))?.extract()?;
                s.spec_step += 1;
                verifications += 1;
                drafted += drafts;
                accepted_all += accepted;
            }
            s.num_computed += real + accepted; // the rejected drafts' KV is discarded
            let new = (accepted + 1).min(s.target_generated - s.generated); // tokens past the target are dropped
            s.num_tokens += new;
            s.generated += new;
            if new > 1 {
                extra.push((same(py, seq), new - 1));
            }
            sampled.push(same(py, seq));
            if s.forks != 0 {
                forking.push(same(py, seq));
            }
            if s.generated >= s.target_generated {
                finished.push(same(py, seq));
                s.drafts = 0;
            } else {
                s.drafts = k; // proposed after this sample, verified next step
            }
        }
        if let Some(stats) = &self.spec_stats {
            let stats = stats.bind(py);
            for (name, count) in [("verifications", verifications), ("drafted", drafted), ("accepted", accepted_all)] {
                let before: i64 = stats.getattr(name)?.extract()?;
                stats.setattr(name, before + count)?;
            }
        }
        self.conclude(py, sampled, forking, finished, extra)
    }

    /// Forks the branches of the sampled, and retires the finished (`update`).
    fn conclude(
        &mut self,
        py: Python<'_>,
        sampled: Vec<Py<Sequence>>,
        forking: Vec<Py<Sequence>>,
        finished: Vec<Py<Sequence>>,
        extra_tokens: Vec<(Py<Sequence>, i64)>,
    ) -> PyResult<StepOutcome> {
        let mut forked = Vec::with_capacity(forking.len());
        for seq in forking {
            let children = self.fork(py, &seq)?;
            forked.push((seq, children));
        }
        let kv_blocks_used = self.kv.borrow(py).num_used();
        for seq in &finished {
            if let Some(offload) = &self.offload {
                offload.bind(py).call_method1(intern!(py, "forget"), (seq.bind(py),))?;
            }
            if let Some(i) = position(&self.running, seq) {
                self.running.remove(i);
            }
            if self.one_step_ahead {
                self.retiring.push(same(py, seq)); // freed once the next step is formed
            } else if !self.hold_finished_kv {
                self.kv.borrow_mut(py).release(seq.bind(py))?;
            }
            seq.borrow_mut(py).state = State::Finished;
        }
        let outcome = StepOutcome {
            sampled,
            forked,
            finished,
            kv_blocks_used,
            num_waiting: self.waiting.len() as i64,
            extra_tokens,
        };
        if !self.retiring.is_empty() && self.waiting.is_empty() && self.running.is_empty() {
            self.retire(py)?; // the step formed ahead of the next is empty: vLLM frees them with these outputs
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::decode_blocks;

    /// Each sequence's blocks counted step by step, as `schedule` takes them.
    fn stepped(rooms: &[i64], steps: usize, block_size: i64, mut free: i64) -> Vec<i64> {
        let mut rooms = rooms.to_vec();
        let mut taken = Vec::new();
        for _ in 0..steps {
            let mut blocks = 0;
            for room in &mut rooms {
                if *room == 0 {
                    blocks += 1;
                    *room += block_size;
                }
                *room -= 1;
            }
            free -= blocks;
            if free < 0 {
                break;
            }
            taken.push(blocks);
        }
        taken
    }

    #[test]
    fn a_step_takes_the_blocks_its_sequences_fill_until_none_are_free() {
        let rooms = [0, 3, 1, 7, 0, 2, 15];
        for block_size in [1, 2, 4, 16] {
            let rooms: Vec<i64> = rooms.iter().map(|r| r % block_size).chain([block_size + 3]).collect();
            for free in [0, 1, 5, 40, 1000] {
                for steps in [0, 1, 9, 100] {
                    assert_eq!(
                        decode_blocks(&rooms, steps, block_size, free),
                        stepped(&rooms, steps, block_size, free),
                        "rooms {rooms:?}, {steps} steps of block size {block_size}, {free} free"
                    );
                }
            }
        }
    }
}
