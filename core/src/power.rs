//! Power and energy of a client's steps: a linear utilization power model per device.
//!
//! The model (docs/energy.md and `cosim.hub.sim.power`, which says where its figures come from), per
//! device: `P(u_c, u_m) = min(P_peak, P_idle + (P_peak - P_idle) u_c + (P_mem - P_idle) u_m)`, with
//! u_c and u_m the shares of the step's duration bound by arithmetic and by memory traffic. A step's
//! energy is P x duration x the devices it occupies, unless the backend reports its own.
//! [`StepEnergy::joules_of`] is what the step timer asks of every step it times, without Python.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::timing::Timing;

const NS_PER_S: f64 = 1e9;

/// H100-SXM's measured fractions of its TDP, the defaults where a device lists only its TDP
/// (Splitwise's simulator power model, configs/power_model/constant.yaml of Mutinifni/splitwise-sim:
/// idle 75 W, token phase 380 W, prompt phase 700 W = TDP).
pub const IDLE_FRACTION: f64 = 75.0 / 700.0;
pub const MEMORY_BOUND_FRACTION: f64 = 380.0 / 700.0;

/// What one step used.
///
/// Args:
///     joules: energy on the client's devices; None when unknown (no power figure, none reported).
///     device_s: device-seconds the step kept busy (for idle energy: the rest of the run's).
///     reported: the backend reported `joules` (its figure stands).
#[pyclass(module = "cosim_core", frozen, eq, get_all)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepJoules {
    pub joules: Option<f64>,
    pub device_s: f64,
    pub reported: bool,
}

#[pymethods]
impl StepJoules {
    #[new]
    #[pyo3(signature = (joules, device_s, reported = false))]
    fn new(joules: Option<f64>, device_s: f64, reported: bool) -> Self {
        StepJoules { joules, device_s, reported }
    }

    /// Pickled and copied by its fields, as the dataclass it replaces.
    fn __getnewargs__(&self) -> (Option<f64>, f64, bool) {
        (self.joules, self.device_s, self.reported)
    }

    fn __repr__(&self) -> String {
        let joules = self.joules.map_or("None".to_owned(), py_float);
        format!(
            "StepJoules(joules={joules}, device_s={}, reported={})",
            py_float(self.device_s),
            if self.reported { "True" } else { "False" }
        )
    }
}

/// A float as Python prints it, for the common cases (`1.0`, `0.25`, `1e-05` prints as Rust's).
fn py_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// One device's power, watts.
///
/// Args:
///     idle_w: drawn with nothing running (clocks up, no kernels).
///     memory_bound_w: drawn through a step bound by memory bandwidth (a decode step).
///     peak_w: drawn through a compute-bound step: the TDP.
///
/// Raises:
///     ValueError: figures out of order (0 <= idle_w <= memory_bound_w <= peak_w).
#[pyclass(module = "cosim_core", frozen, eq, get_all)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevicePower {
    pub idle_w: f64,
    pub memory_bound_w: f64,
    pub peak_w: f64,
}

#[pymethods]
impl DevicePower {
    #[new]
    #[pyo3(signature = (*, idle_w, memory_bound_w, peak_w))]
    fn new(idle_w: f64, memory_bound_w: f64, peak_w: f64) -> PyResult<Self> {
        if !(0.0 <= idle_w && idle_w <= memory_bound_w && memory_bound_w <= peak_w) {
            return Err(PyValueError::new_err(format!(
                "power figures must satisfy 0 <= idle_w <= memory_bound_w <= tdp_w, got idle_w={idle_w}, \
                 memory_bound_w={memory_bound_w}, tdp_w={peak_w}"
            )));
        }
        Ok(DevicePower { idle_w, memory_bound_w, peak_w })
    }

    /// The power of a `HardwareSpec.extra`'s figures; None without `tdp_w` (no power figure).
    /// `idle_w` and `memory_bound_w` default to H100-SXM's fractions of it.
    ///
    /// Raises:
    ///     ValueError: a TDP <= 0, or figures out of order (e.g. idle above TDP).
    #[classmethod]
    fn from_extra(_cls: &Bound<'_, PyType>, extra: &Bound<'_, PyAny>) -> PyResult<Option<Self>> {
        let figure = |name: &str| -> PyResult<Option<f64>> {
            Ok(if extra.contains(name)? { Some(extra.get_item(name)?.extract()?) } else { None })
        };
        let Some(peak) = figure("tdp_w")? else {
            return Ok(None);
        };
        if peak <= 0.0 {
            return Err(PyValueError::new_err(format!("tdp_w must be > 0, got {peak}")));
        }
        let idle = figure("idle_w")?.unwrap_or(IDLE_FRACTION * peak);
        let memory_bound = figure("memory_bound_w")?.unwrap_or(idle.max(MEMORY_BOUND_FRACTION * peak));
        DevicePower::new(idle, memory_bound, peak).map(Some)
    }

    /// Power of one device whose step is `u_compute` compute-bound and `u_memory` memory-bound
    /// (shares of its duration, each in [0, 1]).
    pub fn power_w(&self, u_compute: f64, u_memory: f64) -> f64 {
        let watts =
            self.idle_w + (self.peak_w - self.idle_w) * u_compute + (self.memory_bound_w - self.idle_w) * u_memory;
        if watts < self.peak_w {
            watts
        } else {
            self.peak_w
        }
    }

    /// Pickled and copied by its fields (keywords), as the dataclass it replaces.
    fn __getnewargs_ex__<'py>(&self, py: Python<'py>) -> PyResult<((), Bound<'py, PyDict>)> {
        let fields = PyDict::new(py);
        fields.set_item("idle_w", self.idle_w)?;
        fields.set_item("memory_bound_w", self.memory_bound_w)?;
        fields.set_item("peak_w", self.peak_w)?;
        Ok(((), fields))
    }

    /// The figures under their config names (for summary.json).
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("idle_w", self.idle_w)?;
        dict.set_item("memory_bound_w", self.memory_bound_w)?;
        dict.set_item("tdp_w", self.peak_w)?;
        Ok(dict)
    }

    fn __repr__(&self) -> String {
        format!(
            "DevicePower(idle_w={}, memory_bound_w={}, peak_w={})",
            py_float(self.idle_w),
            py_float(self.memory_bound_w),
            py_float(self.peak_w)
        )
    }
}

/// A batch's roofline times from the model's shape, for the split of a step's busy time when the
/// backend reports none (`memory_ns` 0): FLOPs at peak against bytes at full bandwidth.
///
/// FLOPs are 2 per active parameter per token plus attention's 4 per query-head dimension per
/// (new, attended) token pair per layer (Kaplan et al., "Scaling Laws for Neural Language Models",
/// 2020, Table 1, with the context read from KV); bytes are the active weights once per step plus
/// the KV of every attended token. Only the ratio matters, so whole-cluster figures serve.
///
/// Args:
///     flops_per_token: 2 x active parameters.
///     flops_per_pair: 4 x layers x query heads x head dim.
///     weight_bytes: active weights read each step.
///     kv_bytes_per_token: KV bytes of one token (all layers).
///     peak_flops: FLOP/s of the cluster.
///     mem_bytes_per_s: memory bandwidth of the cluster, bytes/s.
#[pyclass(module = "cosim_core", frozen, eq, get_all)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Intensity {
    pub flops_per_token: f64,
    pub flops_per_pair: f64,
    pub weight_bytes: f64,
    pub kv_bytes_per_token: f64,
    pub peak_flops: f64,
    pub mem_bytes_per_s: f64,
}

#[pymethods]
impl Intensity {
    #[new]
    #[pyo3(signature = (*, flops_per_token, flops_per_pair, weight_bytes, kv_bytes_per_token, peak_flops,
                        mem_bytes_per_s))]
    fn new(
        flops_per_token: f64,
        flops_per_pair: f64,
        weight_bytes: f64,
        kv_bytes_per_token: f64,
        peak_flops: f64,
        mem_bytes_per_s: f64,
    ) -> Self {
        Intensity { flops_per_token, flops_per_pair, weight_bytes, kv_bytes_per_token, peak_flops, mem_bytes_per_s }
    }

    fn __getnewargs_ex__<'py>(&self, py: Python<'py>) -> PyResult<((), Bound<'py, PyDict>)> {
        let fields = PyDict::new(py);
        for (name, value) in [
            ("flops_per_token", self.flops_per_token),
            ("flops_per_pair", self.flops_per_pair),
            ("weight_bytes", self.weight_bytes),
            ("kv_bytes_per_token", self.kv_bytes_per_token),
            ("peak_flops", self.peak_flops),
            ("mem_bytes_per_s", self.mem_bytes_per_s),
        ] {
            fields.set_item(name, value)?;
        }
        Ok(((), fields))
    }

    /// (compute, memory) time of the batch, each over the larger of the two: (1, x) when
    /// compute-bound, (x, 1) when memory-bound.
    pub fn shares(&self, num_new: Vec<i64>, context: Vec<i64>) -> (f64, f64) {
        self.shares_of(&num_new, &context)
    }
}

impl Intensity {
    /// See `shares`. Token counts are summed as integers, then multiplied as floats (as Python does).
    fn shares_of(&self, num_new: &[i64], context: &[i64]) -> (f64, f64) {
        let tokens: i64 = num_new.iter().sum();
        let attended = context.iter().sum::<i64>() + tokens;
        let pairs: i64 = num_new.iter().zip(context).map(|(n, c)| n * c).sum::<i64>()
            + num_new.iter().map(|n| n * (n + 1) / 2).sum::<i64>();
        let t_c = (self.flops_per_token * tokens as f64 + self.flops_per_pair * pairs as f64) / self.peak_flops;
        let t_m = (self.weight_bytes + self.kv_bytes_per_token * attended as f64) / self.mem_bytes_per_s;
        let top = if t_c > t_m { t_c } else { t_m };
        if top > 0.0 {
            (t_c / top, t_m / top)
        } else {
            (0.0, 0.0)
        }
    }
}

/// The energy of one client's steps (see the module docs).
///
/// Args:
///     power: one device's power; None: unknown (only a backend's own figure counts).
///     num_devices: the client's devices.
///     stages: its pipeline stages (a step keeps num_devices / stages busy at a time).
///     intensity: the fallback split of a step's busy time where the backend reports none;
///         None: busy time counts as compute-bound.
#[pyclass(module = "cosim_core", frozen)]
pub struct StepEnergy {
    #[pyo3(get)]
    power: Option<DevicePower>,
    #[pyo3(get)]
    intensity: Option<Intensity>,
    #[pyo3(get)]
    active_devices: f64,
}

#[pymethods]
impl StepEnergy {
    #[new]
    #[pyo3(signature = (*, power, num_devices, stages = 1, intensity = None))]
    fn new(power: Option<DevicePower>, num_devices: i64, stages: i64, intensity: Option<Intensity>) -> Self {
        StepEnergy { power, intensity, active_devices: num_devices as f64 / stages.max(1) as f64 }
    }

    /// (u_compute, u_memory): the shares of `duration_ns` (the step as the hub timed it, host time
    /// and swaps included) bound by arithmetic and by memory. The backend's split where it reports
    /// one (`memory_ns` > 0: every forward pass reads its weights); else its busy time (`compute_ns`,
    /// or the duration less collectives and dispatch) split by `intensity`.
    fn utilization(&self, timing: &Timing, duration_ns: i64, num_new: Vec<i64>, context: Vec<i64>) -> (f64, f64) {
        self.utilization_of(timing, duration_ns, &num_new, &context)
    }

    /// The energy of one step lasting `duration_ns`: the backend's `energy_j` where set, else the
    /// power model's.
    fn step(&self, timing: &Timing, duration_ns: i64, num_new: Vec<i64>, context: Vec<i64>) -> StepJoules {
        self.joules_of(timing, duration_ns, &num_new, &context)
    }
}

impl StepEnergy {
    fn utilization_of(&self, timing: &Timing, duration_ns: i64, num_new: &[i64], context: &[i64]) -> (f64, f64) {
        if duration_ns <= 0 {
            return (0.0, 0.0);
        }
        let duration = duration_ns as f64;
        if timing.memory_ns > 0 {
            return ((timing.compute_ns as f64 / duration).min(1.0), (timing.memory_ns as f64 / duration).min(1.0));
        }
        let busy = if timing.compute_ns != 0 {
            timing.compute_ns
        } else {
            (timing.duration_ns - timing.communication_ns - timing.dispatch_ns).max(0)
        };
        let share = (busy as f64 / duration).min(1.0);
        match &self.intensity {
            None => (share, 0.0),
            Some(intensity) => {
                let (s_c, s_m) = intensity.shares_of(num_new, context);
                (s_c * share, s_m * share)
            }
        }
    }

    /// See `step`.
    pub fn joules_of(&self, timing: &Timing, duration_ns: i64, num_new: &[i64], context: &[i64]) -> StepJoules {
        let device_s = duration_ns as f64 / NS_PER_S * self.active_devices;
        if let Some(joules) = timing.energy_j {
            return StepJoules { joules: Some(joules), device_s, reported: true };
        }
        let Some(power) = &self.power else {
            return StepJoules { joules: None, device_s, reported: false };
        };
        let (u_c, u_m) = self.utilization_of(timing, duration_ns, num_new, context);
        StepJoules { joules: Some(power.power_w(u_c, u_m) * device_s), device_s, reported: false }
    }
}
