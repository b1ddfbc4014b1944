"""Fits the FlashAttention-2 varlen model (:mod:`..varlen`) on LLMServingSim's mixed attention shots.

The rows are every ``attention.csv`` shot of the vLLM 0.19 bundles that holds
both a prefill chunk and decodes (one varlen call of one layer on one rank;
the README in ``llmservingsim/`` says how they were measured). Each device
family is fitted on its own GPUs' rows (log residuals, soft-L1, as
:mod:`.kernelfit` fits the kernels); ``fa2`` pools every measured GPU and is
what an FA2 family without mixed shots runs (A100, L40S). The chunk-alone shots are fitted
too: a mixed step's decodes are timed as the call's increase over the chunk alone. The errors it reports:
in sample, leaving one model out (per GPU with several models) and leaving
one GPU out (the other GPU's fit, run with this GPU's own SMs, peak and
bandwidth), beside the current roofline's varlen terms on the same rows.

``python -m cosim.adapters.roofline.fit.varlen --data ../shared/data`` writes
``profiles/varlen.yaml``. Main names: :class:`Shots`, :func:`shots`, :func:`fit`,
:func:`predict_us`, :func:`profile`.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from .. import fitted
from ..kernels import KERNEL_KEYS, KernelParams
from ..presets import device_presets
from ..varlen import VARLEN_PATH, VarlenParams, decode_grid, grid
from . import rows as R
from .datasets import canonical_model, llmservingsim_bundles

log = logging.getLogger(__name__)

# (lower, upper) of every parameter, in PARAM_KEYS order; mem_eff may pass 1 (L2 hits).
BOUNDS = ((0.05, 1.0), (0.0, 50.0), (0.0, 10.0), (0.0, 100.0), (0.05, 3.0), (0.05, 1.0))
START = (0.5, 1.0, 0.3, 5.0, 0.8, 0.8)
CHUNK, MIXED, DECODES = range(3)
# Families whose GPUs run FlashAttention-2's varlen kernel in vLLM (sm80, sm86/89, sm120:
# vLLM's get_flash_attn_version picks FA3 on sm90 only); Blackwell data-centre GPUs run
# FlashInfer or FA3-style kernels by default and Hopper FA3, which split varlen KV as well.
FA2_FAMILIES = ("ampere", "ada", "ada-geforce", "blackwell-rtx")
POOLED = "fa2"


@dataclasses.dataclass
class Shots:
    """Mixed shots as arrays: the call's grid per query head, shapes, device figures, time."""

    device: np.ndarray
    model: np.ndarray
    bundle: np.ndarray  # device/model/tpN: the shots of one profile folder
    heads: np.ndarray
    kv_heads: np.ndarray
    head_dim: np.ndarray
    ctas: np.ndarray
    blocks: np.ndarray
    empty: np.ndarray
    longest: np.ndarray
    read_keys: np.ndarray
    chunk_keys: np.ndarray
    block_flops: np.ndarray
    num_sms: np.ndarray
    peak_flops: np.ndarray
    mem_bw: np.ndarray
    measured_us: np.ndarray
    shape: np.ndarray  # (chunk, cached, decodes, decode context) of each shot
    kind: np.ndarray   # CHUNK (a chunk alone), MIXED (a chunk and decodes) or DECODES (decodes alone)

    def where(self, mask: np.ndarray) -> Shots:
        return Shots(**{f.name: getattr(self, f.name)[mask] for f in dataclasses.fields(self)})

    def __len__(self) -> int:
        return len(self.measured_us)


def shots(data: Path) -> Shots:
    """Every bundle shot: a chunk beside decodes, a chunk alone, decodes alone (with the query heads
    of the swapped decode-only grid: its KV heads)."""
    cols: dict[str, list[Any]] = {f.name: [] for f in dataclasses.fields(Shots)}
    figures = R.device_figures()
    for device, model, tp, folder, config in llmservingsim_bundles(data):
        heads = config["num_attention_heads"] // tp
        kv_heads = max(config["num_key_value_heads"] // tp, 1)
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        sms = int(device_presets()[device]["num_sms"])
        with open(folder / "attention.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                pc, kp, nd, kd = (int(row[k]) for k in ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"))
                if pc:
                    g, rows_heads = grid([(pc, kp)], [kd] * nd, head_dim), heads
                else:
                    g, rows_heads = decode_grid([kd] * nd, kv_heads, head_dim, sms), kv_heads
                kind = MIXED if pc and nd else CHUNK if pc else DECODES
                for name, value in (("device", device), ("model", canonical_model(model)),
                                    ("bundle", f"{device}/{model}/tp{tp}"), ("heads", rows_heads),
                                    ("kv_heads", kv_heads), ("head_dim", head_dim), ("num_sms", sms),
                                    ("peak_flops", figures[device][0]), ("mem_bw", figures[device][1]),
                                    ("measured_us", float(row["time_us"])), ("shape", (pc, kp, nd, kd)),
                                    ("kind", kind),
                                    *dataclasses.asdict(g).items()):
                    cols[name].append(value)
    return Shots(**{k: np.array(v) for k, v in cols.items()})


def predict_us(s: Shots, p: VarlenParams) -> np.ndarray:
    """:func:`..varlen.grid_us` of every shot, as arrays."""
    block_us = s.block_flops * s.num_sms / (p.tile_eff * s.peak_flops) * 1e6
    work = s.heads * (s.ctas * p.cta_us + s.blocks * block_us + s.empty * p.empty_us) / s.num_sms
    traffic = 4.0 * s.head_dim * (s.heads * s.read_keys + s.kv_heads * s.chunk_keys)
    memory = traffic / (np.where(s.kind == DECODES, p.decode_mem_eff, p.mem_eff) * s.mem_bw) * 1e6
    return p.floor_us + np.maximum(np.maximum(work, p.cta_us + s.longest * block_us), memory)


def fit(s: Shots) -> VarlenParams:
    """The parameters that best fit ``s``: every (GPU, model, kind of shot) group weighs alike, so the
    two calls a mixed step's decodes are measured against (the chunk alone, the decodes alone) are
    fitted as well as the mixed call."""
    keys = list(zip(s.device, s.model, s.kind))
    counts = {k: keys.count(k) for k in set(keys)}
    weights = np.sqrt(np.array([1.0 / counts[k] for k in keys]) * len(keys) / len(counts))
    log_measured = np.log(s.measured_us)

    def residuals(x: np.ndarray) -> np.ndarray:
        return weights * (np.log(predict_us(s, VarlenParams(*x))) - log_measured)

    lower, upper = zip(*BOUNDS)
    result = least_squares(residuals, START, bounds=(lower, upper), loss="soft_l1", f_scale=0.1)
    return VarlenParams(*(float(f"{v:.4g}") for v in result.x))


def current_us(s: Shots) -> np.ndarray:
    """The current roofline's time of every shot (its fitted ``attn_*`` terms, varlen ones included)."""
    out = np.empty(len(s))
    for device in set(s.device):
        p = fitted.params_for(device)
        k = KernelParams(**{key: float(p[key]) for key in KERNEL_KEYS if key in p})
        idx = np.nonzero(s.device == device)[0]
        rows = [R.attention("", device, "", "attention", heads=s.heads[i], kv_heads=s.kv_heads[i],
                            head_dim=s.head_dim[i], seqs=[(1, s.shape[i][0], s.shape[i][1]),
                                                          (s.shape[i][2], 1, s.shape[i][3])], ms=1.0)
                for i in idx]
        out[idx] = R.predict_ns(R.Rows.of(rows), k) / 1e3
    return out


def score(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    e = predicted / measured - 1
    return {"shots": int(len(e)), "median_abs_pct": round(float(np.median(np.abs(e))) * 100, 1),
            "mape_pct": round(float(np.mean(np.abs(e))) * 100, 1), "bias_pct": round(float(np.mean(e)) * 100, 1)}


def composed(s: Shots, p: VarlenParams, mask: np.ndarray) -> dict[str, dict[str, float]]:
    """The mixed shots of ``mask`` whose chunk alone and decodes alone were shot too, composed from
    those two measured times as aiconfigurator composes a step: their plain ``sum``, and the chunk
    plus ``alpha`` x the decodes with alpha from ``p`` at the shot's shape (``adapters/aiconfigurator/mixed.py``)."""
    predicted = predict_us(s, p)
    index = {(b, int(k), tuple(int(x) for x in shape)): i
             for i, (b, k, shape) in enumerate(zip(s.bundle, s.kind, s.shape))}
    measured, plain, scaled = [], [], []
    for i in np.nonzero(mask & (s.kind == MIXED))[0]:
        pc, kp, nd, kd = (int(x) for x in s.shape[i])
        c, d = index.get((s.bundle[i], CHUNK, (pc, kp, 0, 0))), index.get((s.bundle[i], DECODES, (0, 0, nd, kd)))
        if c is None or d is None:
            continue
        alpha = (predicted[i] - predicted[c]) / predicted[d]
        measured.append(s.measured_us[i])
        plain.append(s.measured_us[c] + s.measured_us[d])
        scaled.append(s.measured_us[c] + alpha * s.measured_us[d])
    return {"sum": score(np.array(plain), np.array(measured)), "alpha": score(np.array(scaled), np.array(measured))}


def profile(s: Shots) -> dict[str, Any]:
    """The fitted families and their cross-validation, as ``profiles/varlen.yaml`` holds them."""
    families: dict[str, Any] = {}
    by_family: dict[str, list[str]] = {}
    for device in sorted({str(d) for d in s.device}):
        by_family.setdefault(fitted.family_of(device)[0], []).append(device)
    for family, devices in sorted(by_family.items()):
        own = np.isin(s.device, devices)
        p = fit(s.where(own))
        cv: dict[str, Any] = {"in_sample": {}, "current_terms": {}, "lomo": {}, "logo": {}, "composed": {}}
        for device in devices:
            mine = (s.device == device) & (s.kind == MIXED)
            cv["in_sample"][device] = score(predict_us(s.where(mine), p), s.measured_us[mine])
            cv["current_terms"][device] = score(current_us(s.where(mine)), s.measured_us[mine])
            cv["composed"][f"{device} in sample"] = composed(s, p, mine)
            models = sorted({str(m) for m in s.model[mine]})
            for model in models if len(models) > 1 else []:
                held = mine & (s.model == model)
                q = fit(s.where(own & (s.model != model)))
                cv["lomo"][f"{device}/{model}"] = score(predict_us(s.where(held), q), s.measured_us[held])
                cv["composed"][f"{device}/{model} lomo"] = composed(s, q, held)
            others = s.device != device
            if others.any():
                q = fit(s.where(others))
                cv["logo"][device] = score(predict_us(s.where(mine), q), s.measured_us[mine])
                cv["composed"][f"{device} logo"] = composed(s, q, mine)
        families[family] = {"measured": devices, "params": dataclasses.asdict(p), "cv": cv}
    families[POOLED] = {"measured": sorted({str(d) for d in s.device}), "params": dataclasses.asdict(fit(s))}
    return {"fa2_families": list(FA2_FAMILIES), "families": families}


HEADER = """\
# FlashAttention-2's varlen call with a prefill chunk (adapters/roofline/varlen.py; docs/roofline.md).
# Written by `python -m cosim.adapters.roofline.fit.varlen --data ../shared/data`; do not edit by hand.
# Fitted on LLMServingSim 2.0's vLLM 0.19 attention shots (github.com/casys-kaist/LLMServingSim, MIT:
# shared/data/llmservingsim/profiler/perf/*/*/bf16/tp*/attention.csv): every row with a chunk and
# decodes, and the chunk-alone rows; none on serving outcomes. Errors are per mixed shot (percent): in
# sample, leave one model out, leave one GPU out, and `current_terms`: the roofline's fitted attn_*
# terms (attn_varlen_share, attn_span_ns) on the same shots. `fa2` pools every measured GPU: the
# parameters of an FA2 family without mixed shots.
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the shared data folder (../shared/data)")
    parser.add_argument("--out", type=Path, default=VARLEN_PATH)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    s = shots(args.data)
    log.info("%d mixed shots", len(s))
    args.out.write_text(HEADER + yaml.safe_dump(profile(s), sort_keys=False))
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
