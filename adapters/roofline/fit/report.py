"""What the fit writes: ``profiles/fitted.yaml`` and the cross-validation table.

The profile holds, per family, the devices it covers (preset names and
aliases), those it was measured on, the kernel rows each dataset gave, the
step-level errors, and the parameters (:meth:`.pipeline.Fit.params`).
Floats are rounded to 4 significant digits so a refit on the same data
writes the same file.

Main names: :class:`Outcome`, :func:`profile_yaml`, :func:`render_table`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import yaml

from ..presets import device_presets
from . import pipeline as P
from .cv import Score

HEADER = ("# The roofline's fitted default (docs/roofline.md, \"The fitted default\"). Written by\n"
          "# `{command}`; do not edit by hand. Every value is fitted on the public measurements named\n"
          "# under `sources` (../shared/data and aiconfigurator-core {aic}); none on serving outcomes.\n")
# Ascend NPUs: BestServe measured its efficiencies on the 910B3 (seeds/003 §4.1).
ASCEND = {"name": "ascend", "description": "Huawei Ascend NPUs: BestServe's parameters (seeds/003 §4.1, Table 3), "
          "measured on the 910B3 with vLLM-Ascend", "basis": "bestserve", "devices": list(P.BESTSERVE_DEVICES),
          "measured": [], "params": {}}
SOURCES = {
    "vidur": "Vidur per-layer operator profiles (github.com/microsoft/vidur, MIT): shared/data/vidur/profiling "
             "and legacy/profiling/a100 attention",
    "llmservingsim": "LLMServingSim 2.0 vLLM 0.19 profile bundles (github.com/casys-kaist/LLMServingSim, MIT): "
                     "shared/data/llmservingsim/profiler/perf",
    "aiconfigurator": "aiconfigurator-core silicon-measured vLLM GEMM, attention and fused MoE tables (NVIDIA, "
                      "Apache-2.0)",
    "splitwise": "SplitwiseSim perf_model.csv DGX-A100/DGX-H100 iterations (github.com/Mutinifni/splitwise-sim, MIT): "
                 "the eager host costs only",
}


@dataclasses.dataclass
class Outcome:
    """A fit and its cross-validation."""

    fit: P.Fit
    data: P.Data
    in_sample: dict[str, dict[tuple[str, str], Score]]
    lomo: dict[tuple[str, str], Score]
    logo: dict[tuple[str, str], Score]
    logo_kernels: dict[str, Score]
    in_sample_kernels: dict[str, Score]
    moe_in_sample: dict[str, Score] = dataclasses.field(default_factory=dict)  # fused MoE calls, per device
    moe_lomo: dict[str, Score] = dataclasses.field(default_factory=dict)
    moe_logo: dict[str, Score] = dataclasses.field(default_factory=dict)


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


def _names(devices: list[str]) -> list[str]:
    presets = device_presets()
    return [str(n) for d in devices for n in [d, *presets.get(str(d), {}).get("aliases", [])]]


def _score(s: Score) -> dict[str, Any]:
    return {"steps": s.rows, "mape_pct": round(s.mape, 1), "worst_pct": round(s.worst, 1)}


def _family_entry(out: Outcome, family: str, description: str, devices: list[str]) -> dict[str, Any]:
    measured = out.fit.measured.get(family, [])
    rows = Counter(f"{d}/{v}" for d, v in zip(out.data.rows.dataset, out.data.rows.device) if v in measured)
    rows.update(f"aiconfigurator-moe/{r.device}" for r in out.data.moe if r.device in measured)
    steps = {f"{ds}/{dev}": _score(s) for (ds, dev), s in out.in_sample["fitted"].items() if dev in measured}
    cv = {"in_sample": steps,
          "lomo": {f"{ds}/{dev}": _score(s) for (ds, dev), s in out.lomo.items() if dev in measured},
          "logo": {f"{ds}/{dev}": _score(s) for (ds, dev), s in out.logo.items() if dev in measured},
          "logo_kernels": {d: _score(out.logo_kernels[d]) for d in measured if d in out.logo_kernels}}
    for split, scores in (("moe_in_sample", out.moe_in_sample), ("moe_lomo", out.moe_lomo),
                          ("moe_logo", out.moe_logo)):
        if any(d in scores for d in measured):
            cv[split] = {d: _score(scores[d]) for d in measured if d in scores}
    host = "eager host costs: " + ("splitwise " + ", ".join(
        sorted({s.device for s in out.data.steps if s.kind == "engine" and s.device in measured}))
        if family in out.fit.host else "the generic fit's (both DGX nodes)")
    own = {name: _round(out.fit.devices[d]) for d in devices if d in out.fit.devices for name in _names([d])}
    entry = {"name": family, "description": description, "devices": _names(devices), "measured": _names(measured),
             "sources": {"kernel_rows": dict(sorted(rows.items())), "host": host},
             "cv": cv, "params": _round(out.fit.params(family))}
    if own:
        entry["sources"]["device_params"] = ("vLLM's custom all-reduce under CUDA graphs, aiconfigurator-core "
                                             "custom_allreduce_perf (vllm_graph rows, messages <= 8 MiB)")
        entry["device_params"] = own
    return entry


def profile_yaml(out: Outcome, *, command: str, aic_version: str) -> str:
    """The text of ``profiles/fitted.yaml``."""
    families = [_family_entry(out, f, desc, list(devs)) for f, (desc, devs) in P.FAMILIES.items()
                if f in out.fit.kernels]
    families.append(ASCEND)
    families.append(_family_entry(out, P.GENERIC, "every GPU measured, pooled: devices in no family", []))
    body = yaml.safe_dump({"sources": SOURCES, "families": families}, sort_keys=False, width=120)
    return HEADER.format(command=command, aic=aic_version) + body


def _cell(s: Score | None) -> str:
    return f"{s.mape:.1f} ({s.worst:.0f})" if s else "—"


def render_table(out: Outcome) -> str:
    """Markdown: step-level MAPE (worst) per dataset and device, in sample, LOMO and LOGO."""
    fitted, bare = out.in_sample["fitted"], out.in_sample["bare"]
    lines = ["| dataset | device | family | steps | in sample | LOMO | LOGO | bare `graphs` |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (dataset, device), s in fitted.items():
        lines.append(f"| {dataset} | {device} | {P.FAMILIES_OF.get(device, P.GENERIC)} | {s.rows} | {_cell(s)} | "
                     f"{_cell(out.lomo.get((dataset, device)))} | {_cell(out.logo.get((dataset, device)))} | "
                     f"{_cell(bare.get((dataset, device)))} |")
    lines += ["", "| device | family | kernel rows | in sample | LOGO |", "| --- | --- | ---: | ---: | ---: |"]
    for device, s in sorted(out.in_sample_kernels.items()):
        lines.append(f"| {device} | {P.FAMILIES_OF.get(device, P.GENERIC)} | {s.rows} | {_cell(s)} | "
                     f"{_cell(out.logo_kernels.get(device))} |")
    if out.moe_in_sample:
        lines += ["", "| device | family | fused MoE calls | in sample | LOMO | LOGO |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        for device, s in sorted(out.moe_in_sample.items()):
            lines.append(f"| {device} | {P.FAMILIES_OF.get(device, P.GENERIC)} | {s.rows} | {_cell(s)} | "
                         f"{_cell(out.moe_lomo.get(device))} | {_cell(out.moe_logo.get(device))} |")
    return "\n".join(lines) + "\n"
