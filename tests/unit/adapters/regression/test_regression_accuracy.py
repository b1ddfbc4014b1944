"""Regression accuracy targets on held-out measurements (needs ../shared/data; skipped without it)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cosim.adapters.regression.artifact import DEFAULT_ARTIFACTS
from cosim.adapters.regression.training import Evaluation, train_operator, train_step
from tests.paths import SHARED_DATA

DATA = SHARED_DATA
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


def _differences(committed: object, fresh: object, path: str = "") -> list[str]:
    """Where two artifacts differ, numbers compared to 1e-6 relative: the artifact rounds to 6
    digits, and a newer numpy or scipy may round a fitted value's last digit the other way."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        return [d for key in committed.keys() | fresh.keys()
                for d in _differences(committed.get(key), fresh.get(key), f"{path}.{key}")]
    if isinstance(committed, list) and isinstance(fresh, list) and len(committed) == len(fresh):
        return [d for i, pair in enumerate(zip(committed, fresh)) for d in _differences(*pair, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(committed, numbers) and isinstance(fresh, numbers) and not isinstance(committed, bool):
        return [] if committed == pytest.approx(fresh, rel=1e-6, abs=1e-6) else [f"{path}: {committed} != {fresh}"]
    return [] if committed == fresh else [f"{path}: {committed!r} != {fresh!r}"]


def test_committed_artifacts_match_a_fresh_training(operator: tuple[dict, Evaluation],
                                                    step: tuple[dict, Evaluation]) -> None:
    """The committed artifacts are what the report command trains (no drift)."""
    for kind, (fresh, _) in (("operator", operator), ("step", step)):
        committed = json.loads(DEFAULT_ARTIFACTS[kind].read_text())
        differences = _differences(committed, json.loads(json.dumps(fresh)))
        assert not differences, f"rerun python -m cosim.adapters.regression.report: {differences[:5]}"


def test_operator_fits_meet_the_5_percent_target(operator: tuple[dict, Evaluation]) -> None:
    """Per (device, model, TP, operator) held-out MAPE on steady rows: 5% in every group.

    GEMMs are fitted tile by tile (cuBLAS switches kernel right after multiples
    of 128 tokens). Unsteady rows (median > 1.2x their own fastest repeat) are
    left out of the fits and of the judged MAPE, but counted: the worst group,
    H100 Qwen-72B TP2 mlp_down_proj, is at 4.9% on steady rows and 5.25% with
    its two unsteady held-out rows.
    """
    rows = operator[1].sections["operators"]
    assert len(rows) == 448
    assert all(r.mape <= 0.05 for r in rows), {r.key: round(r.mape, 4) for r in rows if r.mape > 0.05}
    assert np.mean([r.mape for r in rows]) <= 0.02
    assert sum(r.num_unsteady for r in rows) == 215
    assert all(r.mape_all is not None for r in rows)


def test_attention_and_all_reduce_fits(operator: tuple[dict, Evaluation]) -> None:
    """Attention and all-reduce held-out MAPE (steady rows): 5% in every group but H100 TP2 all-reduce (6.0%).

    Unsteady all-reduce rows (median > 1.2x the fastest timed region) are left
    out of the fits and the judged MAPE, as for operators; that lowers the
    steady-row error of every group. Below about 2 MB the H100 TP2 all-reduce
    is bimodal (about 8 us or about 40 us at the same size), and many sizes are
    steady in either mode (386 KiB at 10 us between 378 and 394 KiB at 42-43
    us), so no function of message size can be right for both.
    """
    assert all(r.mape <= 0.05 for r in operator[1].sections["attention"])
    all_reduce = {r.key[:2]: r for r in operator[1].sections["all_reduce"]}
    assert len(all_reduce) == 6
    assert all(r.mape <= 0.05 for key, r in all_reduce.items() if key != ("h100", "TP2"))
    assert all_reduce[("h100", "TP2")].mape <= 0.065
    assert sum(r.num_unsteady for r in all_reduce.values()) == 53


def test_composed_predictor_against_measured_whole_steps(operator: tuple[dict, Evaluation]) -> None:
    """Composed operator-level steps vs Splitwise Llama-2-70B on A100/H100 (held-out configurations).

    Target 10% MAPE in every (device, TP, phase) group, prefill and decode; the
    calibration half fits only the engine-overhead terms (docs/regression.md).
    """
    rows = operator[1].sections["composed"]
    assert {r.key[0] for r in rows} == {"a100", "h100"} and len(rows) == 12
    assert {r.key[2] for r in rows} == {"prefill", "decode"}
    assert all(r.mape <= 0.10 for r in rows), {r.key: round(r.mape, 4) for r in rows if r.mape > 0.10}
    assert np.mean([r.mape for r in rows]) <= 0.06


def test_engine_terms_are_physical(operator: tuple[dict, Evaluation]) -> None:
    """The engine runs kernels no faster than profiled, and prefill steps have the higher host floor."""
    for entry in operator[0]["overhead"]:
        assert entry["gpu_scale"] >= 1.0 and entry["serial_ms"] >= 0.0 and entry["per_seq_ms"] >= 0.0
        assert entry["prefill_floor_ms_per_layer"] > entry["decode_floor_ms_per_layer"] > 0.0


def test_whole_step_predictor(step: tuple[dict, Evaluation]) -> None:
    mapes = np.array([r.mape for r in step[1].sections["step"]])
    assert mapes.mean() <= 0.10 and np.mean(mapes <= 0.10) >= 0.85 and mapes.max() <= 0.20
