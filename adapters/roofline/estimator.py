"""BestServe's Estimator: adapted roofline per operator and Algorithm 1.

An operator with work W and traffic Q runs at P = min(I, I*) e_m S_m with
I = W/Q and I* = (e_c/e_m)(S_c/S_m) (BestServe eq. 5), so it takes
W/P = max(W/(e_c S_c), Q/(e_m S_m)): the first term when it is compute
bound, the second when it is memory bound. A module's device time is the
sum over its operators plus its collective (TP all-reduce, ring or formula
8, or the MoE all-to-all; :mod:`.collectives`). Algorithm 1 then overlaps
the CPU, which dispatches the modules one after another, with the device,
which starts a module when it has been dispatched and the previous one has
finished.

With ``op_model: fitted`` (the default profile) each operator is timed by the
fitted kernel model instead (:mod:`.kernels`), and the host follows the
execution mode (:func:`_host_ns`): vLLM V1 replays a decode-only step as one
CUDA graph and runs other steps as piecewise graphs, so Algorithm 1's eager
per-module dispatch applies only under ``execution: eager``.

Main names: :class:`Device`, :class:`SessionModel`, :func:`device_times`, :func:`estimate`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from cosim.v1 import types_pb2 as pb

from . import operators as ops
from .collectives import PathLink, all_reduce_ns, all_to_all_ns, path_all_reduce_ns, path_all_to_all_ns
from .kernels import kernel_ns
from .operators import ATTENTION, EMBED, HEAD, MLP, NORM_IN, NORM_POST, BatchStats, Group, Shape
from .params import Params

NS = 1e9
MIB = 1024 * 1024
# vLLM's custom all-reduce takes messages up to 8 MiB (CustomAllreduce max_size = 8192 * 1024 bytes,
# vllm/distributed/device_communicators/custom_all_reduce.py); NCCL takes larger ones.
CUSTOM_AR_MAX_BYTES = 8 * MIB


@dataclasses.dataclass(frozen=True)
class Device:
    """Rates of one device and its links, in FLOP/s and bytes/s."""

    peak_flops: float
    mem_bw: float
    tp_link: float   # all-reduce bandwidth S_+ (intra-node)
    ep_link: float   # all-to-all bandwidth
    pp_link: float   # stage-to-stage bandwidth
    num_devices: int  # devices one step occupies (for energy)
    # The path NCCL takes between the GPUs of a box without NVLink (p2p, switch or host-staged: the
    # device preset's intra_node_path), timed with its protocols in place of the ring line; None: the ring.
    path: PathLink | None = None


@dataclasses.dataclass(frozen=True)
class SessionModel:
    """What ``open_session`` precomputes: shape, parameters and device.

    ``memo`` keeps what a decode run leaves unchanged (:class:`_Fixed`, see
    :func:`_fixed_times`), and ``rates`` the groups' rates by prefill share;
    neither is part of the model.
    """

    shape: Shape
    params: Params
    device: Device
    memo: dict[tuple[float, int, Group], _Fixed] = dataclasses.field(
        default_factory=dict, compare=False, repr=False)
    rates: dict[float, tuple[tuple[float, float, float], tuple[float, float, float]]] = dataclasses.field(
        default_factory=dict, compare=False, repr=False)


MEMO_SIZE = 4096


def _blend(a: float, b: float, w: float) -> float:
    return w * a + (1.0 - w) * b


def _comm_eff(p: Params, b: BatchStats) -> float:
    """The collectives' bus efficiency: the phases' blend, or the eager engine's own."""
    if p.execution == "eager" and p.eager_comm_eff:
        return p.eager_comm_eff
    return _blend(p.prefill.comm_eff, p.decode.comm_eff, b.prefill_share)


def _comm_ns(m: SessionModel, b: BatchStats, comm_eff: float) -> tuple[float, float]:
    """Per-layer collective time after attention and after the MLP, in ns (see :mod:`.collectives`)."""
    s, p, d = m.shape, m.params, m.device
    attn = mlp = 0.0
    if s.tp > 1:
        size = s.ba * b.tokens * s.h  # the activations every rank must hold after the module
        if d.path is not None:
            attn = mlp = path_all_reduce_ns(size, s.tp, d.path)
        elif p.execution == "eager" and p.eager_comm_knee_mib and size > p.eager_comm_knee_mib * MIB:
            # The eager engine's bytes beyond the knee move at its lower large-message efficiency.
            knee = p.eager_comm_knee_mib * MIB
            attn = mlp = (all_reduce_ns(knee, s.tp, comm_eff * d.tp_link, latency_us=p.allreduce_latency_us,
                                        hop_latency_us=p.hop_latency_us, formula=p.allreduce_formula)
                          + all_reduce_ns(size - knee, s.tp, (p.eager_comm_eff_large or comm_eff) * d.tp_link,
                                          formula=p.allreduce_formula))
        else:
            attn = mlp = all_reduce_ns(size, s.tp, comm_eff * d.tp_link, latency_us=p.allreduce_latency_us,
                                       hop_latency_us=p.hop_latency_us, formula=p.allreduce_formula)
        if d.path is None and p.graph_allreduce_bus_eff and p.execution != "eager" and size <= CUSTOM_AR_MAX_BYTES:
            # vLLM's custom all-reduce; taking the faster keeps a step monotone across the 8 MiB cut
            custom = all_reduce_ns(size, s.tp, p.graph_allreduce_bus_eff * d.tp_link,
                                   latency_us=p.graph_allreduce_latency_us, formula="ring")
            attn = mlp = min(attn, custom)
    if s.num_experts and s.ep > 1:
        # Dispatch and combine: each rank holds its share of the T k token copies and sends
        # (ep - 1)/ep of them to other ranks. EP replaces the MLP all-reduce.
        size = s.ba * s.h * b.tokens * s.top_k / s.ep
        if d.path is not None and d.ep_link == d.tp_link:  # the experts' ranks share the box's path
            mlp = 2.0 * path_all_to_all_ns(size, s.ep, d.path)
        else:
            mlp = 2.0 * all_to_all_ns(size, s.ep, comm_eff * d.ep_link, latency_us=p.alltoall_latency_us,
                                      hop_latency_us=p.hop_latency_us)
    return attn, mlp


def _run_stage(pre: list[tuple[float, float]], layer: list[tuple[float, float]], num_layers: int,
               post: list[tuple[float, float]]) -> float:
    """Algorithm 1 over one pipeline stage; returns its time in ns.

    Each entry is (dispatch, device time) of a module. NOTE: the CPU runs
    ahead across layers (BestServe Fig. 5), so a layer's time depends on the
    lag carried in. All layers are equal, so once a whole layer is device
    bound with C >= D the rest add C each, and once the lag repeats the rest
    add D each; both are exact and keep the loop to a few layers.
    """
    td = tc = 0.0  # when the CPU has dispatched, and when the device has finished, the modules so far
    for dispatch, busy in pre:
        td += dispatch
        tc = (td if td > tc else tc) + busy
    d_layer = c_layer = 0.0  # summed in order from 0, as sum() does: the same floats, without two generators
    for dispatch, busy in layer:
        d_layer += dispatch
        c_layer += busy
    last_lag = None
    for done in range(1, num_layers + 1):
        dispatch_bound = False  # a module of this layer waited for its dispatch
        for dispatch, busy in layer:
            td += dispatch
            if td > tc:
                dispatch_bound = True
                tc = td + busy
            else:
                tc += busy
        left, lag = num_layers - done, tc - td
        if not dispatch_bound and c_layer >= d_layer:
            td, tc = td + left * d_layer, tc + left * c_layer
            break
        if last_lag is not None and abs(lag - last_lag) <= 1e-9 * max(1.0, abs(lag)):
            td, tc = td + left * d_layer, tc + left * d_layer
            break
        last_lag = lag
    for dispatch, busy in post:
        td += dispatch
        tc = (td if td > tc else tc) + busy
    return tc


def _stage_ns(pre: list[tuple[float, float]], layer: list[tuple[float, float]], num_layers: int,
              post: list[tuple[float, float]], overlap: float) -> float:
    """One stage with a share ``overlap`` of the host's dispatch hidden behind the device: 1 is
    Algorithm 1 (:func:`_run_stage`), 0 a host and device that take turns (every module's
    dispatch, then its device time)."""
    overlapped = _run_stage(pre, layer, num_layers, post)
    if overlap >= 1.0:
        return overlapped
    serial = sum(d + c for d, c in pre) + num_layers * sum(d + c for d, c in layer) + sum(d + c for d, c in post)
    return overlap * overlapped + (1.0 - overlap) * serial


@dataclasses.dataclass
class DeviceTimes:
    """Device-side times of one step, before the dispatch overlap (ns).

    Attributes:
        busy: device time of one instance of each module (EMBED..HEAD),
            collectives included.
        comm_attn, comm_mlp: collective time after one attention / MLP module.
        breakdown: time per operator key over the whole step.
        totals: compute-bound and memory-bound operator time, whole step.
    """

    busy: list[float]
    comm_attn: float
    comm_mlp: float
    breakdown: dict[str, float]
    totals: list[float]

    @property
    def compute(self) -> float:
        return self.totals[0]

    @property
    def memory(self) -> float:
        return self.totals[1]


def _add_ops(m: SessionModel, busy: list[float], breakdown: dict[str, float] | None, totals: list[float],
             op_list: list[ops.Op], mult: int, rate_c: tuple[float, float, float],
             rate_m: tuple[float, float, float]) -> None:
    """Adds each operator's time to a :class:`DeviceTimes`' ``busy``, ``breakdown`` (a defaultdict;
    None: none kept) and ``totals`` (``mult`` instances in the step): the adapted roofline at its
    phase's rates, or the fitted kernel model."""
    if m.params.op_model == "fitted":
        k, peak, bw = m.params.kernel, m.device.peak_flops, m.device.mem_bw
        for module, key, work, traffic, _, kind, rows, span in op_list:
            t, compute_bound = kernel_ns(kind, work, traffic, rows, k, peak, bw, span)
            busy[module] += t
            if breakdown is not None:
                breakdown[key] += t * mult
            totals[not compute_bound] += t * mult
        return
    for module, key, work, traffic, group, _, _, _ in op_list:
        t_c, t_m = work / rate_c[group] * NS, traffic / rate_m[group] * NS
        t = t_c if t_c >= t_m else t_m
        busy[module] += t
        if breakdown is not None:
            breakdown[key] += t * mult
        totals[t_c < t_m] += t * mult


def _rates(m: SessionModel, prefill_share: float) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Compute and memory rates (FLOP/s, B/s) of the BLEND, PREFILL and DECODE groups (memoized:
    every decode-only step has the same)."""
    rates = m.rates.get(prefill_share)
    if rates is None:
        pre, dec, dev = m.params.prefill, m.params.decode, m.device
        w = prefill_share
        rates = ((_blend(pre.mfu, dec.mfu, w) * dev.peak_flops, pre.mfu * dev.peak_flops, dec.mfu * dev.peak_flops),
                 (_blend(pre.mbu, dec.mbu, w) * dev.mem_bw, pre.mbu * dev.mem_bw, dec.mbu * dev.mem_bw))
        if len(m.rates) >= MEMO_SIZE:
            m.rates.clear()
        m.rates[prefill_share] = rates
    return rates


@dataclasses.dataclass
class _Fixed:
    """What every step with the same token and sequence counts and prefill group shares
    (:func:`_fixed_times`).

    Attributes:
        times: device times of every operator but the attention core that :func:`.operators.core_ops`
            gives, with the collectives' times per layer (``comm_attn``, ``comm_mlp``; not yet in ``busy``).
        comm: the collectives' time over the step's layers (pipeline sends aside).
        host: the host costs of :func:`_host_ns`.
    """

    times: DeviceTimes
    comm: float
    host: tuple[float, float, float, float, float]


def _fixed_times(m: SessionModel, b: BatchStats) -> _Fixed:
    """The step's :class:`_Fixed` part, memoized in ``m.memo``.

    It depends only on the token and sequence counts and the prefill group (the prefill share
    is the prefill group's tokens over the step's), so every step of a decode run (the same
    sequences, contexts one longer) shares it, and a step timed after it adds only its attention
    core and Algorithm 1 (:func:`estimate`).
    """
    key = (b.tokens, b.seqs, b.prefill)
    fixed = m.memo.get(key)
    if fixed is None:
        s = m.shape
        times = DeviceTimes([0.0] * 6, 0.0, 0.0, defaultdict(float), [0.0, 0.0])
        rate_c, rate_m = _rates(m, b.prefill_share)
        embed, head = ops.head_ops(s, b)
        layer_ops = (ops.norm_ops(NORM_IN, s, b.tokens) + ops.attention_ops(s, b, with_core=False)
                     + ops.norm_ops(NORM_POST, s, b.tokens) + ops.mlp_ops(s, b))
        for op_list, mult in ((layer_ops, s.layers_per_stage * s.pp), (embed, 1), (head, 1)):
            _add_ops(m, times.busy, times.breakdown, times.totals, op_list, mult, rate_c, rate_m)
        times.comm_attn, times.comm_mlp = _comm_ns(m, b, _comm_eff(m.params, b))
        comm = (times.comm_attn + times.comm_mlp) * s.layers_per_stage * s.pp
        fixed = _Fixed(times, comm, _host_ns(m.params, b))
        if len(m.memo) >= MEMO_SIZE:
            m.memo.clear()
        m.memo[key] = fixed
    return fixed


def device_times(m: SessionModel, b: BatchStats, *, with_breakdown: bool = True) -> DeviceTimes:
    """Times every operator of a step by the adapted roofline (``with_breakdown=False``: all but
    the breakdown per operator, left empty)."""
    fixed = _fixed_times(m, b).times
    busy, totals, breakdown = _step_times(m, b, fixed, with_breakdown)
    return DeviceTimes(busy, fixed.comm_attn, fixed.comm_mlp, {} if breakdown is None else breakdown, totals)


def _step_times(m: SessionModel, b: BatchStats, fixed: DeviceTimes,
                with_breakdown: bool) -> tuple[list[float], list[float], dict[str, float] | None]:
    """:func:`device_times`' busy, totals and breakdown (None unless ``with_breakdown``) from the
    step's fixed part: a copy of it plus the attention core (and LoRA), then the collectives, in
    that order (the order of the float additions is the result's)."""
    s = m.shape
    num_layers = s.layers_per_stage * s.pp
    busy, totals = fixed.busy[:], fixed.totals[:]
    breakdown = defaultdict(float, fixed.breakdown) if with_breakdown else None
    rate_c, rate_m = _rates(m, b.prefill_share)
    _add_ops(m, busy, breakdown, totals, ops.core_ops(s, b), num_layers, rate_c, rate_m)
    if b.lora:
        _add_ops(m, busy, breakdown, totals, ops.lora_ops(s, b.lora), num_layers, rate_c, rate_m)
    comm_attn, comm_mlp = fixed.comm_attn, fixed.comm_mlp
    busy[ATTENTION] += comm_attn
    busy[MLP] += comm_mlp
    if breakdown is not None and comm_attn:
        breakdown["allreduce"] += comm_attn * num_layers
    if breakdown is not None and comm_mlp:
        breakdown["all_to_all" if s.num_experts and s.ep > 1 else "allreduce"] += comm_mlp * num_layers
    return busy, totals, breakdown


def _host_ns(p: Params, b: BatchStats) -> tuple[float, float, float, float, float]:
    """Host costs of a step by execution mode: dispatch per RMSNorm, attention, MLP and head
    module (overlapped with the device by Algorithm 1), and the step's own host time, in ns.

    NOTE: every mode's costs only grow from a decode-only step to one with a prefill chunk
    (a full graph becomes piecewise; eager steps take the prefill phase's constants, which
    the fitted profile sets no lower), so adding work never shortens a step.
    """
    if p.execution == "eager":
        phase = p.prefill if b.prefill.seqs else p.decode
        return (phase.dispatch_norm_us * 1e3, phase.dispatch_attention_us * 1e3, phase.dispatch_mlp_us * 1e3,
                phase.dispatch_head_us * 1e3, (phase.step_overhead_us + b.seqs * p.eager_seq_us) * 1e3)
    if p.execution == "graphs" and not b.prefill.seqs:  # vLLM V1 replays a uniform decode batch as one graph
        return 0.0, 0.0, 0.0, 0.0, p.graph_step_us * 1e3
    return 0.0, p.piecewise_layer_us * 1e3, 0.0, 0.0, p.graph_step_us * 1e3


def estimate(m: SessionModel, b: BatchStats, *, with_breakdown: bool = True) -> pb.StepTiming:
    """Times one step; see the module docstring for the model. ``with_breakdown=False`` leaves
    StepTiming.breakdown empty (a caller that reads none saves building it)."""
    s, p, dev = m.shape, m.params, m.device
    fixed = _fixed_times(m, b)
    busy, (compute, memory), breakdown = _step_times(m, b, fixed.times, with_breakdown)
    comm = fixed.comm
    d_norm, d_attn, d_mlp, d_head, overhead = fixed.host
    layer = [(d_norm, busy[NORM_IN]), (d_attn, busy[ATTENTION]), (d_norm, busy[NORM_POST]), (d_mlp, busy[MLP])]
    first, last = [(0.0, busy[EMBED])], [(d_head, busy[HEAD])]
    overlap = p.eager_overlap if p.execution == "eager" else 1.0
    if s.pp == 1:
        total = _stage_ns(first, layer, s.layers_per_stage, last, overlap)
    else:
        # One microbatch through every stage in turn (see docs/roofline.md).
        send = p.p2p_latency_us * 1e3 + s.ba * b.tokens * s.h / (_comm_eff(p, b) * dev.pp_link) * NS
        total = (_stage_ns(first, layer, s.layers_per_stage, [], overlap)
                 + (s.pp - 2) * _stage_ns([], layer, s.layers_per_stage, [], overlap)
                 + _stage_ns([], layer, s.layers_per_stage, last, overlap) + (s.pp - 1) * send)
        comm += (s.pp - 1) * send
        if breakdown is not None:
            breakdown["pp_send"] = (s.pp - 1) * send

    exposed = max(total - compute - memory - comm, 0.0)
    if breakdown is not None:
        breakdown["dispatch"] = exposed
        if overhead:
            breakdown["step_overhead"] = overhead
    duration = total + overhead
    timing = pb.StepTiming(
        duration_ns=round(duration), compute_ns=round(compute), memory_ns=round(memory),
        communication_ns=round(comm), dispatch_ns=round(exposed + overhead),
        breakdown=breakdown)
    if p.tdp_w:  # unset otherwise: the hub's power model weighs compute_ns and memory_ns
        timing.energy_j = p.tdp_w * dev.num_devices * duration / NS
    return timing
