"""The fit, family by family: kernel parameters, then eager host costs.

1. **Kernels.** Every family's kernel parameters (:mod:`..kernels`) are fitted
   on the kernel rows of the devices measured in it (:mod:`.kernelfit`);
   ``generic`` on the rows of every GPU.
2. **MoE floor.** With its kernels fixed, every family's floor of a fused MoE
   call (``moe_floor_us``) is fitted on aiconfigurator-core's vLLM MoE tables
   (:mod:`.moe`); a family without them takes the ``generic`` floor (every table).
3. **Eager host.** Splitwise's DGX iterations ran an engine that launches
   every kernel from the host (its decode steps do not shrink from TP4 to
   TP8 while the weights each GPU reads halve), so they fit the costs of
   ``execution: eager``: one launch time per kernel (the dispatch of a module
   is its kernel count times it, :data:`KERNELS_PER_MODULE`), a host time
   per prefill and per decode step and per sequence of a step, and the bus
   efficiency its all-reduces reached: one up to a knee in the message size
   and a lower one beyond it (its prefills of more than 2048 tokens slow down
   by the activation volume they all-reduce), with the family's kernels
   fixed and host and device taking turns (:data:`EAGER_OVERLAP`). A family
   without such data takes the costs fitted on both DGX nodes at once.
4. The default execution is ``graphs`` with no host time (vLLM V1; see
   ``params.SOURCES["graph_step_us"]``); the eager costs apply only when a
   session asks for ``execution: eager``.

Main names: :data:`FAMILIES`, :class:`Data`, :func:`load_data`, :func:`fit_family`,
:func:`fit_host`, :func:`fit_moe_floors`, :func:`fit_all`, :func:`family_params`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from ..kernels import KERNEL_KEYS, KernelParams
from ..presets import device_presets
from . import datasets as D
from . import moe as M
from . import steps as S
from .kernelfit import fit_kernels
from .rows import Rows

log = logging.getLogger(__name__)

# family -> (what it is, device presets in it). Membership follows the GPU architecture.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ampere": ("NVIDIA Ampere data-center GPUs (sm_80)", ("A100-40GB", "A100-80GB")),
    "hopper": ("NVIDIA Hopper GPUs (sm_90)", ("H100-SXM", "H100-PCIe", "H200")),
    "ada": ("NVIDIA Ada Lovelace data-center GPUs (sm_89)", ("L40S",)),
    # GeForce cards' datasheet peak counts tensor math with FP32 accumulation at half rate; their
    # measured bf16 GEMMs reach it, where the L40S's reach ~0.7 of its full-rate peak.
    "ada-geforce": ("NVIDIA Ada Lovelace GeForce GPUs (sm_89)", ("RTX-4090",)),
    "blackwell": ("NVIDIA Blackwell data-center GPUs (sm_100/sm_103)", ("B200", "GB200", "B300", "GB300")),
    "blackwell-rtx": ("NVIDIA Blackwell RTX GPUs (sm_120)", ("RTX-PRO-6000",)),
    "xe2": ("Intel Xe2 GPUs (vLLM XPU)", ("Arc-Pro-B60",)),
}
FAMILIES_OF = {device: family for family, (_, devices) in FAMILIES.items() for device in devices}
GENERIC = "generic"
# Ascend NPUs run BestServe's parameters, which were measured on the 910B3 (seeds/003 §4.1).
BESTSERVE_DEVICES = ("Ascend-910B3",)
# Kernels the host launches per module in an eager vLLM-style engine: fused add+RMSNorm; QKV GEMM,
# RoPE, KV-cache write, attention, O GEMM and the TP all-reduce; gate_up GEMM, SiLU-and-mul, down
# GEMM and the all-reduce; final norm, LM head and sampler.
KERNELS_PER_MODULE = {"norm": 1, "attention": 6, "mlp": 4, "head": 3}
HOST_KEYS = ("launch_us", "step_overhead_us_prefill", "step_overhead_us_decode", "eager_seq_us", "eager_comm_eff",
             "eager_comm_eff_large", "eager_comm_knee_mib")
HOST_START = np.array([20.0, 1000.0, 1000.0, 100.0, 0.5, 0.2, 32.0])
# No engine's all-reduce beats NCCL's own bus efficiency on NVLink (the presets' 0.52 on A100, 0.73
# on H100: Vidur's NCCL measurements), hence 0.75; the knee lies within the messages the data hold.
HOST_BOUNDS = (np.array([0.0, 0.0, 0.0, 0.0, 0.02, 0.01, 4.0]),
               np.array([200.0, 50_000.0, 50_000.0, 5_000.0, 0.75, 0.75, 256.0]))
# The share of the eager host's dispatch the device hides: 0, host and device take turns. Chosen over
# 1 (Algorithm 1) and 0.5 by the held-out errors it gives (docs/roofline.md, "The eager engine"):
# under it both DGX boxes' host costs come out alike, as the same engine's should.
EAGER_OVERLAP = 0.0
DEFAULT_OPTIONS = {"profile": "bestserve", "op_model": "fitted", "kernels": "fused"}


@dataclasses.dataclass
class Data:
    """Everything the fit reads: kernel rows and measured steps."""

    rows: Rows
    steps: list[S.Step]
    allreduce: list[tuple[str, int, float, float]] = dataclasses.field(default_factory=list)
    moe: list[M.MoeRow] = dataclasses.field(default_factory=list)


def load_data(data: Path, *, with_aiconfigurator: bool = True) -> Data:
    """Reads every dataset (aiconfigurator-core's tables when installed and asked for)."""
    rows = D.vidur_mlp(data) + D.vidur_attention(data) + D.llmservingsim_bundle(data)
    if with_aiconfigurator:
        rows += D.aiconfigurator_tables()
    steps = S.llmservingsim_steps(data) + S.vidur_steps(data) + S.splitwise_steps(data)
    return Data(Rows.of(rows), steps, D.aiconfigurator_allreduce() if with_aiconfigurator else [],
                M.aiconfigurator_moe() if with_aiconfigurator else [])


def fit_allreduce(rows: list[tuple[str, int, float, float]]) -> dict[str, dict[str, float]]:
    """Per NVLink device: the latency and bus efficiency of vLLM's custom all-reduce under CUDA
    graphs, fitted on relative error as NCCL's ring formula on the device's link (``..collectives``).

    PCIe devices keep the link model of their presets (NCCL's paths without NVLink are modelled
    there, issue 34 item 5), whose figures this would override.
    """
    out = {}
    nvlink = {name for name, entry in device_presets().items() if entry.get("intra_node_link") == "nvlink"}
    for device in sorted({r[0] for r in rows} & nvlink):
        own = [r for r in rows if r[0] == device]
        link = float(device_presets()[device]["intra_node_gbps"]) * 1e9
        n = np.array([r[1] for r in own], float)
        size = np.array([r[2] for r in own])
        measured_us = np.array([r[3] for r in own]) * 1e3

        def residuals(x: np.ndarray, n: np.ndarray = n, size: np.ndarray = size,
                      measured_us: np.ndarray = measured_us, link: float = link) -> np.ndarray:
            return np.log((x[0] + 2 * (n - 1) / n * size / (x[1] * link) * 1e6) / measured_us)

        result = least_squares(residuals, np.array([5.0, 0.3]), bounds=([0.0, 0.01], [100.0, 1.0]))
        out[device] = {"graph_allreduce_latency_us": float(result.x[0]), "graph_allreduce_bus_eff": float(result.x[1])}
    return out


def host_options(x: Iterable[float]) -> dict[str, float]:
    """Session options of the eager engine from its :data:`HOST_KEYS` values (the launch time per
    kernel becomes each module's ``dispatch_*_us``)."""
    values = dict(zip(HOST_KEYS, (float(v) for v in x), strict=True))
    launch = values.pop("launch_us")
    return {**{f"dispatch_{module}_us": n * launch for module, n in KERNELS_PER_MODULE.items()}, **values,
            "eager_overlap": EAGER_OVERLAP}


def kernel_options(k: KernelParams) -> dict[str, float]:
    return {key: float(getattr(k, key)) for key in KERNEL_KEYS}


def fit_host(steps: list[S.Step], kernels: dict[str, KernelParams]) -> dict[str, float]:
    """Fits the eager host costs on engine steps, each device's kernels fixed (``kernels`` by device)."""
    steps = [s for s in steps if s.kind == "engine"]
    if not steps:
        return {}
    measured = np.array([s.measured_ms for s in steps])

    def residuals(x: np.ndarray) -> np.ndarray:
        caches: dict[str, dict[Any, Any]] = {}
        pred = np.array([S.predict_ms(s, {**DEFAULT_OPTIONS, **kernel_options(kernels[s.device]),
                                          "execution": "eager", **host_options(x)}, caches.setdefault(s.device, {}))
                         for s in steps])
        return np.log(pred / measured)

    result = least_squares(residuals, HOST_START, bounds=HOST_BOUNDS, x_scale=HOST_START, diff_step=1e-3)
    log.info("host fit on %d steps: cost %.4g, %s", len(steps), result.cost, result.x)
    return host_options(result.x)


def fit_moe_floors(kernels: dict[str, KernelParams], rows: list[M.MoeRow]) -> dict[str, KernelParams]:
    """Every family's kernels with the MoE floor fitted on its devices' fused MoE rows (its
    kernels fixed), or the ``generic`` floor (fitted on every row) where it has none."""
    generic = M.fit_floor(rows, lambda _: kernels[GENERIC]) or 0.0
    out = {}
    for family, k in kernels.items():
        own = [r for r in rows if r.device in FAMILIES.get(family, ("", ()))[1]]
        floor = M.fit_floor(own, lambda _, k=k: k) if own else None
        out[family] = dataclasses.replace(k, moe_floor_us=generic if floor is None else floor)
    return out


def fit_family(rows: Rows, devices: Iterable[str], start: KernelParams | None = None) -> KernelParams | None:
    """The kernel parameters fitted on the rows of ``devices`` (what they cannot identify kept
    at ``start``); None when they have none."""
    sub = rows.where(np.isin(rows.device, list(devices)))
    return fit_kernels(sub, start=start) if len(sub) else None


@dataclasses.dataclass
class Fit:
    """The outcome: kernel parameters per family and eager host costs per family."""

    kernels: dict[str, KernelParams]
    host: dict[str, dict[str, float]]
    measured: dict[str, list[str]]   # family -> devices with rows
    devices: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # device -> own parameters

    def device_kernels(self, device: str) -> KernelParams:
        family = FAMILIES_OF.get(device, GENERIC)
        return self.kernels[family if family in self.kernels else GENERIC]

    def params(self, family: str, device: str | None = None) -> dict[str, Any]:
        """The flat session parameters of ``family`` (what ``profiles/fitted.yaml`` stores), with
        ``device``'s own (its custom all-reduce) when given."""
        return {"op_model": "fitted", "kernels": "fused", "execution": "graphs", "graph_step_us": 0.0,
                "piecewise_layer_us": 0.0, **kernel_options(self.kernels[family]),
                **self.host.get(family, self.host[GENERIC]), **self.devices.get(device or "", {})}


def fit_all(data: Data, *, exclude_model: str | None = None, exclude_device: str | None = None,
            base: Fit | None = None) -> Fit:
    """Fits every family (and ``generic``), leaving out a model's or a device's data if asked.

    With ``base`` (the fit on everything), a family none of whose rows or steps were left out
    keeps its fit there, which saves refitting it for every held-out model or device.
    """
    rows = data.rows
    keep = np.ones(len(rows), bool)
    if exclude_model:
        keep &= rows.model != exclude_model
    if exclude_device:
        keep &= rows.device != exclude_device
    rows = rows.where(keep)
    steps = [s for s in data.steps if s.model != exclude_model and s.device != exclude_device]
    kernels: dict[str, KernelParams] = {}
    measured: dict[str, list[str]] = {}
    generic = fit_family(rows, sorted(set(rows.device)))
    assert generic is not None, "no kernel rows to fit"
    kernels[GENERIC], measured[GENERIC] = generic, sorted(str(d) for d in set(rows.device))
    untouched = set()
    for family, (_, devices) in FAMILIES.items():
        before = np.isin(data.rows.device, list(devices)).sum()
        if base is not None and family in base.kernels and before == np.isin(rows.device, list(devices)).sum() \
                and sum(s.device in devices for s in steps) == sum(s.device in devices for s in data.steps):
            kernels[family], measured[family] = base.kernels[family], base.measured[family]
            untouched.add(family)
            continue
        fitted = fit_family(rows, devices, generic)
        if fitted is not None:
            kernels[family] = fitted
            measured[family] = sorted(str(d) for d in set(rows.device) & set(devices))
    moe = [r for r in data.moe if r.model != exclude_model and r.device != exclude_device]
    kernels = fit_moe_floors(kernels, moe)
    fit = Fit(kernels, {}, measured, fit_allreduce([r for r in data.allreduce if r[0] != exclude_device]))
    by_device = {s.device: fit.device_kernels(s.device) for s in steps}
    fit.host[GENERIC] = fit_host(steps, by_device)
    for family, (_, devices) in FAMILIES.items():
        own = [s for s in steps if s.device in devices]
        if family in untouched and base is not None and family in base.host:
            fit.host[family] = base.host[family]
        elif any(s.kind == "engine" for s in own):
            fit.host[family] = fit_host(own, by_device)
    return fit
