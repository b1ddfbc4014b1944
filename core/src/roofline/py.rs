//! The roofline's Python face: [`RooflineModel`] (a session's model, built once at `open_model`)
//! and the functions the Python modules re-export (`adapters/roofline/*.py` keep the docs).

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::cache::{BatchRef, CacheKey, StepCache};
use super::collectives::{self, Formula, PathLink, PCIE_PROTOCOLS};
use super::config::{path_link, Device, Params, Shape};
use super::estimator::{self, Breakdown, Model, StepEstimate};
use super::kernels::{self, KernelParams, Kind};
use super::operators;
use super::stats::{self, BatchStats};
use crate::bounded_cache::Hashed;

/// A roofline session's model: times a step's [`BatchStats`], or a batch as the backend receives
/// it (cached), memoizing what a decode run leaves unchanged.
#[pyclass(module = "cosim_core")]
pub struct RooflineModel {
    pub model: Model,
    cache: StepCache,
}

/// One step's timing as Python reads it: (duration, compute, memory, communication, dispatch
/// ns, breakdown dict or None, energy J or None).
type TimingTuple<'py> = (i64, i64, i64, i64, i64, Option<Bound<'py, PyDict>>, Option<f64>);

fn breakdown_dict<'py>(py: Python<'py>, breakdown: &Breakdown) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, ns) in &breakdown.0 {
        dict.set_item(*key, *ns)?;
    }
    Ok(dict)
}

fn timing_tuple<'py>(py: Python<'py>, t: StepEstimate) -> PyResult<TimingTuple<'py>> {
    let breakdown = t.breakdown.as_ref().map(|b| breakdown_dict(py, b)).transpose()?;
    Ok((t.duration_ns, t.compute_ns, t.memory_ns, t.communication_ns, t.dispatch_ns, breakdown, t.energy_j))
}

/// A batch the backend cannot time: `InvalidArgument(field, value, message)` of the SDK.
pub struct BatchError {
    pub field: &'static str,
    pub value: usize,
    pub message: String,
}

impl BatchError {
    pub fn into_py_err(self, py: Python<'_>) -> PyErr {
        let raised = py
            .import(intern!(py, "cosim.adapters.sdk"))
            .and_then(|sdk| sdk.getattr(intern!(py, "InvalidArgument")))
            .and_then(|class| class.call1((format!("batch.{}", self.field), self.value, self.message)));
        match raised {
            Ok(error) => PyErr::from_value(error),
            Err(err) => err,
        }
    }
}

/// The checks of a batch's per-sequence fields: drafts, LoRA ranks and ids one per sequence
/// (where given).
pub fn check_batch(sequences: usize, drafts: usize, lora_ranks: usize, lora_ids: usize) -> Result<(), BatchError> {
    for (field, len) in [("draft_tokens", drafts), ("lora_ranks", lora_ranks), ("lora_ids", lora_ids)] {
        if len != 0 && len != sequences {
            let message = format!("values, but the batch has {sequences} sequences");
            return Err(BatchError { field, value: len, message });
        }
    }
    Ok(())
}

/// A batch's statistics as the backend times it: decodes by their count and context sum, every
/// token-wise op over the data-parallel group's most tokens (padding rows run no attention or LM
/// head), and its LoRA adapters.
pub fn stats_of_batch(batch: &BatchRef<'_>) -> PyResult<BatchStats> {
    let mut stats = if batch.decodes() {
        stats::decode_stats(batch.new.len() as i64, batch.context.iter().sum())
    } else {
        stats::batch_stats(batch.new, batch.context, batch.drafts)?
    };
    let padded = batch.padded();
    if padded as f64 > stats.tokens {
        stats.tokens = padded as f64;
    }
    if !batch.lora_ranks.is_empty() {
        stats.lora = stats::lora_adapters(batch.new, batch.lora_ranks, batch.lora_ids);
    }
    Ok(stats)
}

impl RooflineModel {
    /// Times a batch as the backend receives it, from the cache where it was timed before
    /// (`slim`: without the breakdown).
    pub fn predict(&mut self, py: Python<'_>, batch: &BatchRef<'_>, slim: bool) -> PyResult<StepEstimate> {
        check_batch(batch.new.len(), batch.drafts.len(), batch.lora_ranks.len(), batch.lora_ids.len())
            .map_err(|e| e.into_py_err(py))?;
        let key = Hashed::new(CacheKey::of(batch, slim));
        if let Some(timing) = self.cache.get(&key) {
            return Ok(timing.clone());
        }
        let timing = self.model.estimate(&stats_of_batch(batch)?, !slim);
        self.cache.store(key, timing.clone());
        Ok(timing)
    }
}

#[pymethods]
impl RooflineModel {
    #[new]
    fn new(shape: Shape, params: Params, device: Device) -> Self {
        RooflineModel { model: Model::new(shape, params, device), cache: StepCache::default() }
    }

    /// Times one step: (duration, compute, memory, communication, dispatch ns, breakdown or None,
    /// energy_j or None).
    #[pyo3(signature = (stats, with_breakdown = true))]
    fn estimate<'py>(
        &mut self,
        py: Python<'py>,
        stats: &BatchStats,
        with_breakdown: bool,
    ) -> PyResult<TimingTuple<'py>> {
        timing_tuple(py, self.model.estimate(stats, with_breakdown))
    }

    /// Times a batch as the backend receives it (`estimate`'s tuple), from the model's cache
    /// where it was timed before: decodes, the data-parallel group's tokens, drafts (zeros: none)
    /// and LoRA ranks and ids (empty: none); `slim`: without the breakdown.
    ///
    /// Raises:
    ///     InvalidArgument: drafts, LoRA ranks or ids not one per sequence.
    #[pyo3(signature = (new, context, dp_rank_tokens, drafts, lora_ranks, lora_ids, slim = false))]
    #[allow(clippy::too_many_arguments)]
    fn predict_batch<'py>(
        &mut self,
        py: Python<'py>,
        new: Vec<i64>,
        context: Vec<i64>,
        dp_rank_tokens: Vec<i64>,
        drafts: Vec<i64>,
        lora_ranks: Vec<i64>,
        lora_ids: Vec<i64>,
        slim: bool,
    ) -> PyResult<TimingTuple<'py>> {
        let batch = BatchRef {
            new: &new,
            context: &context,
            dp_rank_tokens: &dp_rank_tokens,
            drafts: &drafts,
            lora_ranks: &lora_ranks,
            lora_ids: &lora_ids,
        };
        let timing = self.predict(py, &batch, slim)?;
        timing_tuple(py, timing)
    }

    /// Timings in the model's cache.
    fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Device times of a step: (busy per module, comm_attn, comm_mlp, breakdown, totals).
    #[pyo3(signature = (stats, with_breakdown = true))]
    #[allow(clippy::type_complexity)]
    fn device_times<'py>(
        &mut self,
        py: Python<'py>,
        stats: &BatchStats,
        with_breakdown: bool,
    ) -> PyResult<(Vec<f64>, f64, f64, Bound<'py, PyDict>, Vec<f64>)> {
        let times = self.model.device_times(stats, with_breakdown);
        let breakdown = match &times.breakdown {
            Some(breakdown) => breakdown_dict(py, breakdown)?,
            None => PyDict::new(py),
        };
        Ok((times.busy.to_vec(), times.comm_attn, times.comm_mlp, breakdown, times.totals.to_vec()))
    }

    /// Device time per module of one layer's operators whose keys are in `keys` (the attention
    /// core aside), at the decode rates and the step's token count: a layer as kernel
    /// measurements time it.
    fn layer_busy(&self, stats: &BatchStats, keys: Vec<String>) -> Vec<f64> {
        let mut layer = self.model.layer_ops(stats);
        layer.retain(|op| keys.iter().any(|key| key == op.key));
        let mut times = estimator::DeviceTimes::default();
        let rates = self.model.rates(0.0);
        self.model.add_ops(&mut times, &layer, 1, &rates);
        times.busy.to_vec()
    }
}

/// Device time of one kernel in ns, and whether its compute term bounds it.
#[pyfunction]
#[pyo3(signature = (kind, work, traffic, rows, k, peak_flops, mem_bw, span = 0.0))]
#[allow(clippy::too_many_arguments)]
pub fn kernel_ns(
    kind: i64,
    work: f64,
    traffic: f64,
    rows: f64,
    k: KernelParams,
    peak_flops: f64,
    mem_bw: f64,
    span: f64,
) -> PyResult<(f64, bool)> {
    let kind = Kind::from_code(kind).ok_or_else(|| PyValueError::new_err(format!("unknown kernel kind {kind}")))?;
    Ok(kernels::kernel_ns(kind, work, traffic, rows, &k, peak_flops, mem_bw, span))
}

/// Query tiles of one attention call.
#[pyfunction]
pub fn attention_tiles(heads: f64, kv_heads: f64, tokens: f64, seqs: f64) -> f64 {
    kernels::attention_tiles(heads, kv_heads, tokens, seqs)
}

/// The kernel model's time of an MoE layer's routed experts on one rank (`operators.moe_ops`
/// timed by `kernel_ns`, summed).
#[pyfunction]
pub fn moe_ns(shape: Shape, tokens: f64, active: f64, k: KernelParams, peak_flops: f64, mem_bw: f64) -> f64 {
    let mut ops = Vec::new();
    operators::moe_ops(&mut ops, &shape, tokens, active);
    ops.iter().fold(0.0, |sum, op| {
        sum + kernels::kernel_ns(op.kind, op.work, op.traffic, op.rows, &k, peak_flops, mem_bw, op.span).0
    })
}

fn formula(name: &str) -> PyResult<Formula> {
    match name {
        "ring" => Ok(Formula::Ring),
        "bestserve" => Ok(Formula::BestServe),
        other => Err(PyValueError::new_err(format!("unknown all-reduce formula {other:?}"))),
    }
}

/// One all-reduce, in ns.
#[pyfunction]
#[pyo3(signature = (size_bytes, ranks, bus_bytes_per_s, *, latency_us = 0.0, hop_latency_us = 0.0, formula = "ring"))]
pub fn all_reduce_ns(
    size_bytes: f64,
    ranks: i64,
    bus_bytes_per_s: f64,
    latency_us: f64,
    hop_latency_us: f64,
    formula: &str,
) -> PyResult<f64> {
    let formula = self::formula(formula)?;
    Ok(collectives::all_reduce_ns(size_bytes, ranks, bus_bytes_per_s, latency_us, hop_latency_us, formula))
}

/// One all-to-all, in ns.
#[pyfunction]
#[pyo3(signature = (size_bytes, ranks, bus_bytes_per_s, *, latency_us = 0.0, hop_latency_us = 0.0))]
pub fn all_to_all_ns(size_bytes: f64, ranks: i64, bus_bytes_per_s: f64, latency_us: f64, hop_latency_us: f64) -> f64 {
    collectives::all_to_all_ns(size_bytes, ranks, bus_bytes_per_s, latency_us, hop_latency_us)
}

/// NCCL's protocols on PCIe, in the order ties keep: (name, base latency µs, hop latency µs, width).
pub fn pcie_protocols() -> Vec<(&'static str, f64, f64, f64)> {
    PCIE_PROTOCOLS.iter().map(|p| (p.name, p.base_latency_us, p.hop_latency_us, p.width)).collect()
}

/// A collective on a PCIe path with protocol `protocol` (its index in PCIE_PROTOCOLS), in ns.
#[pyfunction]
pub fn path_protocol_ns(
    link: &Bound<'_, PyAny>,
    protocol: usize,
    size_bytes: f64,
    steps: i64,
    share: f64,
) -> PyResult<f64> {
    let protocol = PCIE_PROTOCOLS.get(protocol).ok_or_else(|| PyValueError::new_err("no such protocol"))?;
    Ok(path_link(link)?.protocol_ns(protocol, size_bytes, steps, share))
}

/// The fastest protocol's time in ns on a PCIe path, and its index in PCIE_PROTOCOLS.
#[pyfunction]
pub fn path_fastest_ns(link: &Bound<'_, PyAny>, size_bytes: f64, steps: i64, share: f64) -> PyResult<(f64, usize)> {
    Ok(path_link(link)?.fastest_ns(size_bytes, steps, share))
}

/// Ring all-reduce on a PCIe path, in ns.
#[pyfunction]
pub fn path_all_reduce_ns(size_bytes: f64, ranks: i64, link: &Bound<'_, PyAny>) -> PyResult<f64> {
    let link: PathLink = path_link(link)?;
    Ok(collectives::path_all_reduce_ns(size_bytes, ranks, &link))
}

/// All-to-all on a PCIe path, in ns.
#[pyfunction]
pub fn path_all_to_all_ns(size_bytes: f64, ranks: i64, link: &Bound<'_, PyAny>) -> PyResult<f64> {
    Ok(collectives::path_all_to_all_ns(size_bytes, ranks, &path_link(link)?))
}

/// Sums a batch (`operators.batch_stats`).
#[pyfunction]
#[pyo3(signature = (new_tokens, context_tokens, draft_tokens = Vec::new()))]
pub fn batch_stats(new_tokens: Vec<i64>, context_tokens: Vec<i64>, draft_tokens: Vec<i64>) -> PyResult<BatchStats> {
    stats::batch_stats(&new_tokens, &context_tokens, &draft_tokens)
}

/// A step of `seqs` decodes whose contexts sum to `context_sum`.
#[pyfunction]
pub fn decode_stats(seqs: i64, context_sum: i64) -> BatchStats {
    stats::decode_stats(seqs, context_sum)
}

/// The step's distinct LoRA adapters as (rank, tokens).
#[pyfunction]
pub fn lora_adapters<'py>(
    py: Python<'py>,
    new_tokens: Vec<i64>,
    ranks: Vec<i64>,
    ids: Vec<i64>,
) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, stats::lora_adapters(&new_tokens, &ranks, &ids))
}

/// Algorithm 1 over one pipeline stage, in ns.
#[pyfunction]
pub fn run_stage(pre: Vec<(f64, f64)>, layer: Vec<(f64, f64)>, num_layers: i64, post: Vec<(f64, f64)>) -> f64 {
    estimator::run_stage(&pre, &layer, num_layers, &post)
}

/// Adds the roofline's classes and functions to the module.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<RooflineModel>()?;
    module.add_class::<BatchStats>()?;
    module.add_class::<stats::Group>()?;
    module.add("PCIE_PROTOCOLS", pcie_protocols())?;
    module.add("CUSTOM_AR_MAX_BYTES", estimator::CUSTOM_AR_MAX_BYTES)?;
    for function in [
        wrap_pyfunction!(kernel_ns, module)?,
        wrap_pyfunction!(attention_tiles, module)?,
        wrap_pyfunction!(moe_ns, module)?,
        wrap_pyfunction!(all_reduce_ns, module)?,
        wrap_pyfunction!(all_to_all_ns, module)?,
        wrap_pyfunction!(path_protocol_ns, module)?,
        wrap_pyfunction!(path_fastest_ns, module)?,
        wrap_pyfunction!(path_all_reduce_ns, module)?,
        wrap_pyfunction!(path_all_to_all_ns, module)?,
        wrap_pyfunction!(batch_stats, module)?,
        wrap_pyfunction!(decode_stats, module)?,
        wrap_pyfunction!(lora_adapters, module)?,
        wrap_pyfunction!(run_stage, module)?,
    ] {
        module.add_function(function)?;
    }
    Ok(())
}
