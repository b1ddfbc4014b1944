"""The roofline runtime backend: checks a session, precomputes, times steps."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from cosim_core import RooflineModel
from google.protobuf.json_format import MessageToDict

from cosim.adapters.sdk import InvalidArgument, PlainBatch, RuntimeBackend, Session
from cosim.v1 import types_pb2 as pb

from . import fitted
from .collectives import PathLink, path_link, path_name
from .estimator import Device, SessionModel, step_timing
from .operators import make_shape
from .params import FITTED_PROFILES, resolve_params

log = logging.getLogger(__name__)

SHARED_STATES = 8  # models (with their timing caches) kept for later sessions of an equal model
# Options that leave the fitted default's step times as its cross-validation scored them.
UNSCORED_OK_OPTIONS = frozenset({"profile", "family", "tdp_w"})

# A step's time is a pure function of the session's model and the batch, so sessions opened in this
# process whose models are equal share one model, and with it its timing cache (the compiled model's:
# core/src/roofline/cache.rs, 16384 timings, a batch of decodes keyed by its sequence count and
# context sum): the runs of a goodput search or a sweep, which open the same sessions again and
# again, reuse each other's timings.
_states: OrderedDict[SessionModel, SessionModel] = OrderedDict()


def _shared_state(model: SessionModel) -> SessionModel:
    """The model of the sessions whose model equals ``model`` (device, parameters and shape)."""
    state = _states.get(model)
    if state is None:
        state = _states[model] = model
        if len(_states) > SHARED_STATES:
            _states.popitem(last=False)
    _states.move_to_end(model)
    return state


def _device(spec: pb.SessionSpec) -> Device:
    """Device rates from the hardware spec; zero peaks mean an unknown device."""
    hw, par = spec.hardware, spec.parallelism
    for name in ("peak_tflops", "mem_bandwidth_gbps"):
        if getattr(hw, name) <= 0:
            raise InvalidArgument(f"spec.hardware.{name}", getattr(hw, name),
                                  f"is not set for device {hw.device!r}: the device is unknown to the presets; "
                                  "give its peak_tflops and mem_bandwidth_gbps")
    tp, pp, ep = par.tensor or 1, par.pipeline or 1, par.expert or 1
    if (tp > 1 or pp > 1 or ep > 1) and hw.intra_node_gbps <= 0:
        raise InvalidArgument("spec.hardware.intra_node_gbps", hw.intra_node_gbps,
                              f"must be > 0 for device {hw.device!r} when tensor={tp}, pipeline={pp}, expert={ep}")
    intra = hw.intra_node_gbps * 1e9
    per_node = hw.devices_per_node or hw.count
    crosses = tp * pp > per_node and hw.inter_node_gbps > 0
    return Device(peak_flops=hw.peak_tflops * 1e12, mem_bw=hw.mem_bandwidth_gbps * 1e9, tp_link=intra or 1.0,
                  ep_link=hw.inter_node_gbps * 1e9 if ep > per_node and hw.inter_node_gbps > 0 else intra or 1.0,
                  pp_link=hw.inter_node_gbps * 1e9 if crosses else intra or 1.0, num_devices=tp * pp,
                  path=_path(hw))


def _path(hw: pb.HardwareSpec) -> PathLink | None:
    """The PCIe path NCCL takes between the device's GPUs, where its preset names one (docs/validation.md,
    "PCIe paths"); None for NVLink devices, whose collectives follow the ring line."""
    extra = hw.extra
    if "intra_node_path" not in extra:
        return None
    try:
        return path_link(path_name(extra["intra_node_path"]), hw.intra_node_gbps,
                         latency_us=extra["intra_node_path_latency_us"],
                         bus_efficiency=extra["intra_node_path_bus_efficiency"])
    except (KeyError, ValueError) as err:
        raise InvalidArgument("spec.hardware.extra.intra_node_path", extra["intra_node_path"],
                              f"needs intra_node_path_latency_us and intra_node_path_bus_efficiency in range: "
                              f"{err}") from err


def open_model(spec: pb.SessionSpec) -> SessionModel:
    """Builds the per-session model (device, parameters, per-rank shape).

    Raises:
        InvalidArgument: unknown device, bad option or parameter value.
    """
    device = _device(spec)
    options: dict[str, Any] = MessageToDict(spec.options) if spec.HasField("options") else {}
    params = resolve_params(spec.hardware.device, dict(spec.hardware.extra), options)
    shape = make_shape(spec.model, spec.parallelism, act_bytes=params.act_bytes, fused=params.kernels == "fused",
                       fitted=params.op_model == "fitted")
    return SessionModel(shape=shape, params=params, device=device)


class RooflineBackend(RuntimeBackend):
    """BestServe's adapted roofline with dispatch overlap, TP, PP and MoE."""

    name = "roofline"
    version = "0.1.0"
    fidelity = pb.FIDELITY_ANALYTICAL
    description = ("roofline: kernel efficiencies fitted per GPU family (default) or BestServe's per-phase MFU/MBU; "
                   "CUDA-graph or eager dispatch; TP/PP/EP communication")
    # bucketed_cache_safe: step time is linear in each context, so nearby contexts time alike.
    capabilities = ("mixed_batches", "moe", "tensor_parallel", "pipeline_parallel", "expert_parallel",
                    "energy", "bucketed_cache_safe", "lora")
    file_options = ("profile",)  # a path; plain names (auto, none, a shipped profile) are not files
    plain_batches = True

    def open_session(self, spec: pb.SessionSpec) -> SessionModel:
        model = open_model(spec)
        log.debug("roofline session for %s on %s: %s", spec.model.name, spec.hardware.device, model.params)
        return _shared_state(model)

    def step_error(self, session: Session[pb.SessionSpec]) -> pb.StepError | None:
        """The fitted default's cross-validated step MAPE as a band of ± that (:func:`.fitted.step_mape`);
        none under another profile or with parameters set by option, which no cross-validation scored."""
        spec = session.spec
        options: dict[str, Any] = MessageToDict(spec.options) if spec.HasField("options") else {}
        if options.get("profile", "auto") not in FITTED_PROFILES or set(options) - UNSCORED_OK_OPTIONS:
            return None
        declared = fitted.step_mape(spec.hardware.device, family=options.get("family"))
        if declared is None:
            return None
        mape, basis = declared
        return pb.StepError(low=-mape, high=mape, basis=basis)

    def native_model(self, session: Session[pb.SessionSpec]) -> RooflineModel | None:
        """The session's compiled model, whose ``predict`` the hub's timing cache calls directly in
        process (with this backend's timing cache and checks); none for a subclass, which may time
        steps its own way."""
        model: SessionModel = session.state
        return model.native if type(self) is RooflineBackend else None

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch | PlainBatch) -> pb.StepTiming:
        """Times a batch (decodes by their count and context sum, DP padding, drafts, LoRA adapters),
        from the model's cache where it was timed before (``cosim_core.RooflineModel.predict_batch``).

        Raises:
            InvalidArgument: draft_tokens, lora_ranks or lora_ids not one per sequence.
        """
        model: SessionModel = session.state
        # a message field is slow to iterate: lists
        return step_timing(model.native.predict_batch(
            batch.new_tokens[:], batch.context_tokens[:], batch.dp_rank_tokens[:], batch.draft_tokens[:],
            batch.lora_ranks[:], batch.lora_ids[:], session.omit_breakdown))
