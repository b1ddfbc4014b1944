"""The device presets' entries as the roofline's fits and models read them (a light module: no fitting
code, so a backend can import it at run time)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from cosim.adapters.sdk.yaml_files import safe_load

PRESETS = Path(__file__).resolve().parents[2] / "hub" / "config" / "presets" / "devices.yaml"


@functools.cache
def device_presets() -> dict[str, dict[str, Any]]:
    """Every device preset's entry (name, aliases, link figures), by name."""
    return {e["name"]: e for e in safe_load(PRESETS.read_text())["devices"]}
