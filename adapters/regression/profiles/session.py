"""Opening a profile-bundle session from a SessionSpec and its options.

Options (``SessionSpec.options``), all optional but ``profile_bundle``:
``profile_bundle`` (bundle folder), ``profile_tp`` (TP folder to read;
default ``parallelism.tensor``), ``link_gbps``, ``link_bus_efficiency``, ``link_latency_us``,
``link_hop_latency_us`` (default: the device's link), ``link_path`` (``p2p``, ``switch``,
``host_staged``, or ``ring`` for the ring model whatever the device's path), its figures
``link_path_latency_us``, ``link_path_bus_efficiency``, ``link_host_staged_gbps``,
``link_host_staged_latency_us`` (default: the device's path and figures, then
:mod:`cosim.adapters.roofline.collectives`), ``skew`` (see :class:`ProfileOptions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cosim.adapters.roofline.collectives import PATHS, path_name
from cosim.adapters.sdk import InvalidArgument
from cosim.v1 import types_pb2 as pb

from .bundle import BundleError, load_bundle
from .step_model import ModelShape, ProfileOptions, ProfileStepModel

_FLOAT_KEYS = ("link_gbps", "link_bus_efficiency", "link_latency_us", "link_hop_latency_us", "link_path_latency_us",
               "link_path_bus_efficiency", "link_host_staged_gbps", "link_host_staged_latency_us")
PROFILE_OPTION_KEYS = ("profile_bundle", "profile_tp", "skew", "link_path", *_FLOAT_KEYS)
# The device's intra-node link, as the hub passes a preset's figures (HardwareSpec.extra).
_LINK_EXTRA = {"link_bus_efficiency": "intra_node_bus_efficiency", "link_latency_us": "intra_node_latency_us",
               "link_hop_latency_us": "intra_node_hop_latency_us", "link_path_latency_us": "intra_node_path_latency_us",
               "link_path_bus_efficiency": "intra_node_path_bus_efficiency",
               "link_host_staged_gbps": "intra_node_host_staged_gbps",
               "link_host_staged_latency_us": "intra_node_host_staged_latency_us"}
# Keys whose value must be > 0 (a bandwidth or its share), not merely >= 0.
_POSITIVE_KEYS = ("link_gbps", "link_bus_efficiency", "link_path_bus_efficiency", "link_host_staged_gbps")


def _link_path(options: Mapping[str, Any], hardware: pb.HardwareSpec) -> str:
    """The path collectives take: ``link_path``, else the device's (its code in extra), else ``ring``."""
    if "link_path" in options:
        path = options["link_path"]
        if path not in (*PATHS, "ring"):
            raise InvalidArgument("spec.options.link_path", path, f"must be one of {[*PATHS, 'ring']}")
        return str(path)
    if "intra_node_path" not in hardware.extra:
        return "ring"
    try:
        return path_name(hardware.extra["intra_node_path"])
    except ValueError as err:
        raise InvalidArgument("spec.hardware.extra.intra_node_path", hardware.extra["intra_node_path"],
                              str(err)) from err


def _profile_options(options: Mapping[str, Any], hardware: pb.HardwareSpec) -> ProfileOptions:
    """The options, where not set from the device's link (``hardware``), else the defaults."""
    values: dict[str, Any] = {}
    if hardware.intra_node_gbps > 0:
        values["link_gbps"] = hardware.intra_node_gbps
    values |= {key: hardware.extra[extra] for key, extra in _LINK_EXTRA.items() if extra in hardware.extra}
    for key in _FLOAT_KEYS:
        if key in options:
            value = options[key]
            if not isinstance(value, (int, float)) or value < 0:
                raise InvalidArgument(f"spec.options.{key}", value, "must be a number >= 0")
            values[key] = float(value)
    for key in _POSITIVE_KEYS:
        if key in values and values[key] <= 0:
            raise InvalidArgument(f"spec.options.{key}", values[key], "must be > 0")
    values["link_path"] = _link_path(options, hardware)
    if values["link_path"] in ("p2p", "switch"):
        missing = [key for key in ("link_path_latency_us", "link_path_bus_efficiency") if key not in values]
        if missing:
            raise InvalidArgument("spec.options.link_path", values["link_path"],
                                  f"needs {' and '.join(missing)} (peer-to-peer figures of the link; the device "
                                  f"preset of a PCIe device gives them as intra_node_path_*)")
    if "skew" in options:
        values["skew"] = bool(options["skew"])
    return ProfileOptions(**values)


def open_profile_model(spec: pb.SessionSpec, options: Mapping[str, Any]) -> ProfileStepModel:
    """The profile-bundle predictor of one session.

    Raises:
        InvalidArgument: a bad option, or a bundle that cannot be read for this TP.
    """
    tp = int(options.get("profile_tp", spec.parallelism.tensor or 1))
    path = str(options["profile_bundle"])
    try:
        tables = load_bundle(path, tp)
    except (BundleError, OSError, KeyError) as err:
        raise InvalidArgument("spec.options.profile_bundle", path, f"cannot be loaded: {err}") from err
    model = spec.model
    shape = ModelShape(num_layers=model.num_layers, hidden_size=model.hidden_size, num_experts=model.num_experts,
                       experts_per_token=model.experts_per_token, tp=spec.parallelism.tensor or 1,
                       ep=spec.parallelism.expert or 1)
    if tables.moe is not None and not model.num_experts:
        raise InvalidArgument("spec.model.num_experts", 0, f"bundle {path} is a MoE model; the spec is dense")
    return ProfileStepModel(tables, shape, _profile_options(options, spec.hardware))
