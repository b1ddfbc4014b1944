"""vLLM's CPU KV offload tier (``scheduler.kv_offload``), timed by hand on the linear test backend."""

from __future__ import annotations

from typing import Any

import pytest

import cosim.hub.studies.runner as runner
from cosim.hub.errors import ScenarioError
from cosim.hub.studies.runner import RunResult
from tests.scenarios.helpers import client, scenario

# Meta-Llama-3-8B, bf16: 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B a token, a 16-token block 2,097,152 B;
# over a 50 GB/s host link (the H100's PCIe Gen5 x16 at vLLM's measured DMA rate) 41,943.04 ns a block.
BLOCK_NS = 2_097_152 / 50


def _run(tmp_path: Any, rows: list[tuple[float, list[int], int]], **scheduler: Any) -> RunResult:
    """Runs a 1 us + 10 us/token client on requests given as (arrival_s, prompt ids, output tokens)."""
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input,output,ids\n" + "".join(
        f"{a},{len(ids)},{o},{' '.join(map(str, ids))}\n" for a, ids, o in rows))
    config = scenario(clients=[client(batching="chunked", enable_prefix_caching=True, **scheduler)],
                      per_token_ns=10_000)
    config["workload"] = {"requests": len(rows), "arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"},
                          "output_tokens": {"dist": "trace"},
                          "trace": {"path": str(trace), "format": "csv", "arrival_column": "arrival_s",
                                    "input_column": "input", "output_column": "output", "token_ids_column": "ids"}}
    return runner.run(config)


PROMPT_A = list(range(1000, 1160))  # 160 tokens: 10 full blocks
PROMPT_B = list(range(5000, 5160))


def test_a_prefix_evicted_from_the_gpu_is_loaded_from_cpu(tmp_path) -> None:
    """The GPU holds 11 blocks: B's prefill evicts A's cached blocks. When A's prompt comes back, the host
    tier (filled as A was computed) gives 9 of its blocks (all but the last token's block), copied in
    9 x 41,943 ns; only 16 tokens are computed."""
    rows = [(0, PROMPT_A, 2), (0.002, PROMPT_B, 2), (0.005, PROMPT_A, 2)]
    result = _run(tmp_path, rows, num_gpu_blocks=12, kv_offload={"cpu_blocks": 100})
    a, _, again = result.requests
    assert a.first_token_ns == 1_000 + 160 * 10_000  # computed in full
    loaded = 5_000_000 + round(9 * BLOCK_NS)
    assert again.first_token_ns == loaded + 1_000 + 16 * 10_000
    assert again.cached_tokens == 144
    offload = result.summary["clients"]["c0"]["kv_offload"]
    assert (offload["loads"], offload["cpu_hit_blocks"], offload["queried_blocks"]) == (1, 9, 27)
    assert offload["hit_rate"] == pytest.approx(1 / 3)
    assert offload["stored_blocks"] == 20  # A's and B's 10 full blocks; A's again were there
    assert offload["mean_load_s"] == pytest.approx(round(9 * BLOCK_NS) / 1e9)
    assert offload["store_busy_s"] == pytest.approx(2 * round(10 * BLOCK_NS) / 1e9)


def test_without_the_tier_the_prefix_is_recomputed(tmp_path) -> None:
    rows = [(0, PROMPT_A, 2), (0.002, PROMPT_B, 2), (0.005, PROMPT_A, 2)]
    result = _run(tmp_path, rows, num_gpu_blocks=12)
    assert result.requests[2].first_token_ns == 5_000_000 + 1_000 + 160 * 10_000
    assert "kv_offload" not in result.summary["clients"]["c0"]


def test_a_block_not_yet_copied_is_not_found(tmp_path) -> None:
    """Over a 0.5 GB/s host link, A's 10 blocks take 41.9 ms to reach the host from the end of its
    prefill (1.601 ms): when its prompt comes back at 5 ms, B has evicted it from the GPU and the host
    tier does not have it yet, so it is recomputed."""
    rows = [(0, PROMPT_A, 2), (0.002, PROMPT_B, 2), (0.005, PROMPT_A, 2)]
    result = _run(tmp_path, rows, num_gpu_blocks=12, kv_offload={"cpu_blocks": 100, "host_gbps": 0.5})
    assert result.requests[2].first_token_ns == 5_000_000 + 1_000 + 160 * 10_000
    assert result.summary["clients"]["c0"]["kv_offload"]["loads"] == 0


def test_a_full_host_tier_evicts_its_least_recently_used_blocks(tmp_path) -> None:
    """10 blocks of room: B's blocks replace A's, so A's prompt finds nothing there (and, recomputed,
    replaces B's in turn)."""
    rows = [(0, PROMPT_A, 2), (0.002, PROMPT_B, 2), (0.005, PROMPT_A, 2)]
    result = _run(tmp_path, rows, num_gpu_blocks=12, kv_offload={"cpu_blocks": 10})
    offload = result.summary["clients"]["c0"]["kv_offload"]
    assert (offload["loads"], offload["evicted_blocks"]) == (0, 20)
    assert result.requests[2].first_token_ns == 5_000_000 + 1_000 + 160 * 10_000


def test_a_storage_tier_serves_what_the_host_tier_lost(tmp_path) -> None:
    """The storage tier kept A's blocks (written through at 2 GB/s after each host copy): read back at
    2 GB/s plus 100 us, then over the host link."""
    storage = {"blocks": 1000, "read_gbps": 2.0, "write_gbps": 2.0, "latency_s": 100e-6}
    rows = [(0, PROMPT_A, 2), (0.02, PROMPT_B, 2), (0.05, PROMPT_A, 2)]
    result = _run(tmp_path, rows, num_gpu_blocks=12, kv_offload={"cpu_blocks": 10, "storage": storage})
    offload = result.summary["clients"]["c0"]["kv_offload"]
    assert (offload["loads"], offload["storage_hit_blocks"], offload["cpu_hit_blocks"]) == (1, 9, 0)
    read = 100_000 + round(9 * 2_097_152 / 2.0)
    assert result.requests[2].first_token_ns == 50_000_000 + read + round(9 * BLOCK_NS) + 1_000 + 16 * 10_000


def test_offload_needs_prefix_caching() -> None:
    config = scenario(clients=[client(kv_offload={"cpu_blocks": 10})])
    with pytest.raises(ScenarioError, match=r"clients\[0\].scheduler.kv_offload"):
        runner.run(config)


def test_a_device_without_a_host_link_figure_is_named() -> None:
    config = scenario(clients=[client(enable_prefix_caching=True, kv_offload={"cpu_blocks": 10})])
    config["hardware"] = {"h": {"preset": "B200"}}
    with pytest.raises(ScenarioError, match=r"clients\[0\].scheduler.kv_offload.host_gbps"):
        runner.run(config)
