//! BestServe's Estimator: the adapted roofline (or the fitted kernel model) per operator, the
//! collectives, and Algorithm 1's overlap of host dispatch with the device (the model:
//! `adapters/roofline/estimator.py`'s docstring and docs/roofline.md).
//!
//! Every sum keeps the Python model's order of float additions, so the floats are its.

use rustc_hash::FxHashMap;

use super::collectives::{all_reduce_ns, all_to_all_ns, path_all_reduce_ns, path_all_to_all_ns, Formula};
use super::config::{Device, Execution, Params, Shape};
use super::kernels::{kernel_ns, py_max, py_min};
use super::operators::{self as ops, Op, ATTENTION, EMBED, HEAD, MLP, MODULES, NORM_IN, NORM_POST};
use super::stats::BatchStats;

const NS: f64 = 1e9;
const MIB: f64 = 1024.0 * 1024.0;
/// vLLM's custom all-reduce takes messages up to 8 MiB (CustomAllreduce max_size); NCCL larger ones.
pub const CUSTOM_AR_MAX_BYTES: f64 = 8.0 * MIB;
/// Fixed parts kept per model before the memo starts again.
const MEMO_SIZE: usize = 4096;

/// Time per operator key, in the order the keys first appear (a proto map built from it keeps
/// that order, as the Python dict it replaces).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Breakdown(pub Vec<(&'static str, f64)>);

impl Breakdown {
    /// Adds `ns` to `key`'s time (a key added first holds 0 + ns).
    pub fn add(&mut self, key: &'static str, ns: f64) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, total)) => *total += ns,
            None => self.0.push((key, 0.0 + ns)),
        }
    }

    /// Sets `key`'s time.
    pub fn set(&mut self, key: &'static str, ns: f64) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, total)) => *total = ns,
            None => self.0.push((key, ns)),
        }
    }
}

/// Device-side times of one step, before the dispatch overlap (ns).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceTimes {
    /// Device time of one instance of each module (EMBED..HEAD), collectives included.
    pub busy: [f64; MODULES],
    /// Collective time after one attention / MLP module.
    pub comm_attn: f64,
    pub comm_mlp: f64,
    /// Time per operator key over the whole step (None: not kept).
    pub breakdown: Option<Breakdown>,
    /// Compute-bound and memory-bound operator time, whole step.
    pub totals: [f64; 2],
}

/// What every step with the same token and sequence counts and prefill group shares: the device
/// times of every operator but the attention core (collectives not yet in `busy`), the
/// collectives over the step's layers, and the host costs of [`Model::host_ns`].
#[derive(Clone, Debug)]
struct Fixed {
    times: DeviceTimes,
    comm: f64,
    host: [f64; 5],
}

/// Compute and memory rates (FLOP/s, B/s) of the BLEND, PREFILL and DECODE groups.
pub type Rates = ([f64; 3], [f64; 3]);

/// A memo key: the step's tokens, sequences and prefill group.
type FixedKey = (u64, i64, [u64; 6]);

/// One step's timing, as a StepTiming carries it.
#[derive(Clone, Debug, PartialEq)]
pub struct StepEstimate {
    pub duration_ns: i64,
    pub compute_ns: i64,
    pub memory_ns: i64,
    pub communication_ns: i64,
    pub dispatch_ns: i64,
    /// Reported where the parameters give a TDP (`tdp_w`).
    pub energy_j: Option<f64>,
    pub breakdown: Option<Breakdown>,
}

/// Python's `round(x)` of a float: half to even.
fn round_ns(x: f64) -> i64 {
    x.round_ties_even() as i64
}

/// A session's model: its shape, parameters and device, and the memo of fixed parts.
#[derive(Clone, Debug)]
pub struct Model {
    pub shape: Shape,
    pub params: Params,
    pub device: Device,
    memo: FxHashMap<FixedKey, Fixed>,
}

fn blend(a: f64, b: f64, w: f64) -> f64 {
    w * a + (1.0 - w) * b
}

impl Model {
    pub fn new(shape: Shape, params: Params, device: Device) -> Self {
        Model { shape, params, device, memo: FxHashMap::default() }
    }

    /// The collectives' bus efficiency: the phases' blend, or the eager engine's own.
    fn comm_eff(&self, b: &BatchStats) -> f64 {
        let p = &self.params;
        if p.execution == Execution::Eager && p.eager_comm_eff != 0.0 {
            return p.eager_comm_eff;
        }
        blend(p.prefill.comm_eff, p.decode.comm_eff, b.prefill_share)
    }

    /// Per-layer collective time after attention and after the MLP, in ns.
    fn comm_ns(&self, b: &BatchStats, comm_eff: f64) -> (f64, f64) {
        let (s, p, d) = (&self.shape, &self.params, &self.device);
        let (mut attn, mut mlp) = (0.0, 0.0);
        let eager = p.execution == Execution::Eager;
        if s.tp > 1 {
            let size = s.ba * b.tokens * s.h as f64; // the activations every rank holds after the module
            let ring = |size: f64, bus: f64, latency_us: f64, hop_latency_us: f64| {
                all_reduce_ns(size, s.tp, bus, latency_us, hop_latency_us, p.allreduce_formula)
            };
            attn = if let Some(path) = &d.path {
                path_all_reduce_ns(size, s.tp, path)
            } else if eager && p.eager_comm_knee_mib != 0.0 && size > p.eager_comm_knee_mib * MIB {
                // The eager engine's bytes beyond the knee move at its lower large-message efficiency.
                let knee = p.eager_comm_knee_mib * MIB;
                let large = if p.eager_comm_eff_large != 0.0 { p.eager_comm_eff_large } else { comm_eff };
                ring(knee, comm_eff * d.tp_link, p.allreduce_latency_us, p.hop_latency_us)
                    + ring(size - knee, large * d.tp_link, 0.0, 0.0)
            } else {
                ring(size, comm_eff * d.tp_link, p.allreduce_latency_us, p.hop_latency_us)
            };
            if d.path.is_none() && p.graph_allreduce_bus_eff != 0.0 && !eager && size <= CUSTOM_AR_MAX_BYTES {
                // vLLM's custom all-reduce; taking the faster keeps a step monotone across the 8 MiB cut
                let custom = all_reduce_ns(
                    size,
                    s.tp,
                    p.graph_allreduce_bus_eff * d.tp_link,
                    p.graph_allreduce_latency_us,
                    0.0,
                    Formula::Ring,
                );
                attn = py_min(attn, custom);
            }
            mlp = attn;
        }
        if s.expert_parallel() {
            // Dispatch and combine of each rank's share of the T k token copies; replaces the MLP all-reduce.
            let size = s.ba * s.h as f64 * b.tokens * s.top_k as f64 / s.ep as f64;
            mlp = match &d.path {
                Some(path) if d.ep_link == d.tp_link => 2.0 * path_all_to_all_ns(size, s.ep, path),
                _ => 2.0 * all_to_all_ns(size, s.ep, comm_eff * d.ep_link, p.alltoall_latency_us, p.hop_latency_us),
            };
        }
        (attn, mlp)
    }

    /// The groups' rates for a step with this prefill share.
    pub fn rates(&self, prefill_share: f64) -> Rates {
        let (pre, dec, dev) = (&self.params.prefill, &self.params.decode, &self.device);
        let w = prefill_share;
        (
            [blend(pre.mfu, dec.mfu, w) * dev.peak_flops, pre.mfu * dev.peak_flops, dec.mfu * dev.peak_flops],
            [blend(pre.mbu, dec.mbu, w) * dev.mem_bw, pre.mbu * dev.mem_bw, dec.mbu * dev.mem_bw],
        )
    }

    /// Adds each operator's time (`mult` instances in the step) to `times`: the adapted roofline
    /// at its phase's rates, or the fitted kernel model.
    pub fn add_ops(&self, times: &mut DeviceTimes, op_list: &[Op], mult: i64, rates: &Rates) {
        let mult = mult as f64;
        let fitted = self.params.fitted_ops;
        let (k, peak, bw) = (&self.params.kernel, self.device.peak_flops, self.device.mem_bw);
        for op in op_list {
            let (t, memory_bound) = if fitted {
                let (t, compute_bound) = kernel_ns(op.kind, op.work, op.traffic, op.rows, k, peak, bw, op.span);
                (t, !compute_bound)
            } else {
                let t_c = op.work / rates.0[op.group] * NS;
                let t_m = op.traffic / rates.1[op.group] * NS;
                (if t_c >= t_m { t_c } else { t_m }, t_c < t_m)
            };
            times.busy[op.module] += t;
            if let Some(breakdown) = times.breakdown.as_mut() {
                breakdown.add(op.key, t * mult);
            }
            times.totals[memory_bound as usize] += t * mult;
        }
    }

    /// The layer's operators but the attention core, at the step's token count.
    pub fn layer_ops(&self, b: &BatchStats) -> Vec<Op> {
        let s = &self.shape;
        let mut layer = Vec::with_capacity(24);
        ops::norm_ops(&mut layer, NORM_IN, s, b.tokens);
        ops::attention_ops(&mut layer, s, b);
        ops::norm_ops(&mut layer, NORM_POST, s, b.tokens);
        ops::mlp_ops(&mut layer, s, b);
        layer
    }

    fn fixed_times(&self, b: &BatchStats) -> Fixed {
        let s = &self.shape;
        let mut times = DeviceTimes { breakdown: Some(Breakdown::default()), ..DeviceTimes::default() };
        let rates = self.rates(b.prefill_share);
        let (mut embed, mut head) = (Vec::with_capacity(1), Vec::with_capacity(8));
        ops::embed_ops(&mut embed, s, b);
        ops::head_ops(&mut head, s, b);
        self.add_ops(&mut times, &self.layer_ops(b), s.num_layers(), &rates);
        self.add_ops(&mut times, &embed, 1, &rates);
        self.add_ops(&mut times, &head, 1, &rates);
        (times.comm_attn, times.comm_mlp) = self.comm_ns(b, self.comm_eff(b));
        let comm = (times.comm_attn + times.comm_mlp) * s.layers_per_stage as f64 * s.pp as f64;
        Fixed { times, comm, host: self.host_ns(b) }
    }

    /// Memoizes the step's fixed part and returns its key: it depends only on the token and sequence counts and
    /// the prefill group, so every step of a decode run shares it.
    fn memoize_fixed(&mut self, b: &BatchStats) -> FixedKey {
        let key = (b.tokens.to_bits(), b.seqs, b.prefill.key());
        if !self.memo.contains_key(&key) {
            let fixed = self.fixed_times(b);
            if self.memo.len() >= MEMO_SIZE {
                self.memo.clear();
            }
            self.memo.insert(key, fixed);
        }
        key
    }

    /// The step's device times from its fixed part: a copy plus the attention core (and LoRA),
    /// then the collectives, in that order.
    fn step_times(&self, b: &BatchStats, fixed: &DeviceTimes, with_breakdown: bool) -> DeviceTimes {
        let s = &self.shape;
        let num_layers = s.num_layers();
        let mut times = DeviceTimes {
            busy: fixed.busy,
            totals: fixed.totals,
            comm_attn: fixed.comm_attn,
            comm_mlp: fixed.comm_mlp,
            breakdown: if with_breakdown { fixed.breakdown.clone() } else { None },
        };
        let rates = self.rates(b.prefill_share);
        let mut step_ops = Vec::with_capacity(8);
        ops::core_ops(&mut step_ops, s, b);
        ops::lora_ops(&mut step_ops, s, &b.lora);
        self.add_ops(&mut times, &step_ops, num_layers, &rates);
        times.busy[ATTENTION] += times.comm_attn;
        times.busy[MLP] += times.comm_mlp;
        if let Some(breakdown) = times.breakdown.as_mut() {
            if times.comm_attn != 0.0 {
                breakdown.add("allreduce", times.comm_attn * num_layers as f64);
            }
            if times.comm_mlp != 0.0 {
                let key = if s.expert_parallel() { "all_to_all" } else { "allreduce" };
                breakdown.add(key, times.comm_mlp * num_layers as f64);
            }
        }
        times
    }

    /// Times every operator of a step (without the breakdown unless `with_breakdown`).
    pub fn device_times(&mut self, b: &BatchStats, with_breakdown: bool) -> DeviceTimes {
        let key = self.memoize_fixed(b);
        self.step_times(b, &self.memo[&key].times, with_breakdown)
    }

    /// Host costs of a step by execution mode: dispatch per RMSNorm, attention, MLP and head
    /// module (overlapped with the device by Algorithm 1), and the step's own host time, in ns.
    fn host_ns(&self, b: &BatchStats) -> [f64; 5] {
        let p = &self.params;
        match p.execution {
            Execution::Eager => {
                let phase = if b.prefill.seqs != 0 { &p.prefill } else { &p.decode };
                [
                    phase.dispatch_norm_us * 1e3,
                    phase.dispatch_attention_us * 1e3,
                    phase.dispatch_mlp_us * 1e3,
                    phase.dispatch_head_us * 1e3,
                    (phase.step_overhead_us + b.seqs as f64 * p.eager_seq_us) * 1e3,
                ]
            }
            // vLLM V1 replays a uniform decode batch as one graph
            Execution::Graphs if b.prefill.seqs == 0 => [0.0, 0.0, 0.0, 0.0, p.graph_step_us * 1e3],
            _ => [0.0, p.piecewise_layer_us * 1e3, 0.0, 0.0, p.graph_step_us * 1e3],
        }
    }

    /// Times one step.
    pub fn estimate(&mut self, b: &BatchStats, with_breakdown: bool) -> StepEstimate {
        let key = self.memoize_fixed(b);
        let fixed = &self.memo[&key];
        let (mut comm, host) = (fixed.comm, fixed.host);
        let times = self.step_times(b, &fixed.times, with_breakdown);
        let (s, p, dev) = (&self.shape, &self.params, &self.device);
        let (busy, [compute, memory], mut breakdown) = (times.busy, times.totals, times.breakdown);
        let [d_norm, d_attn, d_mlp, d_head, overhead] = host;
        let layer = [(d_norm, busy[NORM_IN]), (d_attn, busy[ATTENTION]), (d_norm, busy[NORM_POST]), (d_mlp, busy[MLP])];
        let (first, last) = ([(0.0, busy[EMBED])], [(d_head, busy[HEAD])]);
        let overlap = if p.execution == Execution::Eager { p.eager_overlap } else { 1.0 };
        let total = if s.pp == 1 {
            stage_ns(&first, &layer, s.layers_per_stage, &last, overlap)
        } else {
            // One microbatch through every stage in turn (see docs/roofline.md).
            let send = p.p2p_latency_us * 1e3 + s.ba * b.tokens * s.h as f64 / (self.comm_eff(b) * dev.pp_link) * NS;
            let total = stage_ns(&first, &layer, s.layers_per_stage, &[], overlap)
                + (s.pp - 2) as f64 * stage_ns(&[], &layer, s.layers_per_stage, &[], overlap)
                + stage_ns(&[], &layer, s.layers_per_stage, &last, overlap)
                + (s.pp - 1) as f64 * send;
            comm += (s.pp - 1) as f64 * send;
            if let Some(breakdown) = breakdown.as_mut() {
                breakdown.set("pp_send", (s.pp - 1) as f64 * send);
            }
            total
        };
        let exposed = py_max(total - compute - memory - comm, 0.0);
        if let Some(breakdown) = breakdown.as_mut() {
            breakdown.set("dispatch", exposed);
            if overhead != 0.0 {
                breakdown.set("step_overhead", overhead);
            }
        }
        let duration = total + overhead;
        StepEstimate {
            duration_ns: round_ns(duration),
            compute_ns: round_ns(compute),
            memory_ns: round_ns(memory),
            communication_ns: round_ns(comm),
            dispatch_ns: round_ns(exposed + overhead),
            // unset otherwise: the hub's power model weighs compute_ns and memory_ns
            energy_j: (p.tdp_w != 0.0).then(|| p.tdp_w * dev.num_devices as f64 * duration / NS),
            breakdown,
        }
    }
}

/// Algorithm 1 over one pipeline stage; returns its time in ns.
///
/// Each entry is (dispatch, device time) of a module. The CPU runs ahead across layers
/// (BestServe Fig. 5), so a layer's time depends on the lag carried in. All layers are equal, so
/// once a whole layer is device bound with C >= D the rest add C each, and once the lag repeats
/// the rest add D each; both are exact and keep the loop to a few layers.
pub fn run_stage(pre: &[(f64, f64)], layer: &[(f64, f64)], num_layers: i64, post: &[(f64, f64)]) -> f64 {
    let (mut td, mut tc) = (0.0f64, 0.0f64); // when the CPU has dispatched, and the device finished
    for &(dispatch, busy) in pre {
        td += dispatch;
        tc = (if td > tc { td } else { tc }) + busy;
    }
    let (mut d_layer, mut c_layer) = (0.0, 0.0);
    for &(dispatch, busy) in layer {
        d_layer += dispatch;
        c_layer += busy;
    }
    let mut last_lag: Option<f64> = None;
    for done in 1..=num_layers {
        let mut dispatch_bound = false; // a module of this layer waited for its dispatch
        for &(dispatch, busy) in layer {
            td += dispatch;
            if td > tc {
                dispatch_bound = true;
                tc = td + busy;
            } else {
                tc += busy;
            }
        }
        let (left, lag) = ((num_layers - done) as f64, tc - td);
        if !dispatch_bound && c_layer >= d_layer {
            (td, tc) = (td + left * d_layer, tc + left * c_layer);
            break;
        }
        if let Some(last) = last_lag {
            if (lag - last).abs() <= 1e-9 * py_max(1.0, lag.abs()) {
                (td, tc) = (td + left * d_layer, tc + left * d_layer);
                break;
            }
        }
        last_lag = Some(lag);
    }
    for &(dispatch, busy) in post {
        td += dispatch;
        tc = (if td > tc { td } else { tc }) + busy;
    }
    tc
}

/// One stage with a share `overlap` of the host's dispatch hidden behind the device: 1 is
/// Algorithm 1 ([`run_stage`]), 0 a host and device that take turns.
pub fn stage_ns(pre: &[(f64, f64)], layer: &[(f64, f64)], num_layers: i64, post: &[(f64, f64)], overlap: f64) -> f64 {
    let overlapped = run_stage(pre, layer, num_layers, post);
    if overlap >= 1.0 {
        return overlapped;
    }
    let sum = |modules: &[(f64, f64)]| modules.iter().fold(0.0, |sum, &(d, c)| sum + (d + c));
    let serial = sum(pre) + num_layers as f64 * sum(layer) + sum(post);
    overlap * overlapped + (1.0 - overlap) * serial
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_1_by_hand() {
        // dispatch bound: the host's 20 per layer; compute bound: the device's 20; mixed: the lag repeats
        assert_eq!(run_stage(&[], &[(10.0, 1.0), (10.0, 1.0)], 3, &[]), 61.0);
        assert_eq!(run_stage(&[], &[(1.0, 10.0), (1.0, 10.0)], 3, &[]), 61.0);
        assert_eq!(run_stage(&[], &[(5.0, 1.0), (1.0, 10.0)], 3, &[]), 38.0);
    }

    #[test]
    fn a_host_that_takes_turns_with_the_device_adds_everything() {
        let layer = [(5.0, 1.0), (1.0, 10.0)];
        assert_eq!(stage_ns(&[(2.0, 3.0)], &layer, 3, &[(1.0, 1.0)], 0.0), 5.0 + 3.0 * 17.0 + 2.0);
    }
}
