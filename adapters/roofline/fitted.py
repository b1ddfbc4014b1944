"""The fitted default: per-family parameters from ``profiles/fitted.yaml``.

``python -m cosim.adapters.roofline.fit`` (or ``cosim calibrate roofline``)
writes the file from public kernel and step measurements; this module only
reads it. Each family (``ampere``, ``hopper``, ...) lists the device presets
it covers and those it was measured on. A device runs its family's fitted
efficiencies over its own datasheet peaks; a device in no family runs the
``generic`` parameters, fitted on every GPU at once (``family_of`` says
which applies, and ``cosim presets devices -s`` prints it).

Main names: :func:`params_for`, :func:`family_of`, :func:`family_names`, :func:`load`.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import yaml

from cosim.adapters.sdk import InvalidArgument

log = logging.getLogger(__name__)

FITTED_PATH = Path(__file__).with_name("profiles") / "fitted.yaml"
GENERIC = "generic"


@functools.cache
def load(path: Path = FITTED_PATH) -> dict[str, dict[str, Any]]:
    """The families of the fitted profile, by name (read once per process).

    Raises:
        InvalidArgument: the file is missing or malformed.
    """
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise InvalidArgument("spec.options.profile", str(path),
                              f"cannot be read as the fitted profile: {err}") from err
    families = data.get("families") if isinstance(data, dict) else None
    if not isinstance(families, list) or not all(isinstance(f, dict) and "name" in f for f in families):
        raise InvalidArgument("spec.options.profile", str(path), "must hold a `families:` list of {name, params}")
    return {str(f["name"]): f for f in families}


def family_names() -> list[str]:
    """The families the fitted profile holds."""
    return sorted(load())


def family_of(device: str) -> tuple[str, str]:
    """The family whose parameters ``device`` runs, and on what basis.

    Returns:
        ``(family, basis)``: basis ``measured`` (the family was fitted on this
        device's own kernels or steps), ``family`` (on other devices of its
        family; the device brings its own datasheet peaks), ``bestserve``
        (Ascend: BestServe's parameters, measured on the 910B3) or ``generic``
        (no family: the parameters fitted on every GPU).
    """
    name = device.lower()
    for family, entry in load().items():
        if name in (str(d).lower() for d in entry.get("measured", [])):
            return family, "measured"
        if name in (str(d).lower() for d in entry.get("devices", [])):
            return family, str(entry.get("basis", "family"))
    return GENERIC, "generic"


def params_for(device: str, *, family: str | None = None) -> dict[str, Any]:
    """The fitted parameters ``device`` runs (those of ``family`` when given), with the device's own
    where the family measured them (``device_params``: its custom all-reduce).

    Raises:
        InvalidArgument: ``family`` is not in the fitted profile.
    """
    families = load()
    if family is None:
        family, basis = family_of(device)
        if basis == "generic":
            log.info("device %s is in no fitted family: the roofline uses the generic fit", device)
    elif family not in families:
        raise InvalidArgument("spec.options.family", family, f"must be one of {sorted(families)}")
    own = {str(k).lower(): v for k, v in families[family].get("device_params", {}).items()}
    return {**families[family].get("params", {}), **own.get(device.lower(), {})}
