"""Loaders for ASTRA-sim's own input files: network.yml and system.json.

``load_network_yml`` returns the ``TopologyDim`` list, converting bandwidth as
ASTRA-sim does (bw × 2^30 / 1e9: its "GB/s" is GiB/s) so the proto carries
bytes/ns. ``load_system_json`` returns a ``SystemConfig``; ``local-mem-bw``
stays decimal GB/s, as ASTRA-sim reads it. Keys that do not change timing in
the analytical model (scheduling policy, LogGP bus, roofline, tracing) are
accepted and ignored. Problems raise :class:`AstraInputError` naming the file
and key.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

log = logging.getLogger(__name__)

_TOPOLOGIES = {"ring": net_pb.TOPOLOGY_KIND_RING, "fullyconnected": net_pb.TOPOLOGY_KIND_FULLY_CONNECTED,
               "switch": net_pb.TOPOLOGY_KIND_SWITCH}
_ALGORITHMS = {"ring": net_pb.COLLECTIVE_ALGORITHM_RING, "direct": net_pb.COLLECTIVE_ALGORITHM_DIRECT,
               "halvingdoubling": net_pb.COLLECTIVE_ALGORITHM_HALVING_DOUBLING,
               "doublebinarytree": net_pb.COLLECTIVE_ALGORITHM_DOUBLE_BINARY_TREE}
_IMPLEMENTATION_KEYS = {"all-reduce-implementation": "all_reduce", "all-gather-implementation": "all_gather",
                        "reduce-scatter-implementation": "reduce_scatter",
                        "all-to-all-implementation": "all_to_all"}
_IGNORED_KEYS = {"scheduling-policy", "local-reduction-delay", "L", "o", "g", "G", "model-shared-bus",
                 "peak-perf", "roofline-enabled", "trace-enabled", "replay-only", "track-local-mem",
                 "local-mem-trace-filename", "boost-mode", "intra-dimension-scheduling",
                 "inter-dimension-scheduling"}


def gib_to_gbps(bandwidth: float) -> float:
    """ASTRA-sim's bw × 2^30 / 1e9, in its order of operations so the bytes/ns match bit for bit."""
    return bandwidth * (1 << 30) / 1e9


class AstraInputError(ValueError):
    """A problem in an ASTRA-sim input file, located by ``where`` (file: key)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(where, message)
        self.where, self.message = where, message

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def load_network_yml(path: str | Path) -> list[net_pb.TopologyDim]:
    """Reads an analytical network.yml into topology dims (dimension 0 first).

    Raises:
        AstraInputError: unreadable file, missing key, lists of different
            lengths, or an unknown topology name.
    """
    where = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise AstraInputError(where, f"cannot read network file: {err}") from err
    if not isinstance(data, dict):
        raise AstraInputError(where, "must be a mapping with topology, npus_count, bandwidth and latency")
    columns = {}
    for key in ("topology", "npus_count", "bandwidth", "latency"):
        if key not in data:
            raise AstraInputError(f"{where}: {key}", "is missing")
        columns[key] = _as_list(data[key])
    num_dims = len(columns["topology"])
    for key, values in columns.items():
        if len(values) != num_dims:
            raise AstraInputError(f"{where}: {key}", f"has {len(values)} entries, topology has {num_dims}")
    dims = []
    for i in range(num_dims):
        name = str(columns["topology"][i])
        kind = _TOPOLOGIES.get(name.lower())
        if kind is None:
            raise AstraInputError(f"{where}: topology[{i}]", f"{name!r} is not Ring, FullyConnected or Switch")
        try:
            dims.append(net_pb.TopologyDim(kind=kind, npus=int(columns["npus_count"][i]),
                                           bandwidth_gbps=gib_to_gbps(float(columns["bandwidth"][i])),
                                           latency_ns=float(columns["latency"][i])))
        except (TypeError, ValueError) as err:
            raise AstraInputError(f"{where}: dimension {i}", f"bad number: {err}") from err
    return dims


def _algorithm(where: str, name: str) -> int:
    base = re.sub(r"\d+$", "", str(name)).lower()  # "direct8" is direct with a window of 8
    if base.startswith("one"):
        raise AstraInputError(where, f"{name!r}: the one* flat-ring variants are not supported; use ring")
    if base not in _ALGORITHMS:
        raise AstraInputError(where, f"{name!r} is not ring, direct, halvingDoubling or doubleBinaryTree")
    return _ALGORITHMS[base]


def load_system_json(path: str | Path) -> net_pb.SystemConfig:
    """Reads an ASTRA-sim system.json into a ``SystemConfig``.

    Raises:
        AstraInputError: unreadable file or a bad value.
    """
    where = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise AstraInputError(where, f"cannot read system file: {err}") from err
    if not isinstance(data, dict):
        raise AstraInputError(where, "must be a JSON object")
    system = net_pb.SystemConfig()
    for key, value in data.items():
        here = f"{where}: {key}"
        try:
            if key in _IMPLEMENTATION_KEYS:
                getattr(system, _IMPLEMENTATION_KEYS[key]).extend(_algorithm(here, v) for v in _as_list(value))
            elif key == "endpoint-delay":
                system.endpoint_delay_ns = int(value)
            elif key == "preferred-dataset-splits":
                system.preferred_dataset_splits = int(value)
            elif key == "active-chunks-per-dimension":
                system.active_chunks_per_dimension = int(value)
            elif key == "local-mem-bw":
                system.local_mem_bandwidth_gbps = float(value)
            elif key == "collective-optimization":
                system.collective_optimization = _optimization(here, str(value))
            elif key in _IGNORED_KEYS or key.endswith("-implementation-custom"):
                log.debug("%s: ignored by the analytical model", here)
            else:
                log.warning("%s: unknown system key, ignored", here)
        except (TypeError, ValueError) as err:
            if isinstance(err, AstraInputError):
                raise
            raise AstraInputError(here, f"bad value {value!r}: {err}") from err
    return system


def _optimization(where: str, value: str) -> int:
    options = {"baseline": net_pb.COLLECTIVE_OPTIMIZATION_BASELINE,
               "localbwaware": net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE}
    if value.lower() not in options:
        raise AstraInputError(where, f"{value!r} is not baseline or localBWAware")
    return options[value.lower()]


def session_spec_from_files(network: str | Path, system: str | Path | None = None, *,
                            endpoints: Iterable[tuple[str, Iterable[int]]] = (),
                            mode: int = pb.SYNC_MODE_PREDICT, client: str = "") -> net_pb.NetworkSessionSpec:
    """A ``NetworkSessionSpec`` from ASTRA-sim's files plus named endpoints.

    Args:
        network: network.yml path.
        system: system.json path; None keeps the defaults (ring, no delays).
        endpoints: (name, NPU ids) pairs.
        mode: SYNC_MODE_PREDICT (congestion-unaware) or SYNC_MODE_TIME_SYNCHRONIZED.
        client: name for errors and logs.
    """
    spec = net_pb.NetworkSessionSpec(client=client, dims=load_network_yml(network), mode=mode)
    if system is not None:
        spec.system.CopyFrom(load_system_json(system))
    for name, npus in endpoints:
        spec.endpoints.add(name=name, npu_ids=list(npus))
    return spec
