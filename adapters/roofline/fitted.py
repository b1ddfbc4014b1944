"""The fitted default: per-family parameters from ``profiles/fitted.yaml``.

``python -m cosim.adapters.roofline.fit`` (or ``cosim calibrate roofline``)
writes the file from public kernel and step measurements; this module only
reads it. Each family (``ampere``, ``hopper``, ...) lists the device presets
it covers and those it was measured on. A device runs its family's fitted
efficiencies over its own datasheet peaks; a device in no family runs the
``generic`` parameters, fitted on every GPU at once (``family_of`` says
which applies, and ``cosim presets devices -s`` prints it).

Main names: :func:`params_for`, :func:`family_of`, :func:`family_names`, :func:`load`,
:func:`step_mape` (the cross-validated error a session's step carries).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import yaml

from cosim.adapters.sdk import InvalidArgument
from cosim.adapters.sdk.yaml_files import safe_load

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
        data = safe_load(path.read_text())
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


def _chosen_family(device: str, family: str | None) -> tuple[str, str]:
    """The family ``device`` runs and why (:func:`family_of`), or ``family`` where an option chose it.

    Raises:
        InvalidArgument: ``family`` is not in the fitted profile.
    """
    if family is None:
        return family_of(device)
    if family not in load():
        raise InvalidArgument("spec.options.family", family, f"must be one of {sorted(load())}")
    return family, "option"


def params_for(device: str, *, family: str | None = None) -> dict[str, Any]:
    """The fitted parameters ``device`` runs (those of ``family`` when given), with the device's own
    where the family measured them (``device_params``: its custom all-reduce).

    Raises:
        InvalidArgument: ``family`` is not in the fitted profile.
    """
    families = load()
    family, basis = _chosen_family(device, family)
    if basis == "generic":
        log.info("device %s is in no fitted family: the roofline uses the generic fit", device)
    own = {str(k).lower(): v for k, v in families[family].get("device_params", {}).items()}
    return {**families[family].get("params", {}), **own.get(device.lower(), {})}


def _pooled(scores: dict[str, dict[str, Any]]) -> tuple[float, int, list[str]]:
    """The MAPE % of ``scores`` ({dataset/device: {steps, mape_pct}}) pooled over every step, the
    steps, and the datasets."""
    steps = sum(int(score["steps"]) for score in scores.values())
    mape = sum(int(score["steps"]) * float(score["mape_pct"]) for score in scores.values()) / steps
    return round(mape, 1), steps, sorted({key.split("/")[0] for key in scores})


def step_mape(device: str, *, family: str | None = None) -> tuple[float, str] | None:
    """The step-level error of ``device`` under the fitted default (``family``: the one chosen by
    option), from the cross-validation in the profile: a device its family measured gets the
    family's leave-one-model-out MAPE (the model it runs is one the fit may never have seen); any
    other its leave-one-GPU-out MAPE (a GPU the fit never saw). Each pooled over the family's
    datasets, weighted by their steps; a family without step measurements takes the generic fit's
    leave-one-GPU-out MAPE. None for Ascend (BestServe's parameters, not cross-validated).

    Returns:
        ``(MAPE as a fraction, a sentence saying where it comes from)``, or None.

    Raises:
        InvalidArgument: ``family`` is not in the fitted profile.
    """
    families = load()
    family, basis = _chosen_family(device, family)
    if basis == "bestserve":
        return None
    measured = device.lower() in (str(d).lower() for d in families[family].get("measured", []))
    split, what = ("lomo", "leave-one-model-out") if measured else ("logo", "leave-one-GPU-out")
    scores = families[family].get("cv", {}).get(split) or {}
    source = f"{family} family"
    if not scores:  # no step measured on this family: what any GPU the fit never saw gets
        split, what = "logo", "leave-one-GPU-out"
        scores = families[GENERIC].get("cv", {}).get(split) or {}
        source = f"{family} family (no step measurements: the generic fit's, every measured GPU)"
    if not scores:
        return None
    mape, steps, datasets = _pooled(scores)
    return round(mape / 100, 6), (f"fitted roofline, {source}, {what} step MAPE {mape:.1f}% "
                        f"({', '.join(datasets)}; {steps} steps)")
