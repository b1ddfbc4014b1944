"""Step-level errors of the fitted roofline: in sample, leave one model out, leave one GPU out.

Each measured step (:mod:`.steps`) is timed with the parameters of its
device's family. *In sample* uses the fit on everything. *Leave one model
out* (LOMO) refits every family without any row or step of one model (its
operator shapes in every dataset; aiconfigurator-core's shape grids belong
to no model and stay) and times that model's steps. *Leave one GPU out*
(LOGO) refits without any row or step of one device, which then runs its
family's fit on the other devices, or the ``generic`` fit when its family
has no other (what a device without data gets). Engine steps (Splitwise) are
timed under ``execution: eager``, the measured engine's mode; ``bare`` also
times them as a bare ``{kind: roofline}`` would, under ``graphs``.

Fused MoE calls (:mod:`.moe`) are scored per device as kernels are: in
sample, leaving one MoE model out (its rows' floor refitted without it, the
kernels fixed) and in the LOGO fits.

Main names: :class:`Score`, :func:`score`, :func:`in_sample`, :func:`lomo`, :func:`logo`,
:func:`moe_score`, :func:`moe_lomo`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from typing import Any

import numpy as np

from . import moe as M
from . import pipeline as P
from . import steps as S
from .kernelfit import errors_pct, thin

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Score:
    """Errors of one group of steps (percent)."""

    rows: int
    mape: float
    worst: float
    bias: float

    @classmethod
    def of(cls, errors: list[float]) -> Score:
        e = np.array(errors)
        return cls(len(e), float(np.mean(np.abs(e))), float(np.max(np.abs(e))), float(np.mean(e)))


def step_options(fit: P.Fit, step: S.Step, *, bare: bool = False) -> dict[str, Any]:
    """The session options that time ``step`` with ``fit`` (its family's parameters)."""
    family = P.FAMILIES_OF.get(step.device, P.GENERIC)
    options = {**P.DEFAULT_OPTIONS, **fit.params(family if family in fit.kernels else P.GENERIC, step.device)}
    if step.kind == "engine" and not bare:
        options["execution"] = "eager"
    return options


def errors(fit: P.Fit, steps: list[S.Step], *, bare: bool = False) -> list[float]:
    """Signed percentage error of every step."""
    caches: dict[str, dict[Any, Any]] = defaultdict(dict)
    return [(S.predict_ms(s, step_options(fit, s, bare=bare), caches[s.device]) / s.measured_ms - 1) * 100
            for s in steps]


def group_key(step: S.Step) -> tuple[str, str]:
    return step.dataset, step.device


def score(fit: P.Fit, steps: list[S.Step], *, bare: bool = False) -> dict[tuple[str, str], Score]:
    """Errors per (dataset, device)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for step, e in zip(steps, errors(fit, steps, bare=bare)):
        groups[group_key(step)].append(e)
    return {key: Score.of(v) for key, v in sorted(groups.items())}


def in_sample(data: P.Data, fit: P.Fit) -> dict[str, dict[tuple[str, str], Score]]:
    """Errors of the final fit on every step, and of a bare roofline on the engine steps."""
    engine = [s for s in data.steps if s.kind == "engine"]
    return {"fitted": score(fit, data.steps), "bare": score(fit, engine, bare=True)}


def lomo(data: P.Data, base: P.Fit) -> dict[str, dict[tuple[str, str], Score]]:
    """Per model with steps: errors of its steps under a fit without it."""
    out = {}
    for model in sorted({s.model for s in data.steps}):
        log.info("leave one model out: %s", model)
        fit = P.fit_all(data, exclude_model=model, base=base)
        out[model] = score(fit, [s for s in data.steps if s.model == model])
    return out


def logo(data: P.Data, base: P.Fit) -> tuple[dict[str, dict[tuple[str, str], Score]], dict[str, Score],
                                              dict[str, Score]]:
    """Per device: errors of its steps (where it has any), of its measured kernels and of its fused
    MoE calls (where it has any) under a fit without it."""
    steps_out, kernels_out, moe_out = {}, {}, {}
    for device in sorted(set(data.rows.device)):
        log.info("leave one GPU out: %s", device)
        fit = P.fit_all(data, exclude_device=device, base=base)
        own = [s for s in data.steps if s.device == device]
        if own:
            steps_out[device] = score(fit, own)
        kernels_out[device] = kernel_score(data, fit, device)
        if any(r.device == device for r in data.moe):
            moe_out[device] = moe_score(data, fit, device)
    return steps_out, kernels_out, moe_out


def moe_score(data: P.Data, fit: P.Fit, device: str) -> Score:
    """Errors of ``device``'s fused MoE calls under ``fit``."""
    return Score.of(M.errors_pct([r for r in data.moe if r.device == device], fit.device_kernels))


def moe_lomo(data: P.Data, base: P.Fit) -> dict[str, Score]:
    """Per device: errors of its fused MoE calls, each model's under floors fitted without that
    model's rows (the kernels of ``base`` fixed: no other dataset holds these shapes)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for model in sorted({r.model for r in data.moe}):
        kernels = P.fit_moe_floors(base.kernels, [r for r in data.moe if r.model != model])
        fit = dataclasses.replace(base, kernels=kernels)
        own = [r for r in data.moe if r.model == model]
        for row, e in zip(own, M.errors_pct(own, fit.device_kernels)):
            acc[row.device].append(e)
    return {device: Score.of(e) for device, e in sorted(acc.items())}


def kernel_score(data: P.Data, fit: P.Fit, device: str) -> Score:
    """Errors of ``device``'s measured kernels (thinned as the fit thins them) under ``fit``."""
    rows = thin(data.rows.where(data.rows.device == device))
    return Score.of(list(errors_pct(rows, fit.device_kernels(device))))


def pooled(groups: dict[Any, dict[tuple[str, str], Score]]) -> dict[tuple[str, str], Score]:
    """The groups of every held-out fit pooled per (dataset, device): rows-weighted MAPE, worst case."""
    acc: dict[tuple[str, str], list[Score]] = defaultdict(list)
    for scores in groups.values():
        for key, s in scores.items():
            acc[key].append(s)
    out = {}
    for key, held in sorted(acc.items()):
        n = sum(s.rows for s in held)
        out[key] = Score(n, sum(s.mape * s.rows for s in held) / n, max(s.worst for s in held),
                         sum(s.bias * s.rows for s in held) / n)
    return out
