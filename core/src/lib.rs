//! cosim's compiled simulation core, a Python extension module (`cosim_core`).
//!
//! The simulation's semantics move here from Python piece by piece (issue #37), each piece's
//! Python deleted as it lands. So far: the paged KV block manager with vLLM V1's prefix cache
//! ([`manager::BlockManager`]), over a block pool ([`pool`]) whose entries and free queue
//! ([`free_queue`]) and index ([`slot_map`]) live in copy-on-write vectors ([`cow_vec`]), so that
//! the scheduler's lookahead copies it cheaply; and the per-client scheduler ([`scheduler::Scheduler`]) on Rust sequences
//! ([`sequence::Sequence`]): its batching policies ([`policies`]), packing orders ([`packing`]),
//! and what it hands out and takes back ([`batch`]); and decode runs ([`runs::DecodeRun`]), a step's
//! steady successors taken without forming or updating each, and the lookahead that predicts a
//! step's successors on a scheduler copy ([`forecast::Forecast`]); and the records each step writes on
//! its requests ([`recording`], on the request and stage records of [`records`]), what a request table keeps of their stages
//! ([`stage_sums::StageSums`]), and the rows a run's tables hold in memory ([`rows::RowBuffer`]) and a client's step records
//! ([`timeline::Timeline`]);
//! and each step's energy ([`power::StepEnergy`]); and the run folder's rows as text ([`run_files`],
//! numbers formatted as Python does in [`text`]); and the event loop ([`kernel::Kernel`]); and the roofline
//! backend's step-time model ([`roofline`]).

pub mod batch;
pub mod bounded_cache;
pub mod cow_vec;
pub mod forecast;
pub mod free_queue;
pub mod hasher;
pub mod kernel;
pub mod key;
pub mod manager;
pub mod packing;
pub mod policies;
pub mod pool;
pub mod power;
pub mod recording;
pub mod records;
pub mod roofline;
pub mod rows;
pub mod run_files;
pub mod runs;
pub mod scheduler;
pub mod sequence;
pub mod slot_map;
pub mod stage_sums;
pub mod step_timer;
pub mod stepping;
pub mod text;
pub mod timeline;
pub mod timing;

use pyo3::prelude::*;

/// Blocks needed to hold `num_tokens` tokens of `block_size` each.
#[pyfunction]
fn blocks_for(num_tokens: i64, block_size: i64) -> i64 {
    manager::ceil_div(num_tokens, block_size)
}

#[pymodule]
fn cosim_core(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<manager::BlockManager>()?;
    module.add_class::<sequence::Sequence>()?;
    module.add_class::<batch::ScheduledBatch>()?;
    module.add_class::<batch::StepOutcome>()?;
    module.add_class::<batch::SteadyDecodes>()?;
    module.add_class::<policies::Policy>()?;
    module.add_class::<packing::PyPacking>()?;
    module.add_class::<scheduler::Scheduler>()?;
    module.add_class::<runs::DecodeRun>()?;
    module.add_class::<forecast::Forecast>()?;
    module.add_class::<timing::Timing>()?;
    module.add_class::<timing::TimingCache>()?;
    module.add_class::<timing::SharedTimings>()?;
    module.add_class::<timing::RuntimeSessionProxy>()?;
    module.add_class::<step_timer::StepTimer>()?;
    module.add_class::<step_timer::DraftsAhead>()?;
    module.add_class::<rows::RowBuffer>()?;
    module.add_class::<timeline::Timeline>()?;
    module.add_class::<records::RequestRecord>()?;
    module.add_class::<records::StageRecord>()?;
    module.add_class::<stage_sums::StageSums>()?;
    module.add_function(wrap_pyfunction!(stage_sums::attributed_client, module)?)?;
    module.add_class::<kernel::Kernel>()?;
    module.add_class::<kernel::StopFlag>()?;
    module.add("MAX_SIM_NS", kernel::MAX_SIM_NS)?;
    module.add("DONE", kernel::DONE)?;
    module.add("ARRIVAL", kernel::ARRIVAL)?;
    module.add("WAKE", kernel::WAKE)?;
    module.add_class::<power::StepJoules>()?;
    module.add_class::<power::DevicePower>()?;
    module.add_class::<power::Intensity>()?;
    module.add_class::<power::StepEnergy>()?;
    module.add("IDLE_FRACTION", power::IDLE_FRACTION)?;
    module.add("MEMORY_BOUND_FRACTION", power::MEMORY_BOUND_FRACTION)?;
    module.add_function(wrap_pyfunction!(forecast::predict, module)?)?;
    module.add_function(wrap_pyfunction!(recording::record_start, module)?)?;
    module.add_function(wrap_pyfunction!(recording::record_tokens, module)?)?;
    module.add_function(wrap_pyfunction!(recording::record_run, module)?)?;
    module.add_function(wrap_pyfunction!(blocks_for, module)?)?;
    module.add_function(wrap_pyfunction!(hasher::block_hashes, module)?)?;
    roofline::py::register(module)?;
    run_files::register(module)?;
    Ok(())
}
