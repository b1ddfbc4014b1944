"""Built-in model and device presets.

``models.yaml`` and ``devices.yaml`` ship with the package; each figure names
its source. Look-ups ignore case and accept aliases; an unknown name raises
:class:`UnknownPreset` with the closest known names::

    from cosim.hub.config.presets import get_model, hardware_spec
    llama = get_model("llama3-8b")
    spec = hardware_spec("H100-SXM", count=4, dtype="bf16")
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml

from cosim.hub.config.presets.devices import (
    DTYPES,
    LINK_KINDS,
    PATH_CODES,
    PATH_FIELDS,
    DevicePreset,
    normalize_dtype,
)
from cosim.hub.config.presets.models import ModelPreset
from cosim.hub.config.presets.registry import PresetRegistry, UnknownPreset
from cosim.v1 import types_pb2 as pb

__all__ = [
    "DTYPES", "LINK_EXTRA_KEYS", "LINK_KINDS", "PATH_CODES", "PATH_FIELDS", "DevicePreset", "ModelPreset",
    "UnknownPreset", "builtin_devices",
    "builtin_models", "device_names",
    "get_device", "get_model", "hardware_spec", "model_names", "normalize_dtype",
]


# Link figures a HardwareSpec carries in ``extra`` (its fields name only the bandwidths).
LINK_EXTRA_KEYS = ("intra_node_latency_us", "intra_node_hop_latency_us", "intra_node_bus_efficiency")


# The package's own files, read by LibYAML's safe loader where PyYAML has it: the same objects as
# the pure-Python one (tests/unit/config checks), at a tenth of the CPU (0.06 s a process).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(filename: str, key: str) -> list[dict[str, Any]]:
    text = resources.files(__name__).joinpath(filename).read_text(encoding="utf-8")
    entries: list[dict[str, Any]] = yaml.load(text, Loader=_SAFE_LOADER)[key]
    return entries


# models_aiconfigurator.yaml is generated from the model configs aiconfigurator-core ships
# (cosim.adapters.aiconfigurator.catalog); it follows the hand-written models.
MODEL_FILES = ("models.yaml", "models_aiconfigurator.yaml")


# Cached because the files are immutable package data: one parse per process
# is a constant, not mutable global state.
@functools.cache
def _models() -> PresetRegistry[ModelPreset]:
    return PresetRegistry("model", (ModelPreset(**e) for f in MODEL_FILES for e in _load(f, "models")))


@functools.cache
def _devices() -> PresetRegistry[DevicePreset]:
    return PresetRegistry("device", (DevicePreset(**e) for e in _load("devices.yaml", "devices")))


def get_model(name: str) -> ModelPreset:
    """The model preset called ``name`` (HF id or alias, any case).

    Raises:
        UnknownPreset: no such model; the message suggests close names.
    """
    return _models().get(name)


def get_device(name: str) -> DevicePreset:
    """The device preset called ``name`` (or an alias, any case).

    Raises:
        UnknownPreset: no such device; the message suggests close names.
    """
    return _devices().get(name)


def builtin_models() -> list[ModelPreset]:
    """Every built-in model preset, in file order."""
    return _models().presets()


def builtin_devices() -> list[DevicePreset]:
    """Every built-in device preset, in file order."""
    return _devices().presets()


def model_names() -> list[str]:
    """Canonical model names, in file order."""
    return _models().names()


def device_names() -> list[str]:
    """Canonical device names, in file order."""
    return _devices().names()


def hardware_spec(device: DevicePreset | str, count: int, dtype: str = "fp16") -> pb.HardwareSpec:
    """The ``HardwareSpec`` of ``count`` devices computing in ``dtype``.

    ``extra`` carries the power figures it has (``tdp_w``, ``idle_w``, ``memory_bound_w``; see
    :mod:`cosim.hub.sim.power`), when known ``price_per_hour_usd`` (per device), and the
    intra-node link's collective figures (:data:`LINK_EXTRA_KEYS`: ``intra_node_latency_us``,
    ``intra_node_hop_latency_us``, ``intra_node_bus_efficiency``; see ``devices.yaml``) and, for
    a device without NVLink, its path (:data:`PATH_FIELDS`; the path as its :data:`PATH_CODES`
    code). Devices without a path get no path keys, so their specs are as before paths existed.

    Args:
        device: a preset or its name.
        count: devices in the cluster (> 0).
        dtype: compute dtype whose peak fills ``peak_tflops``.

    Raises:
        UnknownPreset: unknown device name, or no peak listed for ``dtype``.
        ValueError: count < 1.
    """
    preset = get_device(device) if isinstance(device, str) else device
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    extra = {key: value for key in ("tdp_w", "idle_w", "memory_bound_w") if (value := getattr(preset, key)) is not None}
    extra.update({key: getattr(preset, key) for key in LINK_EXTRA_KEYS})
    if preset.intra_node_path is not None:
        extra.update({key: getattr(preset, key) for key in PATH_FIELDS[1:]})
        extra["intra_node_path"] = PATH_CODES[preset.intra_node_path]
    if preset.price_per_hour_usd is not None:
        extra["price_per_hour_usd"] = preset.price_per_hour_usd
    return pb.HardwareSpec(
        device=preset.name, count=count, peak_tflops=preset.peak_tflops_for(dtype),
        mem_bandwidth_gbps=preset.mem_bandwidth_gbps, mem_capacity_bytes=preset.mem_capacity_bytes,
        intra_node_gbps=preset.intra_node_gbps, inter_node_gbps=preset.inter_node_gbps,
        devices_per_node=preset.devices_per_node, extra=extra,
    )
