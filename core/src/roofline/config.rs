//! A session's configuration as the model reads it: the per-rank shape, the parameters and the
//! device, taken once from their Python dataclasses (`operators.Shape`, `params.Params`,
//! `estimator.Device`), which resolve and document them.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::collectives::{Formula, PathLink};
use super::kernels::KernelParams;

/// Per-device model dimensions after tensor and expert parallelism (`operators.Shape`).
#[derive(FromPyObject, Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub h: i64,
    pub q: f64,
    pub kv: f64,
    pub heads: f64,
    pub head_dim: i64,
    pub f: f64,
    pub gated: bool,
    pub vocab: f64,
    pub num_experts: i64,
    pub top_k: i64,
    pub experts_local: f64,
    pub tp: i64,
    pub pp: i64,
    pub ep: i64,
    pub layers_per_stage: i64,
    pub bp: f64,
    pub bkv: f64,
    pub ba: f64,
    pub fused: bool,
    pub fitted: bool,
    pub shared_experts: i64,
}

impl Shape {
    /// Decoder layers over every stage.
    pub fn num_layers(&self) -> i64 {
        self.layers_per_stage * self.pp
    }

    /// Expert parallelism replaces the MLP's all-reduce by all-to-alls.
    pub fn expert_parallel(&self) -> bool {
        self.num_experts != 0 && self.ep > 1
    }
}

/// Efficiencies and host costs of one phase (`params.PhaseParams`).
#[derive(FromPyObject, Clone, Copy, Debug, PartialEq)]
pub struct PhaseParams {
    pub mfu: f64,
    pub mbu: f64,
    pub comm_eff: f64,
    pub dispatch_norm_us: f64,
    pub dispatch_attention_us: f64,
    pub dispatch_mlp_us: f64,
    pub dispatch_head_us: f64,
    pub step_overhead_us: f64,
}

/// How the host drives the device (`Params.execution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    Eager,
    Graphs,
    Piecewise,
}

/// All parameters of one session (`params.Params`; its docstring gives each one's meaning).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    pub prefill: PhaseParams,
    pub decode: PhaseParams,
    pub allreduce_formula: Formula,
    pub allreduce_latency_us: f64,
    pub alltoall_latency_us: f64,
    pub hop_latency_us: f64,
    pub p2p_latency_us: f64,
    pub tdp_w: f64,
    /// `op_model: fitted`: operators timed by the fitted kernel model, else at the phase rates.
    pub fitted_ops: bool,
    pub execution: Execution,
    pub eager_comm_eff: f64,
    pub eager_comm_knee_mib: f64,
    pub eager_comm_eff_large: f64,
    pub eager_seq_us: f64,
    pub eager_overlap: f64,
    pub graph_allreduce_latency_us: f64,
    pub graph_allreduce_bus_eff: f64,
    pub graph_step_us: f64,
    pub piecewise_layer_us: f64,
    pub kernel: KernelParams,
}

impl<'py> FromPyObject<'py> for Params {
    fn extract_bound(params: &Bound<'py, PyAny>) -> PyResult<Self> {
        let num = |name: &str| -> PyResult<f64> { params.getattr(name)?.extract() };
        let text = |name: &str| -> PyResult<String> { params.getattr(name)?.extract() };
        let allreduce_formula = match text("allreduce_formula")?.as_str() {
            "ring" => Formula::Ring,
            "bestserve" => Formula::BestServe,
            other => return Err(PyValueError::new_err(format!("unknown allreduce_formula {other:?}"))),
        };
        let execution = match text("execution")?.as_str() {
            "eager" => Execution::Eager,
            "graphs" => Execution::Graphs,
            "piecewise" => Execution::Piecewise,
            other => return Err(PyValueError::new_err(format!("unknown execution {other:?}"))),
        };
        Ok(Params {
            prefill: params.getattr("prefill")?.extract()?,
            decode: params.getattr("decode")?.extract()?,
            allreduce_formula,
            allreduce_latency_us: num("allreduce_latency_us")?,
            alltoall_latency_us: num("alltoall_latency_us")?,
            hop_latency_us: num("hop_latency_us")?,
            p2p_latency_us: num("p2p_latency_us")?,
            tdp_w: num("tdp_w")?,
            fitted_ops: text("op_model")? == "fitted",
            execution,
            eager_comm_eff: num("eager_comm_eff")?,
            eager_comm_knee_mib: num("eager_comm_knee_mib")?,
            eager_comm_eff_large: num("eager_comm_eff_large")?,
            eager_seq_us: num("eager_seq_us")?,
            eager_overlap: num("eager_overlap")?,
            graph_allreduce_latency_us: num("graph_allreduce_latency_us")?,
            graph_allreduce_bus_eff: num("graph_allreduce_bus_eff")?,
            graph_step_us: num("graph_step_us")?,
            piecewise_layer_us: num("piecewise_layer_us")?,
            kernel: params.getattr("kernel")?.extract()?,
        })
    }
}

/// Rates of one device and its links, in FLOP/s and bytes/s (`estimator.Device`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Device {
    pub peak_flops: f64,
    pub mem_bw: f64,
    pub tp_link: f64,
    pub ep_link: f64,
    pub pp_link: f64,
    pub num_devices: i64,
    /// The PCIe path NCCL takes between the box's GPUs; None: NVLink, the ring line.
    pub path: Option<PathLink>,
}

impl<'py> FromPyObject<'py> for Device {
    fn extract_bound(device: &Bound<'py, PyAny>) -> PyResult<Self> {
        let num = |name: &str| -> PyResult<f64> { device.getattr(name)?.extract() };
        let path = device.getattr("path")?;
        Ok(Device {
            peak_flops: num("peak_flops")?,
            mem_bw: num("mem_bw")?,
            tp_link: num("tp_link")?,
            ep_link: num("ep_link")?,
            pp_link: num("pp_link")?,
            num_devices: device.getattr("num_devices")?.extract()?,
            path: if path.is_none() { None } else { Some(path_link(&path)?) },
        })
    }
}

/// The figures of a `collectives.PathLink`.
pub fn path_link(link: &Bound<'_, PyAny>) -> PyResult<PathLink> {
    Ok(PathLink { bus_gbps: link.getattr("bus_gbps")?.extract()?, latency_us: link.getattr("latency_us")?.extract()? })
}
