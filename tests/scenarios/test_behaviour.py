"""Batching and serving behaviour the papers report, on a linear backend with a per-token cost."""

from __future__ import annotations

import numpy as np

import cosim.hub.studies.runner as runner
from tests.scenarios.helpers import client, scenario

# 2 ms per step plus 20 us per token: decodes are cheap per token, long prefills are not.
COST = dict(step_ns=2_000_000, per_token_ns=20_000)


def workload(rate: float, n: int = 150, *, prompt: dict | None = None, output: int = 64) -> dict:
    return {"requests": n, "arrival": {"process": "poisson", "rate_per_s": rate},
            "input_tokens": prompt or {"dist": "uniform", "low": 64, "high": 512},
            "output_tokens": {"dist": "fixed", "value": output}}


def summary(batching: str, rate: float, **kwargs) -> dict:
    clients = kwargs.pop("clients", None) or [client(batching=batching, max_num_seqs=64)]
    return runner.run(scenario(clients=clients, workload=workload(rate, **kwargs), **COST)).summary


def test_continuous_beats_static_under_rising_load() -> None:
    for rate in (20, 80):
        static, continuous = summary("static", rate), summary("continuous", rate)
        assert continuous["throughput"]["output_tokens_per_s"] >= static["throughput"]["output_tokens_per_s"]
        assert continuous["latency"]["e2e_s"]["p90"] < static["latency"]["e2e_s"]["p90"]
    heavy_static, heavy_continuous = summary("static", 200), summary("continuous", 200)
    tokens_per_s = "output_tokens_per_s"
    assert heavy_continuous["throughput"][tokens_per_s] > 1.2 * heavy_static["throughput"][tokens_per_s]


def test_chunked_prefill_lowers_p99_time_between_tokens() -> None:
    """Long prompts arriving during decodes stall every decode for a whole prefill unless chunked."""
    long_prompts = {"dist": "uniform", "low": 2000, "high": 4000}
    continuous = summary("continuous", 8, prompt=long_prompts, output=128)
    chunked = runner.run(scenario(clients=[client(batching="chunked", chunk_size=512, max_num_seqs=64)],
                                  workload=workload(8, prompt=long_prompts, output=128), **COST)).summary
    assert chunked["latency"]["tbt_max_s"]["p99"] < 0.5 * continuous["latency"]["tbt_max_s"]["p99"]


def test_disaggregation_removes_prefill_interference_from_tpot() -> None:
    long_prompts = {"dist": "uniform", "low": 1000, "high": 3000}
    collocated = runner.run(scenario(clients=[client("a", batching="continuous"), client("b", batching="continuous")],
                                     workload=workload(10, prompt=long_prompts), **COST)).summary
    disaggregated = runner.run(scenario(clients=[client("p", role="prefill"), client("d", role="decode")],
                                        workload=workload(10, prompt=long_prompts), **COST)).summary
    # Decode steps on the decode client never include a prefill: TPOT is steps of decodes only.
    assert disaggregated["latency"]["tpot_s"]["p90"] < 0.6 * collocated["latency"]["tpot_s"]["p90"]
    assert disaggregated["clients"]["d"]["latency"]["tpot_s"]["max"] < 2_000_000e-9 + 64 * 20_000e-9 + 1e-6


def test_small_kv_cache_preempts_and_still_completes() -> None:
    config = scenario(clients=[client(batching="continuous", num_gpu_blocks=64, block_size=16)],
                      workload=workload(200, n=60, output=200), **COST)
    result = runner.run(config)
    assert result.summary["preemptions"] > 0
    assert result.summary["requests"]["completed"] == 60
    assert all(r.generated_tokens == r.output_tokens == 200 for r in result.requests)
    assert np.sum([r.preemptions for r in result.requests]) == result.summary["preemptions"]
