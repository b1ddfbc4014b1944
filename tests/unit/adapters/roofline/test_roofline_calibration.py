"""The shipped calibrated profile meets its target on held-out measured steps."""

from __future__ import annotations

import pytest

from cosim.adapters.roofline import calibrate
from tests.paths import SHARED_DATA

DATA = SHARED_DATA / "splitwise" / "perf_model.csv"
TARGET_MAPE_PCT = 10.0


@pytest.mark.skipif(not DATA.is_file(), reason=f"measurement data not present at {DATA} (dev machines and CI only)")
@pytest.mark.parametrize("hardware", sorted(calibrate.DEVICES))
def test_shipped_profile_meets_target_on_held_out_rows(hardware: str) -> None:
    _train, test = calibrate.split(calibrate.load_samples(DATA))
    held_out = [s for s in test if s.hardware == hardware]
    assert len(held_out) >= 20
    assert calibrate.mape(held_out, {"profile": "calibrated"}) <= TARGET_MAPE_PCT


@pytest.mark.skipif(not DATA.is_file(), reason=f"measurement data not present at {DATA} (dev machines and CI only)")
def test_calibration_improves_on_the_bestserve_defaults() -> None:
    _train, test = calibrate.split(calibrate.load_samples(DATA))
    assert calibrate.mape(test, {"profile": "calibrated"}) < calibrate.mape(test, {"profile": "none"}) / 3
