"""Fits the roofline's efficiencies and host costs to measured step times.

BestServe tunes e_c, e_m and the dispatch constants by hand (§4.1); here a
least-squares fit on relative errors does it per device and phase, from
whole-step measurements such as ``splitwise/perf_model.csv`` (Llama-2-70B on
DGX-A100 and DGX-H100, TP 2/4/8; ../shared/data/README.md §3):

- ``prompt_time`` (ms) is one prefill step of ``batch_size`` sequences of
  ``prompt_size`` tokens: the batch ``(prompt_size, 0) x batch_size``;
- ``token_time`` (ms) is the mean decode step while ``token_size`` tokens are
  generated, i.e. the step at the mean context ``prompt + (token_size - 1)/2``.

Repeats are reduced to their median; the A100 batch-64 prefill rows, which the
data README flags as inconsistent, are dropped. A fixed seeded split holds out
a quarter of the configurations of every (device, phase); the fit sees only
the rest. Fitted per phase: ``mfu``, ``mbu``, ``comm_eff``,
``step_overhead_us`` and one scale on BestServe's per-module dispatch
constants; kernels are ``fused`` (the measured engine is vLLM-like).

Main names: :func:`load_samples`, :func:`split`, :func:`fit`, :func:`mape`,
:func:`calibrate` (the whole pipeline), :func:`write_profile`, :func:`render_report`.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from cosim.v1 import types_pb2 as pb

from .backend import open_model
from .estimator import estimate
from .operators import BatchStats, batch_stats
from .params import PHASES, PhaseParams, resolve_params

log = logging.getLogger(__name__)

SEED = 0
HOLDOUT_SHARE = 0.25

# Llama-2-70B (HF config.json; vidur model_configs) and the two DGX devices
# (NVIDIA datasheets: dense fp16 peak, HBM bandwidth, NVLink per direction).
LLAMA2_70B = pb.ModelSpec(
    name="meta-llama/Llama-2-70b-hf", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
    intermediate_size=28672, vocab_size=32000, bytes_per_param=2, bytes_per_kv_element=2, gated_mlp=True)
MODELS = {"llama2-70b": LLAMA2_70B}
DEVICES: dict[str, dict[str, Any]] = {
    "a100-80gb": dict(device="A100-80GB", aliases=["a100", "a100-80gb", "a100-80gb-sxm", "a100-sxm4-80gb"],
                      peak_tflops=312.0, mem_bandwidth_gbps=2039.0, intra_node_gbps=300.0),
    "h100-80gb": dict(device="H100-SXM", aliases=["h100", "h100-80gb", "h100-sxm5", "h100-sxm-80gb"],
                      peak_tflops=989.0, mem_bandwidth_gbps=3350.0, intra_node_gbps=450.0),
}
# Fitted parameters per phase, their start points and bounds.
FIT_KEYS = ("mfu", "mbu", "comm_eff", "step_overhead_us", "dispatch_scale")
LOWER = np.array([0.05, 0.05, 0.02, 0.0, 0.0])
UPPER = np.array([1.0, 1.0, 1.0, 50_000.0, 20.0])
STARTS = (np.array([0.6, 0.6, 0.6, 1000.0, 1.0]), np.array([0.4, 0.8, 0.3, 5000.0, 0.2]),
          np.array([0.8, 0.4, 0.8, 100.0, 3.0]))
BASE_OPTIONS = {"profile": "none", "kernels": "fused", "allreduce_formula": "ring"}


@dataclasses.dataclass(frozen=True)
class Sample:
    """One measured step: device, TP, batch and median time."""

    hardware: str
    phase: str
    tp: int
    prompt: int
    batch: int
    tokens: int  # output tokens (decode rows)
    measured_ms: float

    def batch_arrays(self) -> tuple[list[int], list[int]]:
        if self.phase == "prefill":
            return [self.prompt] * self.batch, [0] * self.batch
        context = self.prompt + (self.tokens - 1) // 2
        return [1] * self.batch, [context] * self.batch


def load_samples(path: Path, *, model: str = "llama2-70b", hardware: Iterable[str] = tuple(DEVICES)) -> list[Sample]:
    """Reads a perf_model.csv-style file into median samples per configuration."""
    wanted = set(hardware)
    groups: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["model"] != model or row["hardware"] not in wanted:
                continue
            hw, tp = row["hardware"], int(row["tensor_parallel"])
            prompt, batch, tokens = int(row["prompt_size"]), int(row["batch_size"]), int(row["token_size"])
            groups[(hw, "prefill", tp, prompt, batch, 0)].append(float(row["prompt_time"]))
            groups[(hw, "decode", tp, prompt, batch, tokens)].append(float(row["token_time"]))
    samples = [Sample(*key, measured_ms=statistics.median(times)) for key, times in sorted(groups.items())]
    return [s for s in samples if not _is_suspect(s, samples)]


def _is_suspect(sample: Sample, samples: list[Sample]) -> bool:
    """A prefill faster than the same prompt at a smaller batch (README §3 flags
    the A100 batch-64 rows; H100 TP2 batch 64 shows the same drop)."""
    if sample.phase != "prefill":
        return False
    smaller = [s.measured_ms for s in samples if s.phase == "prefill" and s.hardware == sample.hardware
               and s.tp == sample.tp and s.prompt == sample.prompt and s.batch < sample.batch]
    return any(sample.measured_ms < t for t in smaller)


def split(samples: list[Sample], *, seed: int = SEED,
          share: float = HOLDOUT_SHARE) -> tuple[list[Sample], list[Sample]]:
    """Fixed seeded split per (hardware, phase): (train, held out)."""
    rng = np.random.default_rng(seed)
    by_group: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for sample in samples:
        by_group[(sample.hardware, sample.phase)].append(sample)
    train, test = [], []
    for key in sorted(by_group):
        group = by_group[key]
        order = rng.permutation(len(group))
        cut = max(1, round(len(group) * share))
        test += [group[i] for i in sorted(order[:cut])]
        train += [group[i] for i in sorted(order[cut:])]
    return train, test


def session_spec(hardware: str, tp: int, options: dict[str, Any], *, model: str = "llama2-70b") -> pb.SessionSpec:
    """The SessionSpec of one measured configuration."""
    dev = DEVICES[hardware]
    spec = pb.SessionSpec(
        client="calibration", model=MODELS[model],
        hardware=pb.HardwareSpec(device=dev["device"], count=tp, peak_tflops=dev["peak_tflops"],
                                 mem_bandwidth_gbps=dev["mem_bandwidth_gbps"], intra_node_gbps=dev["intra_node_gbps"],
                                 devices_per_node=8),
        parallelism=pb.Parallelism(tensor=tp))
    spec.options.update(options)
    return spec


def predict_ms(samples: list[Sample], options: dict[str, Any]) -> np.ndarray:
    """Predicted step times (ms) of ``samples`` under session ``options``."""
    models: dict[tuple[str, int], Any] = {}
    out = np.empty(len(samples))
    for i, s in enumerate(samples):
        key = (s.hardware, s.tp)
        if key not in models:
            models[key] = open_model(session_spec(s.hardware, s.tp, options))
        out[i] = estimate(models[key], batch_stats(*s.batch_arrays())).duration_ns / 1e6
    return out


def mape(samples: list[Sample], options: dict[str, Any]) -> float:
    """Mean absolute percentage error of the backend under ``options``."""
    if not samples:
        return float("nan")
    measured = np.array([s.measured_ms for s in samples])
    return float(np.mean(np.abs(predict_ms(samples, options) - measured) / measured) * 100)


def _phase_options(phase: str, x: np.ndarray) -> dict[str, float]:
    defaults = PhaseParams()
    values = dict(zip(FIT_KEYS, (float(v) for v in x)))
    scale = values.pop("dispatch_scale")
    for module in ("norm", "attention", "mlp"):
        values[f"dispatch_{module}_us"] = scale * getattr(defaults, f"dispatch_{module}_us")
    return {f"{k}_{phase}": v for k, v in values.items()}


def fit(samples: list[Sample], phase: str) -> dict[str, float]:
    """Least-squares fit of one phase's parameters on relative errors.

    Returns:
        Flat option keys (``mfu_prefill``...) of the best of several starts.
    """
    rows = [s for s in samples if s.phase == phase]
    measured = np.array([s.measured_ms for s in rows])
    stats: list[BatchStats] = [batch_stats(*s.batch_arrays()) for s in rows]
    spec_keys = [(s.hardware, s.tp) for s in rows]

    def residuals(x: np.ndarray) -> np.ndarray:
        options = {**BASE_OPTIONS, **_phase_options(phase, x)}
        models = {key: open_model(session_spec(key[0], key[1], options)) for key in set(spec_keys)}
        pred = np.array([estimate(models[k], b).duration_ns / 1e6 for k, b in zip(spec_keys, stats)])
        return (pred - measured) / measured

    best = None
    for x0 in STARTS:
        result = least_squares(residuals, x0, bounds=(LOWER, UPPER), x_scale=np.maximum(x0, 0.1), diff_step=1e-3)
        if best is None or result.cost < best.cost:
            best = result
    assert best is not None
    log.info("fitted %s on %d rows: cost %.4g", phase, len(rows), best.cost)
    return _phase_options(phase, best.x)


@dataclasses.dataclass
class DeviceResult:
    """Calibration outcome for one device."""

    hardware: str
    params: dict[str, Any]
    num_train: int
    num_test: int
    before: dict[str, float]  # MAPE on held-out rows per phase and "all"
    after: dict[str, float]


def calibrate(path: Path, *, seed: int = SEED) -> list[DeviceResult]:
    """Loads, splits, fits every device of the file and scores held-out rows."""
    samples = load_samples(path)
    train, test = split(samples, seed=seed)
    results = []
    for hardware in sorted({s.hardware for s in samples}):
        tr = [s for s in train if s.hardware == hardware]
        te = [s for s in test if s.hardware == hardware]
        options: dict[str, Any] = dict(BASE_OPTIONS)
        for phase in PHASES:
            options.update(fit(tr, phase))
        resolve_params(DEVICES[hardware]["device"], {}, options)  # checks every value
        params = {k: v for k, v in options.items() if k != "profile"}
        calibrated = {"profile": "none", **params}
        score = {}
        # Before: BestServe's defaults, eager kernels included (cosim's default kernels are fused).
        for label, opts in (("before", {"profile": "none", "kernels": "eager"}), ("after", calibrated)):
            score[label] = {phase: mape([s for s in te if s.phase == phase], opts) for phase in PHASES}
            score[label]["all"] = mape(te, opts)
        results.append(DeviceResult(hardware, params, len(tr), len(te), score["before"], score["after"]))
    return results


def write_profile(results: list[DeviceResult], out: Path, *, source: str) -> None:
    """Writes the fitted parameters as a profile file the backend loads."""
    profiles = []
    for r in results:
        dev = DEVICES[r.hardware]
        params = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.params.items()}
        profiles.append({"device": dev["device"], "aliases": dev["aliases"], "source": source,
                         "heldout_mape_pct": {k: round(v, 2) for k, v in r.after.items()}, "params": params})
    header = ("# Roofline device profiles, written by `cosim calibrate roofline`; do not edit by hand.\n"
              f"# Fitted to {source} (seed {SEED}, {HOLDOUT_SHARE:.0%} of configurations held out).\n")
    out.write_text(header + yaml.safe_dump({"profiles": profiles}, sort_keys=False))


def render_report(results: list[DeviceResult], *, data: str, command: str) -> str:
    """Markdown report: MAPE before and after on held-out rows, fitted values."""
    lines = ["# Roofline calibration report", "",
             f"Generated by `{command}`; do not edit by hand.", "",
             "This is the earlier per-phase `calibrated` profile (`profile: calibrated`). The roofline's default "
             "is now the fitted kernel model of each GPU family, cross-validated in "
             "[roofline.md](roofline.md#the-fitted-default).", "",
             f"Data: `{data}` (Llama-2-70B, TP 2/4/8). Repeats reduced to medians; prefill rows faster than "
             "the same prompt at a smaller batch dropped (the A100 batch-64 rows the data README flags, and "
             "H100 TP2 batch 64). Split: seed "
             f"{SEED}, {HOLDOUT_SHARE:.0%} of the configurations of every (device, phase) held out. "
             "*Before*: BestServe defaults (eager kernels, §4.1 efficiencies, Table 3 dispatch). "
             "*After*: the fitted profile (fused kernels). Target: held-out MAPE <= 10%.", "",
             "| device | train / held-out rows | phase | MAPE before (%) | MAPE after (%) |",
             "| --- | --- | --- | ---: | ---: |"]
    for r in results:
        for phase in (*PHASES, "all"):
            lines.append(f"| {DEVICES[r.hardware]['device']} | {r.num_train} / {r.num_test} | {phase} | "
                         f"{r.before[phase]:.1f} | {r.after[phase]:.1f} |")
    lines += ["", "## Fitted parameters", "", "| device | key | value |", "| --- | --- | ---: |"]
    for r in results:
        for key, value in r.params.items():
            if key.endswith(PHASES):
                lines.append(f"| {DEVICES[r.hardware]['device']} | `{key}` | {value:.4g} |")
    lines += ["", "Notes:", "",
              "- Dispatch constants are fitted as one scale on BestServe's per-module values "
              "(24 / 190 / 41 µs for RMSNorm / attention / MLP).",
              "- `mfu_decode` is not identifiable from these rows (no decode operator is compute bound at "
              "batch <= 64) and stays at its start value.",
              "- Decode is fitted as weight and KV traffic at a high MBU plus a large per-step constant "
              "(`step_overhead_us_decode`), which absorbs host overhead and collective latency that the "
              "roofline does not model separately; the collective term's efficiency `comm_eff_decode` ends "
              "low for the same reason. Prefill needs the `ring` all-reduce (traffic growing with TP): "
              "measured prefill scales far less than 1/TP.", ""]
    return "\n".join(lines)
