"""Named memory tiers (``presets.yaml``) turned into ``MemoryLevel`` messages.

    levels_from_presets(["lpddr", "rack-shared"], hit_rates=[0.5, 0.9])

Main names: :func:`load_presets`, :func:`levels_from_presets`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from cosim.v1 import memory_service_pb2 as mem_pb

PRESETS_PATH = Path(__file__).with_name("presets.yaml")

_REQUIRED = ("capacity_bytes", "bandwidth_gbps", "latency_ns", "source")


@functools.cache
def load_presets() -> Mapping[str, Mapping[str, Any]]:
    """The preset table, by name (read once).

    Raises:
        ValueError: an entry lacks a required figure or its source.
    """
    table = yaml.safe_load(PRESETS_PATH.read_text())
    for name, entry in table.items():
        missing = [key for key in _REQUIRED if key not in entry]
        if missing:
            raise ValueError(f"{PRESETS_PATH}: preset {name!r} lacks {missing}")
    return table  # type: ignore[no-any-return]


def levels_from_presets(names: Sequence[str], *, hit_rates: Sequence[float] | None = None,
                        shared_by: Mapping[str, Sequence[str]] | None = None) -> list[mem_pb.MemoryLevel]:
    """Builds hierarchy levels, nearest first, from preset names.

    Args:
        names: preset names, e.g. ``["lpddr", "rack-shared"]``.
        hit_rates: predict-mode hit rate of each level; default 1.0 each
            (so the first level serves every lookup).
        shared_by: clients sharing a level, by preset name; levels not named
            are dedicated per client.

    Returns:
        One ``MemoryLevel`` per name, named after its preset.

    Raises:
        ValueError: an unknown name, or as many hit rates as names not given.
    """
    presets = load_presets()
    unknown = [name for name in names if name not in presets]
    if unknown:
        raise ValueError(f"unknown memory preset(s) {unknown}; known: {sorted(presets)}")
    if hit_rates is not None and len(hit_rates) != len(names):
        raise ValueError(f"got {len(hit_rates)} hit rates for {len(names)} levels {list(names)}")
    rates = list(hit_rates) if hit_rates is not None else [1.0] * len(names)
    shared = shared_by or {}
    return [mem_pb.MemoryLevel(name=name, capacity_bytes=int(presets[name]["capacity_bytes"]),
                               bandwidth_gbps=float(presets[name]["bandwidth_gbps"]),
                               latency_ns=int(presets[name]["latency_ns"]), hit_rate=rate,
                               shared_by=list(shared.get(name, ())))
            for name, rate in zip(names, rates)]
