"""Exact TTFT/TPOT/E2E of small scenarios on the linear test backend, computed by hand."""

from __future__ import annotations

from tests.scenarios.helpers import client, run_with_trace, scenario, times


def test_static_batching_of_four_requests(tmp_path) -> None:
    """Two requests form a batch at t=0; two that arrive at 1.5 us wait for it to drain."""
    config = scenario(clients=[client(batching="static", max_num_seqs=4)])
    rows = [(0, 100, 3), (0, 100, 3), (1.5e-6, 100, 2), (1.5e-6, 100, 2)]
    r = run_with_trace(config, rows, tmp_path)
    # batch 1: prefill 0-1000, decodes 1000-2000, 2000-3000; batch 2 starts at 3000: 3000-4000, 4000-5000
    assert [times(x) for x in r] == [(1000, 3000, 1000)] * 2 + [(2500, 3500, 4000)] * 2


def test_continuous_batching_admits_a_late_arrival(tmp_path) -> None:
    """Continuous (prefill-first) batching pauses decodes to prefill the newcomers at the next step."""
    config = scenario(clients=[client(batching="continuous")])
    rows = [(0, 100, 3), (0, 100, 3), (1.5e-6, 100, 2), (1.5e-6, 100, 2)]
    r = run_with_trace(config, rows, tmp_path)
    # 0-1000 prefill r0 r1; 1000-2000 decode; 2000-3000 prefill r2 r3; 3000-4000 decode all four
    assert [times(x) for x in r] == [(1000, 4000, 1000)] * 2 + [(1500, 2500, 3000)] * 2


def test_long_prompt_is_chunked_while_three_decodes_run(tmp_path) -> None:
    """A 1000-token prompt in 256-token chunks shares each step with 3 running decodes (each step
    formed with the one before it done: no async scheduling)."""
    config = scenario(clients=[client(batching="chunked", chunk_size=256, async_scheduling=False)], per_token_ns=1)
    rows = [(0, 10, 10)] * 3 + [(2.5e-6, 1000, 2)]
    r = run_with_trace(config, rows, tmp_path)
    # step = 1000 + tokens: 0-1030 (3 prompts), 1030-2033, 2033-3036 (decodes); the long prompt arrives at 2500:
    # 3036-4292, 4292-5548, 5548-6804 (3 decodes + 253 chunk), 6804-8048 (3 + 241: its first token),
    # 8048-9052 (4 decodes: it finishes), 9052-10055, 10055-11058 (the short ones finish).
    short, long = r[0], r[3]
    assert times(short) == (1030, 11058, 1030)
    assert (short.finish_ns - short.first_token_ns) / 9 == (11058 - 1030) / 9
    assert times(long) == (8048 - 2500, 9052 - 2500, 8048)
    assert short.max_tbt_ns == 1256 and long.max_tbt_ns == 1004


def test_async_scheduling_sees_a_prompt_one_step_later(tmp_path) -> None:
    """The same run under vLLM V1's default async scheduling: the step after the one the prompt
    arrives in was formed when that one started, so the prompt's chunks start one step later."""
    config = scenario(clients=[client(batching="chunked", chunk_size=256)], per_token_ns=1)
    rows = [(0, 10, 10)] * 3 + [(2.5e-6, 1000, 2)]
    r = run_with_trace(config, rows, tmp_path)
    # 0-1030, 1030-2033, 2033-3036 as before; 3036-4039 (3 decodes: formed at 2033, before the arrival);
    # 4039-5295, 5295-6551, 6551-7807 (3 + 253), 7807-9051 (3 + 241: its first token), 9051-10055 (it
    # finishes), 10055-11058 (the short ones' tenth token).
    short, long = r[0], r[3]
    assert times(short) == (1030, 11058, 1030)
    assert times(long) == (9051 - 2500, 10055 - 2500, 9051)


def test_disaggregated_request_pays_the_kv_transfer(tmp_path) -> None:
    """Prefill on one client, 100 tokens of Llama-3-8B KV (13,107,200 B) over a 50 GB/s, 10 us link, decode on
    another."""
    config = scenario(clients=[client("p", role="prefill"), client("d", role="decode")],
                      network={"link": {"bandwidth_gbps": 50, "latency_s": 10e-6}})
    (r,) = run_with_trace(config, [(0, 100, 3)], tmp_path)
    transfer = 10_000 + 13_107_200 // 50  # 272,144 ns
    assert [s.kind for s in r.stages] == ["prefill", "decode"]
    assert r.stages[1].transfer_ns == transfer
    assert times(r) == (1000, 1000 + transfer + 2000, 1000)
