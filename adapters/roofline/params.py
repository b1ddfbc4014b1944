"""Parameters of the roofline backend: names, defaults, sources, resolution.

Every figure the model uses besides the device's peak rates is a
:class:`Params` field. A value is resolved, later sources winning, from

1. the defaults below: BestServe's (§4.1 and Table 3, seeds/003), its
   per-phase efficiencies and eager dispatch;
2. the device's intra-node link, when ``HardwareSpec.extra`` describes it
   (the hub's device presets do) and the profile is the fitted one or
   BestServe's: NCCL's ring model on that link (:data:`LINK_PARAMS`,
   :mod:`.collectives`);
3. a profile, chosen by the session option ``profile``: ``auto`` (the
   default) or ``fitted``, the fitted kernel model of the device's family
   (:mod:`.fitted`, ``profiles/fitted.yaml``); ``bestserve`` (or ``none``),
   nothing over the defaults; another shipped profile name (``calibrated``);
   or a path to a profile YAML;
4. ``HardwareSpec.extra[key]`` (numbers only);
5. ``SessionSpec.options[key]``.

Phase-dependent keys take a ``_prefill`` or ``_decode`` suffix; the bare key
(e.g. ``mfu``) sets both phases and the suffixed key overrides it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cosim.adapters.sdk import InvalidArgument

from . import fitted as fitted_profiles
from .kernels import EFFICIENCY_KEYS, KERNEL_KEYS, KernelParams

log = logging.getLogger(__name__)

PROFILE_DIR = Path(__file__).with_name("profiles")
PHASES = ("prefill", "decode")
KERNEL_STYLES = ("eager", "fused")
ALLREDUCE_FORMULAS = ("bestserve", "ring")
OP_MODELS = ("phase", "fitted")
EXECUTIONS = ("eager", "graphs", "piecewise")
# Profiles that are the defaults themselves: BestServe's parameters ("none": the earlier name).
BESTSERVE_PROFILES = ("bestserve", "none")
FITTED_PROFILES = ("auto", "fitted")
PHASE_MODEL_KEYS = ("mfu", "mbu")  # read only by op_model: phase


@dataclasses.dataclass(frozen=True)
class PhaseParams:
    """Efficiencies and host costs of one phase (BestServe §4.1, Table 3).

    Attributes:
        mfu: e_c, model FLOP utilization (0, 1].
        mbu: e_m, model bandwidth utilization (0, 1].
        comm_eff: e_+, communication efficiency (0, 1] (formula 8).
        dispatch_norm_us: CPU time to dispatch one RMSNorm module.
        dispatch_attention_us: CPU time to dispatch one attention module.
        dispatch_mlp_us: CPU time to dispatch one MLP (or MoE) module.
        dispatch_head_us: CPU time to dispatch embedding, final norm and LM head.
        step_overhead_us: fixed host time per step (scheduling, sampling).
    """

    mfu: float = 0.65
    mbu: float = 0.6
    comm_eff: float = 0.6
    dispatch_norm_us: float = 24.0
    dispatch_attention_us: float = 190.0
    dispatch_mlp_us: float = 41.0
    dispatch_head_us: float = 0.0
    step_overhead_us: float = 0.0


@dataclasses.dataclass(frozen=True)
class Params:
    """All parameters of one session, phase-dependent ones per phase.

    Attributes:
        prefill: parameters of prefill (and mixed) steps.
        decode: parameters of decode-only steps.
        kernels: ``fused`` (default: a vLLM-style engine's fused add+RMSNorm,
            FlashAttention, fused SiLU-and-mul) or ``eager`` (BestServe's
            HF-eager operator tables, as its Table 3 was measured).
        allreduce_formula: ``bestserve`` (formula 8) or ``ring`` (2(t-1)/t x bytes).
        allreduce_latency_us: fixed latency added to every all-reduce.
        alltoall_latency_us: fixed latency of every MoE all-to-all.
        hop_latency_us: latency of one collective step; a ring all-reduce over
            t ranks takes 2(t-1) steps, an all-to-all t-1.
        p2p_latency_us: fixed latency of a pipeline-stage send.
        act_bytes: bytes per activation element.
        tdp_w: device power the backend reports energy with, tdp_w x devices x duration (0: it
            reports none and the hub's power model applies; set in the backend's options only).
        op_model: ``phase`` (BestServe: every operator of a phase at the phase's MFU/MBU) or
            ``fitted`` (the kernel model of :mod:`.kernels`, with ``kernel``'s parameters).
        execution: how the host drives the device. ``eager``: it launches every module, and
            Algorithm 1 overlaps the ``dispatch_*_us`` with the device. ``graphs`` (vLLM V1's
            FULL_AND_PIECEWISE): a decode-only step replays one CUDA graph, other steps run
            piecewise graphs. ``piecewise``: every step runs piecewise graphs.
        eager_comm_eff: the collectives' bus efficiency under ``execution: eager`` (0: ``comm_eff``),
            the engine the fitted eager host costs describe (Splitwise's DGX engine).
        eager_comm_knee_mib, eager_comm_eff_large: under ``execution: eager``, the bytes of an
            all-reduce beyond ``eager_comm_knee_mib`` MiB per rank move at this lower bus efficiency
            (0: no knee). Splitwise's DGX engine's prefills of more than 2048 tokens slow down by
            the activation volume they all-reduce (see docs/roofline.md, "Eager engine").
        eager_seq_us: host time per sequence of a step under ``execution: eager`` (the engine's
            per-sequence input preparation, sampling and output handling), not overlapped.
        eager_overlap: under ``execution: eager``, the share of the host's dispatch the device
            hides: 1, Algorithm 1 (the host runs ahead); 0, host and device take turns, every
            module's dispatch then its device time; between, the blend of the two.
        graph_allreduce_latency_us, graph_allreduce_bus_eff: vLLM's custom all-reduce (CUDA IPC,
            replayed in graphs) under ``graphs``/``piecewise``, for messages up to 8 MiB: its
            latency and bus efficiency on the device's link (bus efficiency 0: NCCL's ring on the
            link, as under ``eager``). The fitted profile sets them for the devices whose custom
            all-reduce aiconfigurator-core measured; a message takes the faster of the two.
        graph_step_us: host time per step the device waits for under ``graphs``/``piecewise``.
        piecewise_layer_us: host time per layer of a piecewise step (the attention call launched
            between captured pieces), overlapped with the device by Algorithm 1.
        kernel: the fitted kernel model's parameters (``op_model: fitted``).
    """

    prefill: PhaseParams = PhaseParams()
    decode: PhaseParams = PhaseParams(mbu=0.3, comm_eff=0.3)
    kernels: str = "fused"
    allreduce_formula: str = "bestserve"
    allreduce_latency_us: float = 0.0
    alltoall_latency_us: float = 0.0
    hop_latency_us: float = 0.0
    p2p_latency_us: float = 0.0
    act_bytes: float = 2.0
    tdp_w: float = 0.0
    op_model: str = "phase"
    execution: str = "eager"
    eager_comm_eff: float = 0.0
    eager_comm_knee_mib: float = 0.0
    eager_comm_eff_large: float = 0.0
    eager_seq_us: float = 0.0
    eager_overlap: float = 1.0
    graph_allreduce_latency_us: float = 0.0
    graph_allreduce_bus_eff: float = 0.0
    graph_step_us: float = 0.0
    piecewise_layer_us: float = 0.0
    kernel: KernelParams = KernelParams()

    def phase(self, name: str) -> PhaseParams:
        return self.prefill if name == "prefill" else self.decode


# Where each default comes from (docs/roofline.md lists the same).
SOURCES: dict[str, str] = {
    "mfu": "BestServe §4.1: e_c = 0.65 in both phases (Ascend 910B3, vLLM-Ascend)",
    "mbu": "BestServe §4.1: e_m = 0.6 prefill, 0.3 decode",
    "comm_eff": "BestServe §4.1: e_+ = 0.6 prefill, 0.3 decode",
    "dispatch_norm_us": "BestServe Table 3: 0.024 ms per RMSNorm",
    "dispatch_attention_us": "BestServe Table 3: 0.190 ms per attention module",
    "dispatch_mlp_us": "BestServe Table 3: 0.041 ms per MLP module",
    "dispatch_head_us": "not in BestServe (it omits embedding and LM head): 0",
    "step_overhead_us": "not in BestServe: 0; fitted by calibration",
    "kernels": "fused: the kernels vLLM runs (fused add+RMSNorm, FlashAttention, SiLU-and-mul); "
               "eager = BestServe Appendix A/B tables",
    "allreduce_formula": "BestServe formula (8)",
    "allreduce_latency_us": "not in BestServe: 0",
    "alltoall_latency_us": "not in BestServe: 0",
    "hop_latency_us": "not in BestServe: 0",
    "p2p_latency_us": "not in BestServe: 0",
    "act_bytes": "fp16/bf16 activations (BestServe's 2 bytes per float)",
    "tdp_w": "0: no energy reported (the hub's power model applies, docs/energy.md) unless given in options",
    "op_model": "phase: BestServe's per-phase efficiencies; the fitted profile sets fitted",
    "execution": "eager: BestServe's Algorithm 1 dispatch; the fitted profile sets graphs (vLLM V1)",
    "eager_comm_eff": "0 (comm_eff applies); the fitted profile's: Splitwise's DGX engine, fitted with its host costs",
    "eager_comm_knee_mib": "0 (no knee); the fitted profile's: Splitwise's DGX engine, fitted with its host costs",
    "eager_comm_eff_large": "0 (eager_comm_eff applies beyond the knee); the fitted profile's: as eager_comm_eff",
    "eager_seq_us": "0; the fitted profile's: Splitwise's DGX engine, fitted with its host costs",
    "eager_overlap": "1: BestServe's Algorithm 1 (the host runs ahead of the device); the fitted profile's: 0, "
                     "chosen by the held-out errors of Splitwise's DGX engine (docs/roofline.md)",
    "graph_allreduce_latency_us": "0; the fitted profile's: aiconfigurator-core's vLLM custom all-reduce (graphs)",
    "graph_allreduce_bus_eff": "0 (off: NCCL's ring); the fitted profile's: as graph_allreduce_latency_us",
    "graph_step_us": "0: LLMServingSim 2.0 replays vLLM 0.19 (CUDA graphs) from kernel times with no host "
                     "time added and matches it (shared/data/llmservingsim/README.md §3.4)",
    "piecewise_layer_us": "0: as graph_step_us",
    **{key: "fitted kernel model (profiles/fitted.yaml gives the data each was fitted on)" for key in KERNEL_KEYS},
}

# HardwareSpec.extra keys that describe the device's intra-node link (the hub's presets set
# them; docs/validation.md, "Links and collectives") -> the parameters each one sets.
LINK_PARAMS: dict[str, tuple[str, ...]] = {
    "intra_node_bus_efficiency": ("comm_eff",),
    "intra_node_latency_us": ("allreduce_latency_us", "alltoall_latency_us"),
    "intra_node_hop_latency_us": ("hop_latency_us",),
}

PHASE_KEYS = tuple(f.name for f in dataclasses.fields(PhaseParams))
GLOBAL_KEYS = tuple(f.name for f in dataclasses.fields(Params) if f.name not in (*PHASES, "kernel"))
STRING_KEYS = {"kernels": KERNEL_STYLES, "allreduce_formula": ALLREDUCE_FORMULAS, "op_model": OP_MODELS,
               "execution": EXECUTIONS}
KNOWN_KEYS = frozenset(
    list(GLOBAL_KEYS) + list(KERNEL_KEYS) + list(PHASE_KEYS) + [f"{k}_{p}" for k in PHASE_KEYS for p in PHASES])
OPTION_ONLY_KEYS = frozenset({"profile", "family"})


# Bounds that keep a step's time inside the hub's clock (uint64 ns) for any model the presets hold:
# no kernel runs below 0.1% of its datasheet peak, and no fixed time exceeds 1e9 of its unit.
MIN_EFFICIENCY = 1e-3
MAX_TIME = 1e9
_BELOW_FLOOR = " (below 0.1% of a datasheet peak no kernel is modelled)"


def _check(field: str, key: str, value: Any) -> Any:
    """Validates one parameter value; returns it converted."""
    if key in STRING_KEYS:
        if value not in STRING_KEYS[key]:
            raise InvalidArgument(field, value, f"must be one of {list(STRING_KEYS[key])}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(field, value, "must be a number")
    base = key.rsplit("_", 1)[0] if key.endswith(PHASES) else key
    if base in ("mfu", "mbu", "comm_eff") or base in EFFICIENCY_KEYS:
        if not MIN_EFFICIENCY <= value <= 1.0:
            raise InvalidArgument(field, value, f"must be in [{MIN_EFFICIENCY:g}, 1]{_BELOW_FLOOR}")
    elif base == "eager_overlap":
        if not 0.0 <= value <= 1.0:
            raise InvalidArgument(field, value, "must be in [0, 1] (the share of the host's dispatch the device hides)")
    elif base in ("eager_comm_eff", "eager_comm_eff_large", "graph_allreduce_bus_eff"):
        if not (value == 0.0 or MIN_EFFICIENCY <= value <= 1.0):
            raise InvalidArgument(field, value, f"must be 0 (comm_eff applies) or in [{MIN_EFFICIENCY:g}, 1]"
                                                f"{_BELOW_FLOOR}")
    elif base == "act_bytes":
        if not value > 0:
            raise InvalidArgument(field, value, "must be > 0")
    elif value < 0:
        raise InvalidArgument(field, value, "must be >= 0")
    elif base.endswith(("_us", "_ns")) and value > MAX_TIME:
        raise InvalidArgument(field, value, f"must be at most {MAX_TIME:g} (a host or kernel time that long "
                                            "would make a step outlast the clock's range)")
    return float(value)


def _apply(values: dict[str, Any], layer: Mapping[str, Any], where: str, *, strict: bool) -> None:
    """Merges one source into ``values`` (bare phase keys before suffixed ones)."""
    for key in sorted(layer, key=lambda k: k.endswith(PHASES)):
        if key in OPTION_ONLY_KEYS:
            continue
        if key not in KNOWN_KEYS:
            if strict:
                raise InvalidArgument(f"{where}.{key}", layer[key],
                                      f"is not a roofline parameter; known: {sorted(KNOWN_KEYS)}")
            continue
        value = _check(f"{where}.{key}", key, layer[key])
        if key in PHASE_KEYS:
            for phase in PHASES:
                values[f"{key}_{phase}"] = value
        else:
            values[key] = value


def build_params(values: Mapping[str, Any]) -> Params:
    """Builds :class:`Params` from flat keys (``mfu_prefill``, ``kernels``...)."""
    defaults = Params()
    phases = {}
    for phase in PHASES:
        base = defaults.phase(phase)
        phases[phase] = dataclasses.replace(base, **{
            k: values[f"{k}_{phase}"] for k in PHASE_KEYS if f"{k}_{phase}" in values})
    globals_ = {k: values[k] for k in GLOBAL_KEYS if k in values}
    kernel = KernelParams(**{k: values[k] for k in KERNEL_KEYS if k in values})
    return Params(prefill=phases["prefill"], decode=phases["decode"], kernel=kernel, **globals_)


def _matches(entry: Mapping[str, Any], device: str) -> bool:
    names = [entry.get("device", "")] + list(entry.get("aliases", []))
    return device.lower() in (str(n).lower() for n in names)


def load_profile(reference: str, device: str, *, field: str = "spec.options.profile") -> dict[str, Any]:
    """Parameters of ``device`` from a profile file (``calibrated``, or a path).

    Returns:
        The profile's flat parameters.

    Raises:
        InvalidArgument: the file is missing or malformed, or has no entry
            for ``device`` among several.
    """
    path = Path(reference)
    if not path.suffix:
        path = PROFILE_DIR / f"{reference}.yaml"
    entries = _read_profiles(path, field)
    for entry in entries:
        if _matches(entry, device):
            return dict(entry.get("params", {}))
    if len(entries) == 1:
        return dict(entries[0].get("params", {}))
    raise InvalidArgument(field, reference,
                          f"has no profile for device {device!r}; it has {[e.get('device') for e in entries]}")


def _read_profiles(path: Path, field: str) -> list[dict[str, Any]]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise InvalidArgument(field, str(path), f"cannot be read as a profile: {err}") from err
    entries = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InvalidArgument(field, str(path), "must hold a `profiles:` list of {device, aliases, params}")
    return entries


def link_params(extra: Mapping[str, float]) -> dict[str, Any]:
    """The collective parameters of the link ``extra`` describes; empty unless it gives every
    :data:`LINK_PARAMS` key.

    Raises:
        InvalidArgument: a link figure is out of range.
    """
    if not all(key in extra for key in LINK_PARAMS):
        return {}
    values: dict[str, Any] = {"allreduce_formula": "ring"}
    for key, params in LINK_PARAMS.items():
        for param in params:
            values[param] = _check(f"spec.hardware.extra.{key}", param, extra[key])
    return values


def profile_params(profile: str, device: str, family: str | None) -> tuple[dict[str, Any], bool]:
    """The parameters ``profile`` sets for ``device`` and whether the device's link figures apply
    under them (the fitted and BestServe parameters fit no collective; a calibrated profile's
    ``comm_eff`` absorbs the latency the link would add again).

    Raises:
        InvalidArgument: an unknown profile or family.
    """
    if profile in BESTSERVE_PROFILES:
        return {}, True
    if profile in FITTED_PROFILES:
        return fitted_profiles.params_for(device, family=family), True
    return load_profile(profile, device), False


def resolve_params(device: str, extra: Mapping[str, float], options: Mapping[str, Any]) -> Params:
    """Resolves a session's parameters: defaults < link < profile < extra < options.

    Raises:
        InvalidArgument: an option is unknown or a value is out of range.
    """
    values: dict[str, Any] = {}
    profile, family = options.get("profile", "auto"), options.get("family")
    if not isinstance(profile, str):
        raise InvalidArgument("spec.options.profile", profile,
                              "must be auto, fitted, bestserve, none, a profile name or a path")
    if family is not None and not isinstance(family, str):
        raise InvalidArgument("spec.options.family", family, f"must be one of {fitted_profiles.family_names()}")
    chosen, with_link = profile_params(profile, device, family)
    if with_link:
        _apply(values, link_params(extra), "spec.hardware.extra", strict=True)
    _apply(values, chosen, f"profile[{profile}]", strict=True)
    # The presets' tdp_w in extra is the hub's power model's figure (docs/energy.md): only an
    # explicit option makes this backend report its own TDP x duration upper bound.
    _apply(values, {k: v for k, v in extra.items() if k != "tdp_w"}, "spec.hardware.extra", strict=False)
    _apply(values, options, "spec.options", strict=True)
    if values.get("kernels") == "eager" and "execution" not in options:
        values["execution"] = "eager"  # Hugging Face eager kernels run without graphs (BestServe's dispatch)
    if values.get("op_model") == "fitted":
        for key in options:
            if key.split("_")[0] in PHASE_MODEL_KEYS:
                raise InvalidArgument(f"spec.options.{key}", options[key],
                                      "is an efficiency of BestServe's per-phase model, which the fitted profile "
                                      "does not use (it times each kernel class: gemm_eff, attn_mem_eff, ...); "
                                      "add profile: bestserve to time with it")
    return build_params(values)
