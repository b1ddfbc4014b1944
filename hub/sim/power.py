"""Power and energy of a client's steps: a linear utilization power model per device.

Main names: :class:`DevicePower` (one device's idle, memory-bound and peak
power, and its power at given compute and memory utilizations),
:class:`Intensity` (a batch's compute and memory shares from the model's
shape, where a backend reports no split), :class:`StepEnergy` (one client's
step energy) and :class:`StepJoules` (what one step used).

The model (docs/energy.md), per device::

    P(u_c, u_m) = min(P_peak, P_idle + (P_peak - P_idle) u_c + (P_mem - P_idle) u_m)

with u_c and u_m the shares of the step's duration bound by arithmetic and by
memory traffic (``StepTiming.compute_ns`` and ``memory_ns`` over the step's
duration; the rest, collectives and exposed dispatch, at idle power). Power
linear in utilization between idle and busy is Fan, Weber and Barroso's
("Power Provisioning for a Warehouse-sized Computer", ISCA 2007); the two
busy anchors are Splitwise's measurements (Patel et al., ISCA 2024, as its
simulator's power model encodes them): a compute-bound (prompt) phase draws
the TDP, a memory-bound (token) phase far less. HERMES (arXiv 2504.09775 §V)
reads the same effect: "decode-only clients, being memory-bound, consume less
compute power".

A step's energy is P x duration x the devices it occupies (a client's devices
over its pipeline stages: one micro-batch is on one stage at a time), unless
the backend reports ``StepTiming.energy_j``, which then stands as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cosim.v1 import types_pb2 as pb

from ..errors import ScenarioError

# Defaults where a device lists its TDP but not the other two figures: H100-SXM's measured
# fractions of its TDP (Splitwise's simulator power model, configs/power_model/constant.yaml of
# Mutinifni/splitwise-sim: idle 75 W, token phase 380 W, prompt phase 700 W = TDP).
IDLE_FRACTION = 75 / 700
MEMORY_BOUND_FRACTION = 380 / 700

NS_PER_S = 1e9


@dataclass(frozen=True, slots=True)
class DevicePower:
    """One device's power, watts.

    Attributes:
        idle_w: drawn with nothing running (clocks up, no kernels).
        memory_bound_w: drawn through a step bound by memory bandwidth (a decode step).
        peak_w: drawn through a compute-bound step: the TDP.
    """

    idle_w: float
    memory_bound_w: float
    peak_w: float

    def __post_init__(self) -> None:
        if not 0 <= self.idle_w <= self.memory_bound_w <= self.peak_w:
            raise ValueError(f"power figures must satisfy 0 <= idle_w <= memory_bound_w <= tdp_w, got "
                             f"idle_w={self.idle_w:g}, memory_bound_w={self.memory_bound_w:g}, "
                             f"tdp_w={self.peak_w:g}")

    @classmethod
    def from_extra(cls, extra: Mapping[str, float]) -> DevicePower | None:
        """The power of a ``HardwareSpec.extra``'s figures; None without ``tdp_w`` (no power figure).
        ``idle_w`` and ``memory_bound_w`` default to :data:`IDLE_FRACTION` and
        :data:`MEMORY_BOUND_FRACTION` of it.

        Raises:
            ValueError: a TDP <= 0, or figures out of order (e.g. idle above TDP).
        """
        peak = extra.get("tdp_w")
        if peak is None:
            return None
        if peak <= 0:
            raise ValueError(f"tdp_w must be > 0, got {peak:g}")
        idle = float(extra.get("idle_w", IDLE_FRACTION * peak))
        memory_bound = float(extra.get("memory_bound_w", max(idle, MEMORY_BOUND_FRACTION * peak)))
        return cls(idle_w=idle, memory_bound_w=memory_bound, peak_w=float(peak))

    def power_w(self, u_compute: float, u_memory: float) -> float:
        """Power of one device whose step is ``u_compute`` compute-bound and ``u_memory`` memory-bound
        (shares of its duration, each in [0, 1])."""
        watts = (self.idle_w + (self.peak_w - self.idle_w) * u_compute
                 + (self.memory_bound_w - self.idle_w) * u_memory)
        return watts if watts < self.peak_w else self.peak_w

    def as_dict(self) -> dict[str, float]:
        """The figures under their config names (for summary.json)."""
        return {"idle_w": self.idle_w, "memory_bound_w": self.memory_bound_w, "tdp_w": self.peak_w}


def device_power(spec: pb.HardwareSpec, where: str) -> DevicePower | None:
    """The power of one device of ``spec`` (its ``extra`` figures), or None when it has none.

    Raises:
        ScenarioError: at ``where``, for figures out of order.
    """
    try:
        return DevicePower.from_extra(spec.extra)
    except ValueError as err:
        raise ScenarioError(where, str(err)) from None


@dataclass(frozen=True, slots=True)
class Intensity:
    """A batch's roofline times from the model's shape, for the split of a step's busy time
    when the backend reports none (``memory_ns`` 0): FLOPs at peak against bytes at full bandwidth.

    FLOPs are 2 per active parameter per token plus attention's 4 per query-head dimension
    per (new, attended) token pair per layer (Kaplan et al., "Scaling Laws for Neural Language
    Models", 2020, Table 1, with the context read from KV); bytes are the active weights once
    per step plus the KV of every attended token. Only the ratio matters, so whole-cluster
    figures serve (each term splits alike over the devices).

    Attributes:
        flops_per_token: 2 x active parameters.
        flops_per_pair: 4 x layers x query heads x head dim.
        weight_bytes: active weights read each step.
        kv_bytes_per_token: KV bytes of one token (all layers).
        peak_flops: FLOP/s of the cluster.
        mem_bytes_per_s: memory bandwidth of the cluster, bytes/s.
    """

    flops_per_token: float
    flops_per_pair: float
    weight_bytes: float
    kv_bytes_per_token: float
    peak_flops: float
    mem_bytes_per_s: float

    def shares(self, num_new: Sequence[int], context: Sequence[int]) -> tuple[float, float]:
        """(compute, memory) time of the batch, each over the larger of the two: (1, x) when
        compute-bound, (x, 1) when memory-bound."""
        if num_new.count(1) == len(num_new):  # decodes only (most steps): the same integers, by two sums less
            tokens = len(num_new)
            attended = pairs = sum(context) + tokens
        else:
            tokens = sum(num_new)
            attended = sum(context) + tokens
            pairs = sum(n * c for n, c in zip(num_new, context)) + sum(n * (n + 1) // 2 for n in num_new)
        t_c = (self.flops_per_token * tokens + self.flops_per_pair * pairs) / self.peak_flops
        t_m = (self.weight_bytes + self.kv_bytes_per_token * attended) / self.mem_bytes_per_s
        top = t_c if t_c > t_m else t_m
        return (t_c / top, t_m / top) if top > 0 else (0.0, 0.0)


def model_intensity(model: pb.ModelSpec, active_params: int, spec: pb.HardwareSpec) -> Intensity:
    """The :class:`Intensity` of ``model`` (``active_params``: parameters one token touches) on ``spec``."""
    kv = 2 * model.num_layers * model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
    return Intensity(flops_per_token=2.0 * active_params,
                     flops_per_pair=4.0 * model.num_layers * model.num_attention_heads * model.head_dim,
                     weight_bytes=active_params * model.bytes_per_param, kv_bytes_per_token=kv,
                     peak_flops=spec.count * spec.peak_tflops * 1e12,
                     mem_bytes_per_s=spec.count * spec.mem_bandwidth_gbps * 1e9)


@dataclass(frozen=True, slots=True)
class StepJoules:
    """What one step used.

    Attributes:
        joules: energy on the client's devices; None when unknown (no power figure, none reported).
        device_s: device-seconds the step kept busy (for idle energy: the rest of the run's).
        reported: the backend reported ``joules`` (its figure stands).
    """

    joules: float | None
    device_s: float
    reported: bool = False


class StepTimingLike(Protocol):
    """The fields of a step's timing the energy model reads (``cosim.hub.timing.cache.Timing``)."""

    @property
    def duration_ns(self) -> int: ...
    @property
    def compute_ns(self) -> int: ...
    @property
    def memory_ns(self) -> int: ...
    @property
    def communication_ns(self) -> int: ...
    @property
    def dispatch_ns(self) -> int: ...
    @property
    def energy_j(self) -> float | None: ...


class StepEnergy:
    """The energy of one client's steps (see the module docstring).

    Args:
        power: one device's power; None: unknown (only a backend's own figure counts).
        num_devices: the client's devices.
        stages: its pipeline stages (a step keeps num_devices / stages busy at a time).
        intensity: the fallback split of a step's busy time where the backend reports none;
            None: busy time counts as compute-bound.
    """

    def __init__(self, *, power: DevicePower | None, num_devices: int, stages: int = 1,
                 intensity: Intensity | None = None) -> None:
        self.power, self.intensity = power, intensity
        self.active_devices = num_devices / max(stages, 1)

    def utilization(self, timing: StepTimingLike, duration_ns: int, num_new: Sequence[int],
                    context: Sequence[int]) -> tuple[float, float]:
        """(u_compute, u_memory): the shares of ``duration_ns`` (the step as the hub timed it, host
        time and swaps included) bound by arithmetic and by memory. The backend's split where it
        reports one (``memory_ns`` > 0: every forward pass reads its weights); else its busy time
        (``compute_ns``, or the duration less collectives and dispatch) split by :attr:`intensity`."""
        if duration_ns <= 0:
            return 0.0, 0.0
        if timing.memory_ns > 0:
            return min(1.0, timing.compute_ns / duration_ns), min(1.0, timing.memory_ns / duration_ns)
        busy = timing.compute_ns or max(0, timing.duration_ns - timing.communication_ns - timing.dispatch_ns)
        share = min(1.0, busy / duration_ns)
        if self.intensity is None:
            return share, 0.0
        s_c, s_m = self.intensity.shares(num_new, context)
        return s_c * share, s_m * share

    def step(self, timing: StepTimingLike, duration_ns: int, num_new: Sequence[int],
             context: Sequence[int]) -> StepJoules:
        """The energy of one step lasting ``duration_ns``: the backend's ``energy_j`` where set,
        else the power model's."""
        device_s = duration_ns / NS_PER_S * self.active_devices
        if timing.energy_j is not None:
            return StepJoules(timing.energy_j, device_s, reported=True)
        if self.power is None:
            return StepJoules(None, device_s)
        u_c, u_m = self.utilization(timing, duration_ns, num_new, context)
        return StepJoules(self.power.power_w(u_c, u_m) * device_s, device_s)
