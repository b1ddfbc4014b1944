"""prefix_aware routing (Dynamo's KV router) raises prefix-cache hits and lowers TTFT."""

from __future__ import annotations

import cosim
from tests.scenarios.helpers import client, scenario


def run(policy: str) -> dict:
    sched = {"batching": "chunked", "enable_prefix_caching": True, "num_gpu_blocks": 500, "block_size": 16,
             "max_num_batched_tokens": 2048}
    config = scenario(
        clients=[client(f"c{i}", **sched) for i in range(4)], per_token_ns=20000,
        workload={"requests": 400, "arrival": {"process": "poisson", "rate_per_s": 20},
                  "input_tokens": {"dist": "uniform", "low": 50, "high": 300},
                  "output_tokens": {"dist": "uniform", "low": 5, "high": 40},
                  "prefix": {"num_prefixes": 12, "tokens": 1536, "popularity": "zipf"}},
        router={"policy": policy})
    return cosim.run(config).summary


def test_prefix_aware_routing_hits_the_cache_more_and_cuts_ttft() -> None:
    """Each prompt is a 1536-token shared prefix (12 of them, Zipf) and its own 50-300 tokens;
    four clients of 500 blocks (8000 tokens) cannot each hold every prefix."""
    results = {policy: run(policy) for policy in ("round_robin", "least_outstanding", "prefix_aware")}
    hits = {policy: s["prefix_cache_hit_rate"] for policy, s in results.items()}
    ttft = {policy: s["latency"]["ttft_s"]["mean"] for policy, s in results.items()}
    assert hits["prefix_aware"] > max(hits["round_robin"], hits["least_outstanding"]) + 0.05, hits
    assert ttft["prefix_aware"] < min(ttft["round_robin"], ttft["least_outstanding"]), ttft
    assert all(s["requests"]["completed"] == 400 for s in results.values())
