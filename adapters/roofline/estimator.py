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
execution mode (the host costs of ``host_ns`` in the core): vLLM V1 replays a decode-only step as one
CUDA graph and runs other steps as piecewise graphs, so Algorithm 1's eager
per-module dispatch applies only under ``execution: eager``.

The collectives are timed per layer after attention and after the MLP: a TP
all-reduce of the activations every rank holds (on a PCIe path, NCCL's faster
protocol; under ``execution: eager`` the bytes beyond ``eager_comm_knee_mib``
at ``eager_comm_eff_large``; under graphs, vLLM's custom all-reduce for
messages up to 8 MiB where it is faster), and with expert parallelism the MoE
dispatch and combine all-to-alls in place of the MLP's all-reduce. Pipeline
stages run one microbatch in turn, each stage's activations sent to the next.

A step's device time is a fixed part that depends only on its token and
sequence counts and its prefill group (every operator but the attention core
that changes along a decode run, the collectives, the host costs: memoized,
so each step of a decode run adds only its attention core and Algorithm 1)
plus that core and any LoRA GEMMs. Under ``execution: eager`` a share
``eager_overlap`` of the dispatch is hidden (1: Algorithm 1; 0: host and
device take turns, every module's dispatch then its device time).

The model runs in the compiled core (``core/src/roofline/estimator.rs``, issue
#37), with the same floats as the Python it replaced: a :class:`SessionModel`
hands its shape, parameters and device once to a ``cosim_core.RooflineModel``.

Main names: :class:`Device`, :class:`SessionModel`, :func:`device_times`, :func:`estimate`.
"""

from __future__ import annotations

import dataclasses

from cosim_core import CUSTOM_AR_MAX_BYTES, RooflineModel, run_stage

from cosim.v1 import types_pb2 as pb

from .collectives import PathLink
from .operators import BatchStats, Shape
from .params import Params

__all__ = ["CUSTOM_AR_MAX_BYTES", "Device", "DeviceTimes", "SessionModel", "device_times", "estimate", "run_stage"]

NS = 1e9


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

    ``native`` is the compiled model built from them (it keeps what a decode run leaves
    unchanged); it is not part of the model's identity.
    """

    shape: Shape
    params: Params
    device: Device
    native: RooflineModel = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "native", RooflineModel(self.shape, self.params, self.device))


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


def device_times(m: SessionModel, b: BatchStats, *, with_breakdown: bool = True) -> DeviceTimes:
    """Times every operator of a step by the adapted roofline (``with_breakdown=False``: all but
    the breakdown per operator, left empty)."""
    return DeviceTimes(*m.native.device_times(b, with_breakdown))


def step_timing(times: tuple[int, int, int, int, int, dict[str, float] | None, float | None]) -> pb.StepTiming:
    """The StepTiming of a ``RooflineModel`` answer (energy only where the parameters give a TDP:
    otherwise the hub's power model weighs compute_ns and memory_ns)."""
    duration, compute, memory, comm, dispatch, breakdown, energy_j = times
    timing = pb.StepTiming(duration_ns=duration, compute_ns=compute, memory_ns=memory, communication_ns=comm,
                           dispatch_ns=dispatch, breakdown=breakdown)
    if energy_j is not None:
        timing.energy_j = energy_j
    return timing


def estimate(m: SessionModel, b: BatchStats, *, with_breakdown: bool = True) -> pb.StepTiming:
    """Times one step; see the module docstring for the model. ``with_breakdown=False`` leaves
    StepTiming.breakdown empty (a caller that reads none saves building it)."""
    return step_timing(m.native.estimate(b, with_breakdown))
