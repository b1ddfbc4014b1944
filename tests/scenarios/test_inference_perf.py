"""workload.inference_perf: inference-perf profiles as written (hub/sim/workload/inference_perf.py).

Timers, stages, shared prompts by content, multi-turn chats, the profile file and the errors that
name a profile key; the runs use the linear test backend, so times are exact.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cosim.hub.studies.runner as runner
from cosim.hub.config.inference_perf import InferencePerfConfig
from cosim.hub.config.loading import ScenarioProblems, load_config, parse_config
from cosim.hub.sim.records import RequestRecord
from cosim.hub.sim.workload.inference_perf import InferencePerfSessions, send_offsets_ns
from tests.scenarios.helpers import client, scenario

BLOCK = 16


def profile(*, multi_turn: bool = False, stages: list[dict[str, float]] | None = None, timer: str = "constant",
            groups: int = 3, users: int = 2, system: int = 64, question: int = 40, output: int = 8) -> dict[str, Any]:
    """An inference-perf profile's data and load sections."""
    return {"data": {"type": "shared_prefix",
                     "shared_prefix": {"num_unique_system_prompts": groups, "num_users_per_system_prompt": users,
                                       "system_prompt_len": system, "question_len": question, "output_len": output,
                                       "enable_multi_turn_chat": multi_turn}},
            "load": {"type": timer, "stages": stages or [{"rate": 4, "duration": 5}, {"rate": 8, "duration": 2}]}}


def config(section: dict[str, Any], *, blocks: int = 4000) -> dict[str, Any]:
    sched = {"batching": "chunked", "enable_prefix_caching": True, "num_gpu_blocks": blocks, "block_size": BLOCK,
             "max_num_batched_tokens": 2048}
    return scenario(clients=[client("c0", **sched)], per_token_ns=20000, workload={"inference_perf": section})


def run(section: dict[str, Any]) -> list[RequestRecord]:
    return sorted(runner.run(config(section), in_process=True).requests, key=lambda r: r.arrival_ns)


def parsed(section: dict[str, Any]) -> InferencePerfConfig:
    ip = parse_config(config(section)).workload.inference_perf
    assert ip is not None
    return ip


def test_constant_timer_sends_rate_times_duration_filling_the_stage() -> None:
    """int(rate x duration) requests, exponential gaps rescaled so the last goes at the stage's end."""
    load = parsed(profile(stages=[{"rate": 2.5, "duration": 10}])).load
    times = send_offsets_ns(load, 0, np.random.default_rng(1))
    assert len(times) == 25
    assert times[-1] == 10_000_000_000 and np.all(np.diff(times) > 0) and times[0] > 0
    gaps = np.diff(np.concatenate([[0], times]))
    assert gaps.std() > 0.3 * gaps.mean()  # exponential gaps, not a metronome


def test_poisson_timer_spreads_each_seconds_count_over_that_second() -> None:
    load = parsed(profile(timer="poisson", stages=[{"rate": 20, "duration": 30}])).load
    times = send_offsets_ns(load, 0, np.random.default_rng(3))
    assert len(times) == 600 and np.all(np.diff(times) >= 0)
    per_second = np.bincount((times - 1) // 1_000_000_000)
    assert per_second.var() > 5  # Poisson counts per second vary (a constant 20 would not)
    assert abs(len(times) / (times[-1] / 1e9) - 20) < 3


def test_requests_per_stage_and_stage_barrier() -> None:
    """Each stage sends int(rate x duration); the next starts interval + 1 s after the last request ended."""
    requests = run(profile(stages=[{"rate": 4, "duration": 5}, {"rate": 8, "duration": 2}]))
    stages: dict[str | None, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        stages[r.cls].append(r)
    assert {k: len(v) for k, v in stages.items()} == {"stage_0": 20, "stage_1": 16}
    last_end = max(r.finish_ns for r in stages["stage_0"])
    first_of_next = min(r.arrival_ns for r in stages["stage_1"])
    start_of_next = min(r.arrival_ns for r in stages["stage_0"])  # offsets are > 0: the stage began earlier
    assert first_of_next > last_end + 2_000_000_000  # interval 1 s (default) + inference-perf's 1 s
    assert first_of_next - (last_end + 2_000_000_000) < 2_000_000_000 and start_of_next < 1_000_000_000


def test_shared_system_prompts_and_repeated_questions_hit_the_prefix_cache() -> None:
    """Users of a system prompt share its ids; a user's question is the same ids every time it is sent."""
    requests = run(profile(stages=[{"rate": 2, "duration": 12}]))
    assert len(requests) == 24 and all(r.input_tokens == 104 for r in requests)
    ids = [np.asarray(r.prompt_token_ids[0:104]) for r in requests]
    firsts = {tuple(i[:64]) for i in ids}
    assert len(firsts) == 3  # three system prompts
    prompts = {tuple(i) for i in ids}
    assert len(prompts) == 6  # six users, each sending the same prompt again
    seen: set[tuple[int, ...]] = set()
    for r, prompt in zip(requests, ids):
        if tuple(prompt) in seen:  # sent before: every full block but the one holding the last token is cached
            assert r.cached_tokens == 96
        seen.add(tuple(prompt))
    assert sum(r.cached_tokens == 64 for r in requests) >= 1  # a new user of a known system prompt


def test_multi_turn_rounds_resend_the_history_and_wait_for_the_round_before() -> None:
    requests = run(profile(multi_turn=True, groups=1, users=2, stages=[{"rate": 4, "duration": 3}]))
    chats: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        chats[r.session].append(r)
    assert sorted(len(v) for v in chats.values()) == [6, 6]  # 12 requests, user j mod 2
    for rounds in chats.values():
        rounds.sort(key=lambda r: r.turn)
        assert [r.input_tokens for r in rounds] == [64 + 40 + k * 48 for k in range(6)]
        for before, after in zip(rounds, rounds[1:]):
            assert after.arrival_ns >= before.finish_ns  # one request of a chat in flight
            history = before.input_tokens + before.output_tokens
            assert np.array_equal(after.prompt_token_ids[0:history],
                                  np.concatenate([before.prompt_token_ids[0:before.input_tokens],
                                                  before.output_token_ids[0:before.output_tokens]]))
            assert after.cached_tokens >= (history - 1) // BLOCK * BLOCK


def test_runs_are_deterministic() -> None:
    first = [(r.arrival_ns, r.finish_ns, r.cached_tokens) for r in run(profile(multi_turn=True))]
    assert first == [(r.arrival_ns, r.finish_ns, r.cached_tokens) for r in run(profile(multi_turn=True))]


def test_random_data_takes_length_j_for_request_j_of_each_stage() -> None:
    dist = {"min": 20, "max": 60, "mean": 40, "std_dev": 10, "total_count": 30}
    section = {"data": {"type": "random", "input_distribution": dist, "output_distribution": {**dist, "min": 2}},
               "load": {"stages": [{"rate": 5, "duration": 4}, {"rate": 5, "duration": 2}]}}
    plan = InferencePerfSessions(parsed(section), seed=1)
    turns = [s.turns[0] for s in plan.sessions]
    assert [t.stage for t in turns] == [0] * 20 + [1] * 10
    assert [t.input_tokens for t in turns[20:]] == [t.input_tokens for t in turns[:10]]
    assert all(20 <= t.input_tokens <= 60 for t in turns)


def test_errors_name_the_profile_key() -> None:
    bad = profile()
    bad["data"]["shared_prefix"]["question_len"] = 0
    with pytest.raises(ScenarioProblems, match=r"workload\.inference_perf\.data\.shared_prefix\.question_len: "
                                               r"input should be greater than or equal to 1, got 0"):
        parse_config(config(bad))
    bad = profile(stages=[{"rate": 0.1, "duration": 5}])
    with pytest.raises(ScenarioProblems, match=r"workload\.inference_perf\.load\.stages\[0\].*sends no request"):
        parse_config(config(bad))
    clash = config(profile())
    clash["workload"]["requests"] = 5
    with pytest.raises(ScenarioProblems, match="inference_perf gives the requests.*remove requests"):
        parse_config(clash)


def test_older_key_names_are_accepted() -> None:
    section = profile()
    sp = section["data"]["shared_prefix"]
    sp["num_groups"], sp["num_prompts_per_group"] = sp.pop("num_unique_system_prompts"), sp.pop(
        "num_users_per_system_prompt")
    assert parsed(section).data.prefix_settings.num_users == 6


def test_a_profile_file_is_read_as_is(tmp_path: Path) -> None:
    """The inference-perf config file users have: its api/server/report sections are not read."""
    import yaml

    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(
        {"api": {"type": "completion", "streaming": True}, "server": {"type": "vllm", "base_url": "http://x:8000"},
         "report": {"request_lifecycle": {"summary": True}}, **profile()}))
    scenario_file = tmp_path / "s.yaml"
    cfg = config({"profile": "profile.yaml"})
    scenario_file.write_text(yaml.safe_dump(cfg))
    loaded, _ = load_config(scenario_file)
    assert loaded.workload.inference_perf is not None and loaded.workload.num_requests == 36
    cfg["workload"]["inference_perf"]["profile"] = "missing.yaml"
    scenario_file.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ScenarioProblems, match=r"workload\.inference_perf\.profile: cannot read .*missing\.yaml"):
        load_config(scenario_file)
