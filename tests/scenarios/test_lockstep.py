"""Data-parallel ranks of an MoE deployment step in lock-step (``dp_group``), as vLLM's do."""

from __future__ import annotations

from pathlib import Path

import pytest

import cosim
from cosim.hub.errors import ScenarioError
from tests.scenarios.helpers import client, run_with_trace, scenario


def ranks(**scheduler: object) -> list[dict]:
    return [{**client(f"rank{i}", batching="mixed", **scheduler), "dp_group": "moe"} for i in range(2)]


def test_ranks_step_together_for_as_long_as_the_slowest(tmp_path: Path) -> None:
    config = scenario(clients=ranks(), step_ns=1000, per_token_ns=10, router={"policy": "round_robin"})
    # rank0 gets a 100-token prompt, rank1 a 10-token one, at once; 3 tokens each
    requests = run_with_trace(config, [(0.0, 100, 3), (0.0, 10, 3)], tmp_path)
    # step 1: both prefill; vLLM pads both forwards to 100 tokens: 1000 + 10 x 100 each, ends at 2000
    assert [r.first_token_ns for r in requests] == [2000, 2000]
    # steps 2 and 3: one decode each (padded to 1 token): 1010 ns, together
    assert [r.finish_ns for r in requests] == [2000 + 2 * 1010] * 2


def test_an_idle_rank_does_not_slow_the_busy_one(tmp_path: Path) -> None:
    config = scenario(clients=ranks(), step_ns=1000, per_token_ns=10, router={"policy": "round_robin"})
    alone = run_with_trace(config, [(0.0, 100, 3)], tmp_path)[0]
    assert (alone.first_token_ns, alone.finish_ns) == (2000, 2000 + 2 * 1010)


def test_work_arriving_at_an_idle_rank_waits_for_the_step_in_flight(tmp_path: Path) -> None:
    config = scenario(clients=ranks(), step_ns=1000, per_token_ns=10, router={"policy": "round_robin"})
    first, second = run_with_trace(config, [(0.0, 100, 2), (0.0000005, 10, 2)], tmp_path)
    assert first.first_token_ns == 2000
    # arrives at 500 ns on rank1; starts with the group's next step at 2000 (padded: 1000 + 10 x 10)
    assert second.first_token_ns == 2000 + 1100 and first.finish_ns == 2000 + 1100


def test_without_a_group_the_ranks_step_independently(tmp_path: Path) -> None:
    clients = [client(f"rank{i}", batching="mixed") for i in range(2)]
    config = scenario(clients=clients, step_ns=1000, per_token_ns=10, router={"policy": "round_robin"})
    requests = run_with_trace(config, [(0.0, 100, 3), (0.0, 10, 3)], tmp_path)
    assert [r.first_token_ns for r in requests] == [2000, 1100]


def test_ranks_of_one_group_must_be_the_same_engine() -> None:
    clients = ranks()
    clients[1]["scheduler"] = {"batching": "chunked"}
    with pytest.raises(ScenarioError, match=r"clients\[1\]\.dp_group.*'rank1' differs from 'rank0'"):
        cosim.run(scenario(clients=clients))
