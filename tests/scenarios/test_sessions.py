"""Multi-turn sessions (hub/sim/conversations.py): turns released after their predecessors plus think time,
carrying the history so that prefix caching sees it; closed loop; sticky routing; determinism."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import cosim
from cosim.hub.errors import ScenarioError
from cosim.hub.sim.records import RequestRecord
from tests.paths import EXAMPLES
from tests.scenarios.helpers import client, scenario

EXAMPLE = EXAMPLES / "sessions.yaml"
BLOCK = 16


def sessions_config(*, caching: bool = True, clients: int = 1, policy: str = "round_robin",
                    **sessions: Any) -> dict[str, Any]:
    sched = {"batching": "chunked", "enable_prefix_caching": caching, "num_gpu_blocks": 4000,
             "block_size": BLOCK, "max_num_batched_tokens": 2048}
    spec = {"count": 12, "turns": {"dist": "uniform", "low": 2, "high": 5},
            "think_time_s": {"dist": "fixed", "value": 0.25}, **sessions}
    return scenario(clients=[client(f"c{i}", **sched) for i in range(clients)], per_token_ns=20000,
                    workload={"arrival": {"process": "poisson", "rate_per_s": 3},
                              "input_tokens": {"dist": "uniform", "low": 40, "high": 200},
                              "output_tokens": {"dist": "uniform", "low": 10, "high": 60},
                              "sessions": spec},
                    router={"policy": policy})


def by_session(requests: list[RequestRecord]) -> dict[int, list[RequestRecord]]:
    sessions: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        sessions[r.session].append(r)
    return {k: sorted(v, key=lambda r: r.turn) for k, v in sessions.items()}


def test_a_turn_arrives_exactly_think_time_after_its_predecessor_ends() -> None:
    result = cosim.run(sessions_config())
    sessions = by_session(result.requests)
    assert len(sessions) == 12 and all(r.is_finished for r in result.requests)
    for turns in sessions.values():
        assert [t.turn for t in turns] == list(range(len(turns)))
        for before, after in zip(turns, turns[1:]):
            assert after.arrival_ns == before.finish_ns + 250_000_000
            assert after.stages[0].start_ns >= after.arrival_ns
            # the prompt is the history (previous prompt and output) and 40-200 new tokens
            assert 40 <= after.input_tokens - (before.input_tokens + before.output_tokens) <= 200


def test_follow_up_turns_find_the_history_in_the_prefix_cache() -> None:
    """One client, blocks to spare: a follow-up turn reuses every full block the previous turn
    computed (its prompt and all its output but the last token, which is never computed)."""
    cached = cosim.run(sessions_config()).requests
    for turns in by_session(cached).values():
        assert turns[0].cached_tokens == 0
        for before, after in zip(turns, turns[1:]):
            assert after.cached_tokens == (before.input_tokens + before.output_tokens - 1) // BLOCK * BLOCK
    off = cosim.run(sessions_config(caching=False))
    assert all(r.cached_tokens == 0 for r in off.requests)
    assert off.summary["sessions"]["prefix_cache_hit_rate"]["follow_up_turns"] == 0
    on = cosim.run(sessions_config()).summary["sessions"]
    assert on["prefix_cache_hit_rate"]["follow_up_turns"] > 0.5
    assert on["completed"] == on["started"] == 12
    assert set(on["ttft_s_by_turn"]) >= {"0", "1"}


def test_closed_loop_keeps_at_most_users_sessions_in_flight() -> None:
    config = sessions_config(count=10, users=3, think_time_s={"dist": "exponential", "mean": 0.3})
    config["workload"]["arrival"] = {"process": "constant"}
    result = cosim.run(config)
    spans = sorted((turns[0].arrival_ns, turns[-1].finish_ns) for turns in by_session(result.requests).values())
    assert len(spans) == 10 and result.summary["sessions"]["completed"] == 10
    assert [start for start, _ in spans[:3]] == [0, 0, 0]
    for start, _ in spans:
        assert sum(1 for s, e in spans if s <= start < e) <= 3
    # after the first three, a session starts exactly when another one ends
    ends = {end for _, end in spans}
    assert all(start in ends for start, _ in spans[3:])


def test_a_closed_loop_run_for_a_time_ends_with_its_last_session_on_an_autoscaled_pool_too() -> None:
    """duration_s: users start sessions until then, and the run ends when the last one has; a pool
    (min = max = 1, whose sampling would go on forever) serves exactly the same sessions."""
    config = sessions_config(count=None, users=2, duration_s=6.0)
    config["workload"]["arrival"] = {"process": "constant"}
    plain = cosim.run(config)
    config["clients"][0]["replicas"] = {"min": 1, "max": 1, "policy": "concurrency", "target": 4}
    pooled = cosim.run(config)
    assert plain.summary["sessions"]["completed"] == pooled.summary["sessions"]["completed"] > 2
    assert [(r.session, r.turn, r.arrival_ns, r.finish_ns) for r in plain.requests] == \
        [(r.session, r.turn, r.arrival_ns, r.finish_ns) for r in pooled.requests]
    assert all(r.is_finished for r in pooled.requests)
    starts = [turns[0].arrival_ns for turns in by_session(pooled.requests).values()]
    assert max(starts) < 6e9 <= max(r.finish_ns for r in pooled.requests)


def test_sticky_keeps_a_session_on_one_client_and_raises_hits() -> None:
    rr = cosim.run(sessions_config(clients=2, policy="round_robin"))
    sticky = cosim.run(sessions_config(clients=2, policy="sticky"))
    for turns in by_session(sticky.requests).values():
        assert len({t.stages[0].client for t in turns}) == 1
    hits = {name: r.summary["sessions"]["prefix_cache_hit_rate"]["follow_up_turns"]
            for name, r in (("rr", rr), ("sticky", sticky))}
    assert hits["sticky"] > hits["rr"] + 0.1, hits


def test_sticky_leaves_an_overloaded_client() -> None:
    """With sticky_max_load 1 a session moves as soon as its client holds more than the least
    loaded one's sequences + 1."""
    config = sessions_config(clients=2, policy="sticky", count=30)
    config["router"]["sticky_max_load"] = 1.0
    config["workload"]["arrival"] = {"process": "constant"}
    moved = sum(len({t.stages[0].client for t in turns}) > 1
                for turns in by_session(cosim.run(config).requests).values())
    assert moved > 0


@pytest.mark.parametrize("count", [40])
def test_cache_aware_routers_beat_round_robin_on_the_session_example(count: int) -> None:
    hits = {}
    for policy in ("round_robin", "prefix_aware", "sticky"):
        summary = cosim.run(EXAMPLE, overrides=[f"router.policy={policy}", f"workload.sessions.count={count}",
                                                "output.dir=null"]).summary
        hits[policy] = summary["sessions"]["prefix_cache_hit_rate"]["follow_up_turns"]
    assert hits["prefix_aware"] > hits["round_robin"] and hits["sticky"] > hits["round_robin"], hits


def test_two_runs_write_the_same_bytes(tmp_path: Path) -> None:
    config = sessions_config(clients=2, policy="sticky", think_time_s={"dist": "lognormal", "mean": 0.4, "sigma": 1})
    for name in ("a", "b"):
        cosim.run(config, output_dir=tmp_path / name)
    assert (tmp_path / "a" / "requests.csv").read_bytes() == (tmp_path / "b" / "requests.csv").read_bytes()
    summaries = [json.loads((tmp_path / n / "summary.json").read_text()) for n in ("a", "b")]
    assert summaries[0]["sessions"] == summaries[1]["sessions"]
    header = (tmp_path / "a" / "requests.csv").read_text().splitlines()[0].split(",")
    assert "session" in header and "turn" in header


def test_sessions_refuse_requests_and_a_trace_length() -> None:
    config = sessions_config()
    config["workload"]["requests"] = 5
    with pytest.raises(ScenarioError, match="sessions.count"):
        cosim.run(config)
