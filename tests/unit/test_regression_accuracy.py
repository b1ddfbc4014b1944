"""Regression accuracy targets on held-out measurements (needs ../shared/data; skipped without it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cosim.adapters.regression.artifact import DEFAULT_ARTIFACTS
from cosim.adapters.regression.training import Evaluation, train_operator, train_step

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
pytestmark = pytest.mark.skipif(not (DATA / "vidur").is_dir(),
                                reason=f"measurement data not found at {DATA} (only on dev machines and CI)")


@pytest.fixture(scope="module")
def operator() -> tuple[dict, Evaluation]:
    artifact, evaluation = train_operator(DATA)
    return artifact.to_json(), evaluation


@pytest.fixture(scope="module")
def step() -> tuple[dict, Evaluation]:
    artifact, evaluation = train_step([DATA / "splitwise" / "perf_model.csv"])
    return artifact.to_json(), evaluation


def test_committed_artifacts_match_a_fresh_training(operator: tuple[dict, Evaluation],
                                                    step: tuple[dict, Evaluation]) -> None:
    """The committed artifacts are exactly what the report command trains (no drift)."""
    for kind, (fresh, _) in (("operator", operator), ("step", step)):
        committed = json.loads(DEFAULT_ARTIFACTS[kind].read_text())
        assert committed == json.loads(json.dumps(fresh)), "rerun python -m cosim.adapters.regression.report"


def test_operator_fits_meet_the_5_percent_target(operator: tuple[dict, Evaluation]) -> None:
    """Per (device, model, TP, operator) held-out MAPE: target 5%.

    A few H100 GEMM groups (70B-class down/post projections at TP1/2) miss it
    because cuBLAS switches kernels at tile-aligned token counts, which no
    fit of neighbouring counts predicts; they stay under 10%.
    """
    mapes = np.array([r.mape for r in operator[1].sections["operators"]])
    assert np.mean(mapes <= 0.05) >= 0.97
    assert mapes.max() <= 0.10
    assert mapes.mean() <= 0.03


def test_attention_and_all_reduce_fits(operator: tuple[dict, Evaluation]) -> None:
    assert all(r.mape <= 0.05 for r in operator[1].sections["attention"])
    assert np.mean([r.mape for r in operator[1].sections["all_reduce"]]) <= 0.05


def test_composed_predictor_against_measured_whole_steps(operator: tuple[dict, Evaluation]) -> None:
    """Composed operator-level steps vs Splitwise Llama-2-70B on A100/H100 (held-out configurations).

    Target 10% MAPE per (device, TP, phase); met on average and by most
    groups, and no group is worse than 15% (see docs/regression-report.md).
    """
    rows = operator[1].sections["composed"]
    assert {r.key[0] for r in rows} == {"a100", "h100"} and len(rows) == 12
    mapes = np.array([r.mape for r in rows])
    assert mapes.mean() <= 0.10
    assert np.mean(mapes <= 0.10) >= 0.7
    assert mapes.max() <= 0.15


def test_whole_step_predictor(step: tuple[dict, Evaluation]) -> None:
    mapes = np.array([r.mape for r in step[1].sections["step"]])
    assert mapes.mean() <= 0.10 and np.mean(mapes <= 0.10) >= 0.85 and mapes.max() <= 0.20
