"""The KV capacity a replay takes for a run that did not record it (docs/validation.md, "KV capacity")."""

from __future__ import annotations

import pytest

from cosim.hub.studies.replay.scenario import load_scenario
from tests.paths import SHARED_DATA

SCENARIOS = SHARED_DATA / "llmservingsim" / "scenarios"
needs_data = pytest.mark.skipif(not SCENARIOS.is_dir(), reason=f"{SCENARIOS} is absent (it lives only in ../shared)")


@needs_data
def test_the_early_rtx4090_run_takes_the_recorded_count_and_the_profiling_difference() -> None:
    """The final run (max_num_seqs 256) recorded 2588 blocks; the early one (128, same GPU, model, vLLM and
    utilization) did not. vLLM's profiling holds back less for its sampler's dummy run over 128 rows than
    over 256: cosim's memory model gives 2884 and 2773 blocks, so 2588 + 111."""
    assert load_scenario(SCENARIOS / "rtx4090_llama-3.1-8b_tp1.json").num_gpu_blocks == 2588
    assert load_scenario(SCENARIOS / "rtx4090_llama-3.1-8b_tp1_mns128_early.json").num_gpu_blocks == 2588 + 2884 - 2773
