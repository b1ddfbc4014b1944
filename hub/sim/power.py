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

The model's classes are the compiled core's (core/src/power.rs: the step timer
asks every step's energy there); this module builds them from a scenario's specs.
Where a device lists its TDP but not the other two figures, they default to
H100-SXM's measured fractions of its TDP (:data:`IDLE_FRACTION`,
:data:`MEMORY_BOUND_FRACTION`: Splitwise's simulator power model,
configs/power_model/constant.yaml of Mutinifni/splitwise-sim: idle 75 W, token
phase 380 W, prompt phase 700 W = TDP).
"""

from __future__ import annotations

from cosim_core import IDLE_FRACTION, MEMORY_BOUND_FRACTION, DevicePower, Intensity, StepEnergy, StepJoules

from cosim.v1 import types_pb2 as pb

from ..errors import ScenarioError

__all__ = ["IDLE_FRACTION", "MEMORY_BOUND_FRACTION", "DevicePower", "Intensity", "StepEnergy", "StepJoules",
           "device_power", "model_intensity"]

def device_power(spec: pb.HardwareSpec, where: str) -> DevicePower | None:
    """The power of one device of ``spec`` (its ``extra`` figures), or None when it has none.

    Raises:
        ScenarioError: at ``where``, for figures out of order.
    """
    try:
        return DevicePower.from_extra(spec.extra)
    except ValueError as err:
        raise ScenarioError(where, str(err)) from None


def model_intensity(model: pb.ModelSpec, active_params: int, spec: pb.HardwareSpec) -> Intensity:
    """The :class:`Intensity` of ``model`` (``active_params``: parameters one token touches) on ``spec``."""
    kv = 2 * model.num_layers * model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
    return Intensity(flops_per_token=2.0 * active_params,
                     flops_per_pair=4.0 * model.num_layers * model.num_attention_heads * model.head_dim,
                     weight_bytes=active_params * model.bytes_per_param, kv_bytes_per_token=kv,
                     peak_flops=spec.count * spec.peak_tflops * 1e12,
                     mem_bytes_per_s=spec.count * spec.mem_bandwidth_gbps * 1e9)
