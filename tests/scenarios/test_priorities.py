"""Request classes: vLLM's priority policy and earliest deadline first, per-class metrics."""

from __future__ import annotations

import numpy as np

import cosim
from tests.scenarios.helpers import client, scenario

CLASSES = {"interactive": {"share": 1, "priority": 0, "deadline_s": 0.05},
           "batch": {"share": 3, "priority": 1, "deadline_s": 5.0}}


def overloaded(packing: str) -> cosim.RunResult:
    """One client, 16 seats, far more requests per second than it serves: a queue builds up."""
    sched = {"batching": "chunked", "max_num_seqs": 16, "max_num_batched_tokens": 1024, "num_gpu_blocks": 400,
             "block_size": 16, "packing": packing}
    config = scenario(clients=[client("c0", **sched)], per_token_ns=20000,
                      workload={"requests": 300, "arrival": {"process": "poisson", "rate_per_s": 4000},
                                "input_tokens": {"dist": "uniform", "low": 50, "high": 300},
                                "output_tokens": {"dist": "uniform", "low": 10, "high": 60},
                                "classes": CLASSES})
    return cosim.run(config)


def p90_ttft(result: cosim.RunResult, name: str) -> float:
    return result.summary["classes"][name]["latency"]["ttft_s"]["p90"]


def test_a_high_priority_class_waits_less_under_overload() -> None:
    fcfs, priority = overloaded("fcfs"), overloaded("priority")
    assert p90_ttft(priority, "interactive") < 0.5 * p90_ttft(priority, "batch")
    assert p90_ttft(priority, "interactive") < 0.5 * p90_ttft(fcfs, "interactive")
    for result in (fcfs, priority):
        assert result.summary["classes"]["interactive"]["requests"]["completed"] + \
            result.summary["classes"]["batch"]["requests"]["completed"] == 300
    shares = [r.cls for r in priority.requests]
    assert 0.15 < shares.count("interactive") / 300 < 0.35  # drawn 1 : 3


def test_earliest_deadline_first_serves_the_tight_deadlines_first() -> None:
    edf = overloaded("edf")
    assert p90_ttft(edf, "interactive") < 0.5 * p90_ttft(edf, "batch")


def test_classes_are_a_column_of_requests_csv(tmp_path) -> None:
    sched = {"batching": "chunked", "packing": "priority"}
    config = scenario(clients=[client("c0", **sched)], workload={
        "requests": 20, "arrival": {"process": "constant"}, "input_tokens": {"dist": "fixed", "value": 10},
        "output_tokens": {"dist": "fixed", "value": 2}, "classes": CLASSES})
    folder = cosim.run(config, output_dir=tmp_path / "run").output_dir
    header, *rows = (folder / "requests.csv").read_text().splitlines()
    column = header.split(",").index("class")
    assert {row.split(",")[column] for row in rows} == {"interactive", "batch"}
    assert np.all([r.priority == CLASSES[r.cls]["priority"] for r in cosim.run(config).requests])
