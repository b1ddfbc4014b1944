"""Trace importers: Mooncake (hash_ids -> token ids), ShareGPT conversations and LLMServingSim's
agentic JSONL (-> sessions); each parses its sample and names file:line and field for a bad row."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import cosim
from cosim.hub.errors import ScenarioError
from cosim.hub.sim.workload import generate_requests, parse_workload
from cosim.hub.sim.workload.session_traces import load_sessions
from cosim.hub.sim.workload.token_ids import SegmentIds
from tests.paths import EXAMPLES
from tests.scenarios.helpers import client, scenario

TRACES = EXAMPLES / "traces"
MOONCAKE = TRACES / "mooncake_conversation_300.jsonl"
SHAREGPT = TRACES / "sharegpt_glaive_toolcall_60.json"


def mooncake(path: Path, **workload: object) -> list:
    config = parse_workload({"trace": {"path": str(path), "format": "mooncake"}, "arrival": {"process": "trace"},
                             "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}, **workload})
    return generate_requests(config, np.random.default_rng(0), base_dir=Path("."))


def test_mooncake_sample_lengths_times_and_shared_blocks() -> None:
    specs = mooncake(MOONCAKE)
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    assert len(specs) == len(rows) == 300
    # first rows, as in the file: timestamp 0 ms, 6758 / 7322 prompt tokens, 500 / 490 output tokens
    assert (specs[0].arrival_ns, specs[0].input_tokens, specs[0].output_tokens) == (0, 6758, 500)
    assert (specs[1].input_tokens, specs[1].output_tokens) == (7322, 490)
    assert specs[-1].arrival_ns == rows[-1]["timestamp"] * 1_000_000 == 102_000_000_000
    assert sum(s.input_tokens for s in specs) == sum(r["input_length"] for r in rows)
    first, second = specs[0].prompt_token_ids, specs[1].prompt_token_ids
    assert isinstance(first, SegmentIds) and len(first) == 6758 and len(second) == 7322
    # both start with hash 0 (one 512-token block), then differ (hashes 1 and 14)
    assert np.array_equal(first[0:512], second[0:512])
    assert not np.array_equal(first[512:513], second[512:513])
    assert len(set(first[0:6758].tolist())) == 6758  # distinct ids within a prompt


def test_mooncake_shared_hash_ids_hit_the_prefix_cache() -> None:
    """Requests 0 and 1 share one 512-token block: the second, run after the first on one client,
    finds those 512 tokens (32 blocks of 16) in the cache."""
    config = scenario(clients=[client("c0", enable_prefix_caching=True, num_gpu_blocks=2000, block_size=16,
                                      batching="chunked", max_num_batched_tokens=8192)],
                      workload={"requests": 2, "trace": {"path": str(MOONCAKE), "format": "mooncake"},
                                "arrival": {"process": "constant"}, "input_tokens": {"dist": "trace"},
                                "output_tokens": {"dist": "fixed", "value": 1}})
    config["workload"]["arrival"] = {"process": "uniform", "rate_per_s": 1}
    requests = cosim.run(config).requests
    assert [r.cached_tokens for r in requests] == [0, 512]


def test_mooncake_bad_row_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
                    '{"timestamp": 5, "input_length": 1500, "output_length": 5, "hash_ids": [0, 2]}\n')
    with pytest.raises(ScenarioError, match=r"bad\.jsonl:2: hash_ids has 2 blocks of 512 tokens, too few for "
                                            r"its input_length=1500"):
        mooncake(path)
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, "x"]}\n')
    with pytest.raises(ScenarioError, match=r"bad\.jsonl:1: hash_ids="):
        mooncake(path)


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def test_sharegpt_sample_turns_counted_from_the_text() -> None:
    sessions = load_sessions(SHAREGPT, "sharegpt")
    data = json.loads(SHAREGPT.read_text())
    assert len(sessions) == len(data) == 60
    model = {"gpt", "function_call"}
    assert sum(len(s.turns) for s in sessions) == sum(m["from"] in model for c in data for m in c["conversations"])
    # the first conversation by hand: human 87 chars, gpt 78, human 39, function_call 93, observation 537,
    # gpt 458, human 99, gpt 186 -> turns (prompt, output) in tokens of 4 characters
    messages = [m["value"] for m in data[0]["conversations"]]
    t = [_tokens(v) for v in messages]
    assert [(x.input_tokens, x.output_tokens) for x in sessions[0].turns] == [
        (t[0], t[1]), (t[0] + t[1] + t[2], t[3]), (sum(t[:5]), t[5]), (sum(t[:7]), t[7])]
    assert [(x.input_tokens, x.output_tokens) for x in sessions[0].turns] == [(22, 20), (52, 24), (200, 115),
                                                                              (340, 47)]
    assert sessions[0].source.endswith("sharegpt_glaive_toolcall_60.json:2")
    starts = [i + 1 for i, line in enumerate(SHAREGPT.read_text().splitlines()) if line == "  {"]
    assert [s.source.rsplit(":", 1)[1] for s in sessions] == [str(n) for n in starts]


def test_sharegpt_bad_row_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "chats.json"
    path.write_text('[\n  {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},\n'
                    '  {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": 7}]}\n]\n')
    with pytest.raises(ScenarioError, match=r"chats\.json:3: conversations\[1\]\.value=7 is not a string"):
        load_sessions(path, "sharegpt")
    path.write_text('{"conversations": [{"from": "robot", "value": "hi"}]}\n')
    with pytest.raises(ScenarioError, match=r"chats\.json:1: conversations\[0\]\.from='robot'"):
        load_sessions(path, "sharegpt")


AGENTIC = [
    {"session_id": "s0", "arrival_time_ns": 1_000_000_000,
     "sub_requests": [{"input_toks": 300, "output_toks": 20, "tool_duration_ns": 150_000_000},
                      {"input_toks": 400, "output_toks": 30, "tool_duration_ns": 50_000_000},
                      {"input_toks": 480, "output_toks": 10, "tool_duration_ns": 0}]},
    {"input_toks": 100, "output_toks": 5, "arrival_time_ns": 1_500_000_000},
]


def test_llmservingsim_sessions_release_after_tool_durations(tmp_path: Path) -> None:
    """A hand-written file (no public agentic sample was found): tool durations separate the calls,
    and each call's prompt holds the one before it (300 + 20 <= 400), so it reuses its blocks."""
    path = tmp_path / "agentic.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in AGENTIC))
    sessions = load_sessions(path, "llmservingsim")
    assert [(t.input_tokens, t.output_tokens, t.think_ns) for t in sessions[0].turns] == [
        (300, 20, None), (400, 30, 150_000_000), (480, 10, 50_000_000)]
    assert sessions[1].start_ns == 1_500_000_000 and len(sessions[1].turns) == 1
    config = scenario(clients=[client("c0", enable_prefix_caching=True, num_gpu_blocks=500, block_size=16)],
                      workload={"arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"},
                                "output_tokens": {"dist": "trace"},
                                "sessions": {"trace": {"path": str(path), "format": "llmservingsim"}}})
    requests = sorted(cosim.run(config).requests, key=lambda r: (r.session, r.turn))
    first, second, third, flat = requests
    assert first.arrival_ns == 0 and flat.arrival_ns == 500_000_000  # starts rebased to the first
    assert second.arrival_ns == first.finish_ns + 150_000_000
    assert third.arrival_ns == second.finish_ns + 50_000_000
    assert second.cached_tokens == (300 + 20 - 1) // 16 * 16 and third.cached_tokens == (400 + 30 - 1) // 16 * 16


def test_llmservingsim_bad_row_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "agentic.jsonl"
    bad = {"session_id": "s1", "arrival_time_ns": 0,
           "sub_requests": [{"input_toks": 10, "output_toks": 2}, {"input_toks": 20, "output_toks": -1}]}
    path.write_text(json.dumps(AGENTIC[0]) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ScenarioError, match=r"agentic\.jsonl:2: sub_requests\[1\]\.output_toks=-1 is not an integer"):
        load_sessions(path, "llmservingsim")
