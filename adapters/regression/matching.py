"""Maps a session spec onto trained artifact entries, or says why it cannot.

Devices match by name tokens (``"H100-SXM"`` -> ``h100``, ``"A100-80GB"`` ->
``a100``); models match by shape (hidden size, heads, KV heads, MLP size),
with the name and vocabulary breaking ties, so a preset under another name
but with a trained shape still works. Every failure is an
:class:`InvalidArgument` naming the field and listing what is known.

Main names: :func:`device_key`, :func:`build_operator_model`, :func:`find_step_entry`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from cosim.adapters.sdk import InvalidArgument
from cosim.v1 import types_pb2 as pb

from .artifact import OperatorArtifact, OperatorEntry, StepArtifact, StepEntry
from .operator_model import DEVICE_SPECS, OperatorStepModel, _Shard


def _tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", name.lower()) if t}


def device_key(device: str, known: Iterable[str]) -> str | None:
    """The trained device key ``device`` names, or None.

    A key matches when all its name tokens occur in ``device`` (or, for
    names without separators, as a substring); the most specific key wins.
    """
    have, flat = _tokens(device), re.sub(r"[^a-z0-9]", "", device.lower())
    best, best_len = None, 0
    for key in known:
        parts = _tokens(key)
        if (parts <= have or (len(parts) == 1 and next(iter(parts)) in flat)) and len(parts) > best_len:
            best, best_len = key, len(parts)
    return best


def _resolve_device(spec: pb.SessionSpec, known: set[str]) -> str:
    key = device_key(spec.hardware.device, known)
    if key is None:
        raise InvalidArgument("spec.hardware.device", spec.hardware.device,
                              f"has no trained regression artifact; known devices: {sorted(known)} "
                              "(e.g. 'H100-SXM' maps to h100, 'A100-80GB' to a100)")
    return key


def _model_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().rsplit("/", 1)[-1])


def _find_operator_entry(artifact: OperatorArtifact, spec: pb.SessionSpec) -> OperatorEntry:
    device = _resolve_device(spec, {e.device for e in artifact.operators})
    m, tp = spec.model, spec.parallelism.tensor or 1
    shape = (m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.intermediate_size)
    on_device = [e for e in artifact.operators if e.device == device]
    same = [e for e in on_device if (e.shape["n_embd"], e.shape["n_head"], e.shape["n_kv_head"],
                                     e.shape["n_expanded_embd"]) == shape]
    if not same:
        known = sorted({e.model for e in on_device})
        raise InvalidArgument("spec.model.name", m.name,
                              f"has no trained operator tables on {device}: no trained model has hidden_size="
                              f"{shape[0]}, num_attention_heads={shape[1]}, num_kv_heads={shape[2]}, "
                              f"intermediate_size={shape[3]}; known models: {known}")
    at_tp = [e for e in same if e.tp == tp]
    if not at_tp:
        raise InvalidArgument("spec.parallelism.tensor", tp,
                              f"has no trained tables for {same[0].model} on {device}; "
                              f"trained degrees: {sorted({e.tp for e in same})}")
    want = _model_name(m.name)
    return min(at_tp, key=lambda e: (_model_name(e.model) != want, e.shape["gated"] != int(m.gated_mlp),
                                     abs(e.shape["vocab_size"] - m.vocab_size)))


def _peak(spec: pb.SessionSpec, device: str) -> tuple[float, float]:
    default_tflops, default_gbps = DEVICE_SPECS.get(device.split("-")[0], DEVICE_SPECS["a100"])
    return (spec.hardware.peak_tflops or default_tflops, spec.hardware.mem_bandwidth_gbps or default_gbps)


def build_operator_model(artifact: OperatorArtifact, spec: pb.SessionSpec) -> OperatorStepModel:
    """Builds the operator-level step model of one session.

    Raises:
        InvalidArgument: no trained entry for the device, model shape or TP.
    """
    entry = _find_operator_entry(artifact, spec)
    m, tp = spec.model, entry.tp
    head_dim = m.head_dim or m.hidden_size // m.num_attention_heads
    peak, gbps = _peak(spec, entry.device)
    target = _Shard(m.num_attention_heads // tp, max(m.num_kv_heads // tp, 1), head_dim, peak, gbps,
                    m.bytes_per_kv_element or 2.0)
    exact = [a for a in artifact.attention if a.device == entry.device and
             (a.q_heads, a.kv_heads, a.head_dim) == (target.q_heads, target.kv_heads, head_dim)]
    if not exact and not artifact.attention:
        raise InvalidArgument("spec.model.name", m.name, "cannot be timed: the artifact holds no attention data")
    # The nearest measured shape (by GQA group size, then head dim) is scaled by a roofline ratio.
    attention = exact[0] if exact else min(artifact.attention, key=lambda a: (
        abs(a.q_heads / a.kv_heads - target.q_heads / target.kv_heads), abs(a.head_dim - head_dim)))
    ref_peak, ref_gbps = DEVICE_SPECS.get(attention.device, DEVICE_SPECS["a100"])
    reference = target if exact else _Shard(attention.q_heads, attention.kv_heads, attention.head_dim,
                                            ref_peak, ref_gbps, 2.0)
    all_reduce = artifact.all_reduce.get((entry.device, tp)) if tp > 1 else None
    if tp > 1 and all_reduce is None:
        raise InvalidArgument("spec.parallelism.tensor", tp,
                              f"has no measured all-reduce on {entry.device}; measured: "
                              f"{sorted(t for d, t in artifact.all_reduce if d == entry.device)}")
    overheads = [o for o in artifact.overhead if o.device == entry.device]
    overhead = next((o for o in overheads if o.tp == tp), None)
    if overhead is None and overheads:  # nearest fitted TP on the same device
        overhead = min(overheads, key=lambda o: abs(o.tp - tp))
    return OperatorStepModel(entry=entry, num_layers=m.num_layers, attention=attention, target=target,
                             reference=reference, all_reduce=all_reduce, overhead=overhead,
                             vocab_size=m.vocab_size or entry.shape["vocab_size"])


def find_step_entry(artifact: StepArtifact, spec: pb.SessionSpec) -> StepEntry:
    """The whole-step entry of one session (device by tokens, model by name, exact TP).

    Raises:
        InvalidArgument: no trained entry for the device, model or TP.
    """
    device = _resolve_device(spec, {e.device for e in artifact.entries})
    on_device = [e for e in artifact.entries if e.device == device]
    want = _model_name(spec.model.name)
    models = [e for e in on_device if want and (_model_name(e.model) in want or want in _model_name(e.model))]
    if not models:
        raise InvalidArgument("spec.model.name", spec.model.name,
                              f"has no trained step model on {device}; known models: "
                              f"{sorted({e.model for e in on_device})}")
    tp = spec.parallelism.tensor or 1
    for entry in models:
        if entry.tp == tp:
            return entry
    raise InvalidArgument("spec.parallelism.tensor", tp, f"has no trained step model for {models[0].model} on "
                          f"{device}; trained degrees: {sorted({e.tp for e in models})}")
