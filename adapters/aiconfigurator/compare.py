"""``python -m cosim.adapters.aiconfigurator.compare``: its error next to the other backends on Splitwise's steps.

Prints the Markdown tables kept in ``docs/aiconfigurator.md``. The data are the
Splitwise whole-step measurements (``splitwise/perf_model.csv``: Llama-2-70B on
DGX-A100 and DGX-H100, TP 2/4/8), read, reduced to medians and split exactly as
the roofline calibration reads them (:mod:`cosim.adapters.roofline.calibrate`:
the same held-out quarter of the configurations, seed 0). Every backend times
the same batches through its ``predict``:

* aiconfigurator with its defaults (vLLM, the system's current version);
* the roofline with its defaults (uncalibrated: ``profile: none``) and with
  ``profile: calibrated`` (fitted to the other three quarters of these data);
* the regression backend with its defaults (the operator-level predictor from
  Vidur's kernel profiles, with an engine overhead fitted to Splitwise steps).

Neither aiconfigurator nor the default roofline has seen these data; the regression's engine overhead
was fitted to all of them (its own report holds out half).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cosim.adapters.regression import RegressionBackend
from cosim.adapters.roofline import RooflineBackend
from cosim.adapters.roofline import calibrate as cal
from cosim.adapters.sdk import RuntimeBackend, Session
from cosim.v1 import types_pb2 as pb

from .backend import AiconfiguratorBackend

DEFAULT_DATA = Path("../shared/data/splitwise/perf_model.csv")
DEVICE_NAMES = {"a100-80gb": "A100-80GB", "h100-80gb": "H100-SXM"}


def _backends() -> list[tuple[str, RuntimeBackend, dict[str, Any]]]:
    return [("aiconfigurator", AiconfiguratorBackend(), {}),
            ("roofline", RooflineBackend(), {}),
            ("roofline, calibrated", RooflineBackend(), {"profile": "calibrated"}),
            ("regression", RegressionBackend(), {})]


def predictions_ms(backend: RuntimeBackend, options: dict[str, Any], samples: list[cal.Sample]) -> np.ndarray:
    """Each sample's step time (ms) as ``backend`` predicts it, one session per (device, TP)."""
    sessions: dict[tuple[str, int], Session[pb.SessionSpec]] = {}
    out = np.empty(len(samples))
    for i, sample in enumerate(samples):
        key = (sample.hardware, sample.tp)
        if key not in sessions:
            spec = cal.session_spec(sample.hardware, sample.tp, options)
            sessions[key] = Session("compare", spec, backend.open_session(spec))
        new, context = sample.batch_arrays()
        batch = pb.StepBatch(new_tokens=new, context_tokens=context)
        out[i] = backend.predict(sessions[key], batch).duration_ns / 1e6
    return out


def _ape(predicted: np.ndarray, samples: list[cal.Sample]) -> np.ndarray:
    measured = np.array([s.measured_ms for s in samples])
    return np.abs(predicted - measured) / measured * 100


def error_table(samples: list[cal.Sample]) -> str:
    """MAPE (and worst APE) per device and phase for every backend, as Markdown."""
    backends = _backends()
    predicted = [predictions_ms(b, options, samples) for _, b, options in backends]
    errors = [_ape(p, samples) for p in predicted]
    measured = np.array([s.measured_ms for s in samples])
    bias = (predicted[0] - measured) / measured * 100  # signed: below 0, aiconfigurator is faster than measured
    head = ("| device | phase | rows | " + " | ".join(f"{name} MAPE (max) %" for name, _, _ in backends)
            + f" | {backends[0][0]} mean signed % |")
    rows = [head, "|---|---|---:|" + "---:|" * (len(backends) + 1)]
    groups = sorted({(s.hardware, s.phase) for s in samples}) + [("all", "all")]
    for hardware, phase in groups:
        mask = np.array([hardware in ("all", s.hardware) and phase in ("all", s.phase) for s in samples])
        cells = [f"{e[mask].mean():.1f} ({e[mask].max():.0f})" for e in errors] + [f"{bias[mask].mean():+.1f}"]
        device = DEVICE_NAMES.get(hardware, hardware)
        rows.append(f"| {device} | {phase} | {int(mask.sum())} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# Static workloads: (model preset, device preset, TP, batch, input tokens, output tokens).
STATIC_CASES = [("meta-llama/Llama-3.1-8B", "H100-SXM", 1, 8, 1024, 128),
                ("meta-llama/Llama-3.1-8B", "H100-SXM", 1, 64, 1024, 128),
                ("meta-llama/Llama-3.1-8B", "RTX-PRO-6000", 1, 16, 2048, 256),
                ("Qwen/Qwen3-32B", "H100-SXM", 2, 16, 1024, 128)]


def _static_config(model: str, device: str, tp: int, batch: int, isl: int, osl: int) -> dict[str, Any]:
    """``batch`` requests arriving at once, batched statically: one prefill step, then decodes."""
    return {"seed": 0, "models": {"m": {"preset": model}}, "hardware": {"d": {"preset": device}},
            "backends": {"aic": {"kind": "aiconfigurator"}},
            "clients": [{"name": "c", "model": "m", "backend": "aic",
                         "hardware": {"device": "d", "count": tp, "tensor_parallel": tp},
                         "scheduler": {"batching": "static", "max_num_seqs": batch,
                                       "max_num_batched_tokens": batch * isl}}],
            "workload": {"requests": batch, "arrival": {"process": "constant"},
                         "input_tokens": {"dist": "fixed", "value": isl},
                         "output_tokens": {"dist": "fixed", "value": osl}}}


def static_table() -> str:
    """cosim's mean TTFT/TPOT of a static batch next to the library's own ``run_static`` estimate, as Markdown."""
    from cosim.hub.config import presets
    from cosim.hub.studies.runner import run

    rows = ["| model, device, TP | batch x in/out | cosim TTFT ms | library TTFT ms | cosim TPOT ms "
            "| library TPOT ms |",
            "|---|---|---:|---:|---:|---:|"]
    backend = AiconfiguratorBackend()
    for model, device, tp, batch, isl, osl in STATIC_CASES:
        result = run(_static_config(model, device, tp, batch, isl, osl))
        ttft = np.mean([r.first_token_ns - r.arrival_ns for r in result.requests]) / 1e6
        tpot = np.mean([(r.finish_ns - r.first_token_ns) / (osl - 1) for r in result.requests]) / 1e6
        spec = pb.SessionSpec(model=presets.get_model(model).to_model_spec(),
                              hardware=presets.hardware_spec(device, tp), parallelism=pb.Parallelism(tensor=tp))
        handle = backend.open_session(spec).engine(1).handle
        context_ms, generation_ms, _ = handle.run_static(batch_size=batch, isl=isl, osl=osl)
        rows.append(f"| {model}, {device}, TP{tp} | {batch} x {isl}/{osl} | {ttft:.1f} | {context_ms:.1f} | "
                    f"{tpot:.2f} | {generation_ms / (osl - 1):.2f} |")
    return "\n".join(rows)


def speed_us(repeats: int = 2000) -> dict[str, float]:
    """Mean in-process µs per uncached step prediction (Llama-3.1-8B, H100-SXM; every batch new)."""
    from cosim.hub.config import presets

    backend = AiconfiguratorBackend()
    spec = pb.SessionSpec(model=presets.get_model("meta-llama/Llama-3.1-8B").to_model_spec(),
                          hardware=presets.hardware_spec("H100-SXM", 1), parallelism=pb.Parallelism(tensor=1))
    session = Session("speed", spec, backend.open_session(spec))
    cases = {"decode, 32 seqs": lambda i: ([1] * 32, [1000 + i] * 32),
             "mixed: 2 chunks + 32 decodes": lambda i: ([256, 128] + [1] * 32, [i, 2 * i] + [1000 + i] * 32)}
    out = {}
    for name, make in cases.items():
        start = time.perf_counter()
        for i in range(repeats):
            new, context = make(i)
            backend.predict(session, pb.StepBatch(new_tokens=new, context_tokens=context))
        out[name] = (time.perf_counter() - start) / repeats * 1e6
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m cosim.adapters.aiconfigurator.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="splitwise perf_model.csv")
    args = parser.parse_args(argv)
    samples = cal.load_samples(args.data)
    _, held_out = cal.split(samples)
    sys.stdout.write(f"### Held-out quarter ({len(held_out)} configurations)\n\n{error_table(held_out)}\n\n"
                     f"### All configurations ({len(samples)})\n\n{error_table(samples)}\n\n"
                     f"### Static batches: cosim end to end vs the library's run_static\n\n{static_table()}\n\n"
                     "### Speed (in-process, uncached)\n\n"
                     + "".join(f"- {name}: {us:.0f} µs per step\n" for name, us in speed_us().items()))


if __name__ == "__main__":
    main()
