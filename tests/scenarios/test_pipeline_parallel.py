"""Pipeline parallelism pipelines: as many micro-batches in flight as stages (vLLM's batch queue)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cosim
from tests.scenarios.helpers import client, run_with_trace, scenario


def test_a_second_micro_batch_enters_the_pipeline_after_one_stage(tmp_path: Path) -> None:
    pp2 = {**client(batching="mixed"), "hardware": {"device": "h", "count": 2, "pipeline_parallel": 2}}
    a, b = run_with_trace(scenario(clients=[pp2], step_ns=1000), [(0.0, 10, 2), (0.0000001, 10, 2)], tmp_path)
    # A: stages 0-500-1000; B (arrived at 100 ns) enters the first stage when A leaves it, at 500.
    # A's decode cannot start before its token, at 1000; B's, at 1500.
    assert (a.first_token_ns, a.finish_ns, b.first_token_ns, b.finish_ns) == (1000, 2000, 1500, 2500)


def test_one_stage_steps_one_batch_at_a_time(tmp_path: Path) -> None:
    a, b = run_with_trace(scenario(clients=[client(batching="mixed")], step_ns=1000),
                          [(0.0, 10, 2), (0.0000001, 10, 2)], tmp_path)
    assert (a.first_token_ns, a.finish_ns, b.first_token_ns, b.finish_ns) == (1000, 2000, 2000, 3000)


def roofline_70b(tensor_parallel: int, pipeline_parallel: int) -> dict[str, Any]:
    return {"seed": 1, "models": {"m": {"preset": "meta-llama/Meta-Llama-3-70B"}},
            "hardware": {"h": {"preset": "H100-SXM"}}, "backends": {"roof": {"kind": "roofline"}},
            "clients": [{"name": "c", "model": "m", "backend": "roof",
                         "hardware": {"device": "h", "count": 4, "tensor_parallel": tensor_parallel,
                                      "pipeline_parallel": pipeline_parallel},
                         "scheduler": {"batching": "chunked", "max_num_batched_tokens": 2048}}],
            "workload": {"requests": 200, "arrival": {"process": "poisson", "rate_per_s": 1000},
                         "input_tokens": {"dist": "fixed", "value": 1024},
                         "output_tokens": {"dist": "fixed", "value": 64}}}


def test_pp4_throughput_is_within_15_percent_of_tp4_when_compute_bound() -> None:
    tp4, pp4 = (cosim.run(roofline_70b(tp, pp)).summary["throughput"]["requests_per_s"] for tp, pp in ((4, 1), (1, 4)))
    assert 0.85 * tp4 <= pp4 <= 1.15 * tp4
