"""The shipped fitted profile against the measured steps it was fitted on (dev machines and CI only).

docs/roofline-cv.md gives these errors in sample; each bound is that figure rounded up, so a
profile that drifts from its data, or a model change that moves the steps, fails here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cosim.adapters.roofline.fit import steps as S
from tests.paths import SHARED_DATA

DATA = SHARED_DATA
needs_data = pytest.mark.skipif(not (DATA / "splitwise").is_dir(),
                                reason=f"measurement data not present at {DATA} (dev machines and CI only)")
# (dataset, device) -> in-sample step MAPE bound, % (docs/roofline-cv.md: 6.0, 5.9, 11.6, 9.4, 3.9, 4.1).
BOUNDS = {("llmservingsim", "RTX-4090"): 7.0, ("llmservingsim", "RTX-PRO-6000"): 7.0,
          ("splitwise", "A100-80GB"): 12.0, ("splitwise", "H100-SXM"): 10.0,
          ("vidur", "A100-80GB"): 5.0, ("vidur", "H100-SXM"): 5.0}


@pytest.fixture(scope="module")
def steps() -> list[S.Step]:
    return S.llmservingsim_steps(DATA) + S.vidur_steps(DATA) + S.splitwise_steps(DATA)


def _mape(steps: list[S.Step], options: dict[str, Any]) -> dict[tuple[str, str], float]:
    errors: dict[tuple[str, str], list[float]] = {}
    cache: dict[Any, Any] = {}
    for step in steps:
        opts = {**options, "execution": "eager"} if step.kind == "engine" else options
        errors.setdefault((step.dataset, step.device), []).append(
            abs(S.predict_ms(step, opts, cache) / step.measured_ms - 1) * 100)
    return {key: float(np.mean(v)) for key, v in errors.items()}


@needs_data
def test_shipped_profile_times_the_measured_steps_within_its_reported_error(steps: list[S.Step]) -> None:
    mape = _mape(steps, {"profile": "auto"})
    assert set(mape) == set(BOUNDS)
    for key, bound in BOUNDS.items():
        assert mape[key] <= bound, f"{key}: {mape[key]:.1f}% > {bound}%"


@needs_data
def test_splitwise_decodes_are_within_eleven_percent_under_the_engines_eager_execution(steps: list[S.Step]) -> None:
    """DGX-H100 decode iterations (Llama-2-70B TP2/4/8, BLOOM-176B TP8) under execution: eager: 10.2%.

    Within 10% (8.4%) while the host ran ahead of the device; with host and device taking turns, chosen
    for its held-out errors (docs/roofline.md, "The eager engine"), TP2 decodes come out 17% slow."""
    decodes = [s for s in steps if s.dataset == "splitwise" and s.device == "H100-SXM" and s.phase == "decode"]
    assert len(decodes) == 75  # 76 but the TP2 batch-64 one (steps.splitwise_steps)
    assert _mape(decodes, {"profile": "auto"})[("splitwise", "H100-SXM")] <= 11.0


@needs_data
def test_the_fitted_default_beats_bestserves_on_every_dataset(steps: list[S.Step]) -> None:
    fitted = _mape(steps, {"profile": "auto"})
    bestserve = _mape([s for s in steps if s.kind != "engine"], {"profile": "bestserve"})
    for key, value in bestserve.items():
        assert fitted[key] < value / 2, key


@needs_data
def test_eager_prefills_follow_the_slowdown_beyond_2048_tokens(steps: list[S.Step]) -> None:
    """DGX-H100, Llama-2-70B TP8: 2048 -> 4096 prompt tokens takes 136.8 -> 390.3 ms (2.85x, the
    all-reduces beyond the knee); without the knee the model gave 1.89x."""
    def prefill(n: int) -> S.Step:
        return next(s for s in steps if s.dataset == "splitwise" and s.device == "H100-SXM" and s.tp == 8
                    and s.model == "llama-2-70b" and s.phase == "prefill" and s.new == (n,))
    short, long = prefill(2048), prefill(4096)
    assert long.measured_ms / short.measured_ms == pytest.approx(2.85, abs=0.01)
    options = {"profile": "auto", "execution": "eager"}
    assert S.predict_ms(long, options) / S.predict_ms(short, options) > 2.4


@needs_data
def test_decodes_that_could_not_run_their_whole_batch_are_dropped(steps: list[S.Step]) -> None:
    """TP2 batch 64 (42.3 ms on DGX-H100, below batch 32's 52.3 ms): 64 x 640 tokens of KV cache do not
    fit beside Llama-2-70B's weights on two 80 GB GPUs."""
    tp2 = [s for s in steps if s.dataset == "splitwise" and s.tp == 2 and s.phase == "decode"]
    assert max(len(s.new) for s in tp2) == 32
    assert any(len(s.new) == 64 for s in steps if s.dataset == "splitwise" and s.tp == 4 and s.phase == "decode")
