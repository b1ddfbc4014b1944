"""workload.vllm_bench: ``vllm bench serve``'s dataset and load options (hub/config/vllm_bench.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cosim.hub.studies.runner as runner
from cosim.hub.config.loading import ScenarioProblems, parse_config
from tests.paths import EXAMPLES
from tests.scenarios.helpers import client, scenario

SHAREGPT = EXAMPLES / "traces" / "sharegpt_glaive_toolcall_60.json"


def config(bench: dict[str, Any]) -> dict[str, Any]:
    sched = {"batching": "chunked", "enable_prefix_caching": True, "num_gpu_blocks": 4000, "block_size": 16}
    return scenario(clients=[client("c0", **sched)], per_token_ns=1000, workload={"vllm_bench": bench})


def test_random_lengths_within_the_range_ratio_after_a_shared_prefix() -> None:
    bench = {"dataset-name": "random", "num-prompts": 200, "random-input-len": 100, "random-output-len": 20,
             "random-range-ratio": 0.5, "random-prefix-len": 32, "request-rate": 10}
    workload = parse_config(config(bench)).workload
    assert workload.num_requests == 200 and workload.arrival is not None
    assert workload.arrival.model_dump() == {"process": "poisson", "rate_per_s": 10.0, "start_s": 0.0}
    requests = runner.run(config(bench), in_process=True).requests
    inputs = np.array([r.input_tokens for r in requests]) - 32
    outputs = np.array([r.output_tokens for r in requests])
    assert inputs.min() >= 50 and inputs.max() <= 150 and inputs.std() > 10
    assert outputs.min() >= 10 and outputs.max() <= 30
    assert {r.prefix_id for r in requests} == {"prefix-0"}  # one prefix every prompt shares
    assert sum(r.cached_tokens >= 32 for r in requests) > 150


def test_infinite_rate_sends_all_at_once_and_burstiness_is_gamma() -> None:
    workload = parse_config(config({"num_prompts": 5})).workload
    assert workload.arrival is not None and workload.arrival.process == "constant"
    gamma = parse_config(config({"request_rate": 4, "burstiness": 4})).workload.arrival
    assert gamma is not None and gamma.model_dump() == {"process": "gamma", "rate_per_s": 4.0, "cv": 0.5,
                                                        "start_s": 0.0}


def test_sharegpt_takes_first_exchanges_with_vllms_filters() -> None:
    bench = {"dataset_name": "sharegpt", "dataset_path": str(SHAREGPT), "num_prompts": 20, "request_rate": 5}
    requests = runner.run(config(bench), in_process=True).requests
    assert len(requests) == 20
    assert all(4 <= r.input_tokens <= 1024 and r.input_tokens + r.output_tokens <= 2048 for r in requests)
    fixed = runner.run(config({**bench, "sharegpt_output_len": 64}), in_process=True).requests
    assert {r.output_tokens for r in fixed} == {64}


def test_errors_name_the_option() -> None:
    with pytest.raises(ScenarioProblems, match=r"workload\.vllm_bench\.random_range_ratio: input should be less "
                                               r"than 1"):
        parse_config(config({"random_range_ratio": 1.5}))
    with pytest.raises(ScenarioProblems, match="sharegpt needs dataset_path"):
        parse_config(config({"dataset_name": "sharegpt"}))
