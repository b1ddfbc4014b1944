"""The presets of issue 36 end to end: a run from flags alone with each new model and device.

Each pairing validates, runs a few requests to the end, and decodes no faster than reading the weights
a token touches from the device's memory (the active parameters of one device's share over the
preset's bandwidth) and no slower than reading all of that device's weights twice: bounds
hand-computed below from the model cards and datasheets, not read back from the presets. A device or
model preset that a run cannot resolve, or whose bandwidth or size were off by a large factor, fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cosim.hub.cli import main

# (model, device, TP, dtype, bytes of the weights one decode token reads on one device, bytes of all
# the weights on one device, the device's memory bandwidth in GB/s). Active bytes: a dense model's
# all; an MoE's attention, embeddings and the MLPs one token runs (routed top-k + shared).
RUNS = [
    # Phi-4, 14.66e9 parameters from its shape (14.7B published), bf16, TP2 on L4 (300 GB/s)
    ("microsoft/phi-4", "L4", 2, "bf16", 14.66e9 * 2 / 2, 14.7e9 * 2 / 2, 300),
    # Gemma 3 27B, 27.0e9 from the shape (27.4B with the vision encoder), TP4 on A10G (600 GB/s)
    ("google/gemma-3-27b-it", "A10G", 4, "bf16", 27.0e9 * 2 / 4, 27.4e9 * 2 / 4, 600),
    # Llama 4 Scout, 17.2e9 active (1 routed + 1 shared expert a layer) of 109B, TP1 on MI325X (6 TB/s)
    ("meta-llama/Llama-4-Scout-17B-16E", "MI325X", 1, "bf16", 17.2e9 * 2, 109e9 * 2, 6000),
    # the same on Gaudi 3 (3.67 TB/s), TP2, in bf16: Intel publishes no fp16 peak for it
    ("meta-llama/Llama-4-Scout-17B-16E", "Gaudi-3", 2, "bf16", 17.2e9 * 2 / 2, 109e9 * 2 / 2, 3670),
    # Llama 4 Maverick, 17.2e9 active of 400B, TP4 on MI355X (8 TB/s)
    ("meta-llama/Llama-4-Maverick-17B-128E", "MI355X", 4, "bf16", 17.2e9 * 2 / 4, 400e9 * 2 / 4, 8000),
    # DeepSeek-R1 in fp8, 37e9 active of 671B (the model card), TP8 on H20 (4 TB/s)
    ("deepseek-ai/DeepSeek-R1", "H20", 8, "fp8", 37e9 / 8, 671e9 / 8, 4000),
]


@pytest.mark.parametrize(("model", "device", "tp", "dtype", "active_bytes", "all_bytes", "bandwidth_gbps"), RUNS,
                         ids=[f"{r[0].split('/')[1]}-{r[1]}-tp{r[2]}" for r in RUNS])
def test_each_new_model_and_device_runs_from_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str,
                                                   device: str, tp: int, dtype: str, active_bytes: float,
                                                   all_bytes: float, bandwidth_gbps: float) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", model, "--device", device, "--tp", str(tp), "--requests", "4",
            "--input-tokens", "256", "--output-tokens", "16", "-o", "r", "--no-progress", "--in-process",
            "--set", "output.plots=false", "--set", f"models.model.dtype={dtype}"]
    assert main(argv) == 0
    config = yaml.safe_load(Path("r/config.yaml").read_text())
    assert (config["models"]["model"]["preset"], config["hardware"]["device"]["preset"]) == (model, device)
    summary = json.loads(Path("r/summary.json").read_text())
    assert summary["requests"]["completed"] == 4
    tpot_s = summary["latency"]["tpot_s"]["mean"]
    assert active_bytes / (bandwidth_gbps * 1e9) < tpot_s < 2 * all_bytes / (bandwidth_gbps * 1e9)
