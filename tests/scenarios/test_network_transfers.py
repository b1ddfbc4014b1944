"""KV transfers between prefill and decode clients go through the network backend, in both modes."""

from __future__ import annotations

import copy

import cosim.hub.studies.runner as runner
from tests.scenarios.helpers import client, run_with_trace, scenario

SIZE = 100 * 131_072  # 100 tokens of Llama-3-8B KV, fp16


def disaggregated(mode: str) -> dict:
    config = scenario(clients=[client("p", role="prefill"), client("d", role="decode")],
                      network={"backend": "net", "mode": mode,
                               "topology": [{"kind": "switch", "npus": 2, "bandwidth_gbps": 50, "latency_ns": 500}]})
    config["backends"]["net"] = {"kind": "network"}
    return config


def test_predict_mode_times_each_kv_transfer_alone(tmp_path) -> None:
    requests = run_with_trace(disaggregated("predict"), [(0, 100, 3)] * 4, tmp_path)
    # congestion-unaware switch: 2 hops x 500 ns + one serialization of 13,107,200 B at 50 B/ns
    assert {r.stages[1].transfer_ns for r in requests} == {2 * 500 + SIZE // 50}
    assert all(r.generated_tokens == 3 for r in requests)


def test_congestion_aware_mode_makes_concurrent_transfers_queue(tmp_path) -> None:
    requests = run_with_trace(disaggregated("congestion_aware"), [(0, 100, 3)] * 4, tmp_path)
    transfers = sorted(r.stages[1].transfer_ns for r in requests)
    # store-and-forward: two hops, each 500 ns + a serialization of 262,144 ns; the four KV caches
    # queue on the prefill NPU's up-link, so each leaves one serialization after the previous one
    serialization = SIZE // 50
    assert transfers == [2 * (500 + serialization) + k * serialization for k in range(4)]
    assert all(r.finish_ns > 0 and r.generated_tokens == 3 for r in requests)


def test_tensor_parallel_all_reduces_can_be_timed_by_the_network_backend(tmp_path) -> None:
    """Two all-reduces per layer of (tokens x 4096 x 2 B) over a 2-NPU ring at 100 GB/s, no latency."""
    config = scenario(clients=[{**client("tp2"), "hardware": {"device": "h", "count": 2, "tensor_parallel": 2}}],
                      network={"backend": "net", "collectives": True,
                               "topology": [{"kind": "ring", "npus": 2, "bandwidth_gbps": 100}]})
    config["backends"]["net"] = {"kind": "network"}
    (r,) = run_with_trace(config, [(0, 100, 2)], tmp_path)
    # ring all-reduce on 2 NPUs: 2 sends of D/2; prefill D = 819,200 B -> 2 x 4096 ns; decode D = 8192 B -> 2 x 40 ns
    prefill = 1000 + 2 * 32 * 2 * 4096
    decode = 1000 + 2 * 32 * 2 * 40
    assert (r.first_token_ns, r.finish_ns) == (prefill, prefill + decode)


def test_default_topology_keeps_a_clients_all_reduces_on_its_intra_node_link(tmp_path) -> None:
    """Without a topology, a TP2 client's devices share an H100-SXM node: its all-reduces run on
    NVLink at NCCL's bus bandwidth (450 GB/s x 0.73) with NCCL's NVLink hop latency (0.47 us),
    not on the NIC; two clients sit on nodes of their own, so their KV crosses the NIC."""
    tp2 = {"hardware": {"device": "h", "count": 2, "tensor_parallel": 2}}
    config = scenario(clients=[{**client("p", role="prefill"), **tp2}, {**client("d", role="decode"), **tp2}],
                      network={"backend": "net", "collectives": True})
    config["backends"]["net"] = {"kind": "network"}
    (r,) = run_with_trace(config, [(0, 100, 2)], tmp_path)
    # switch all-reduce on 2 NPUs: 2 sends of D/2, each 2 hops x 470 ns + D/2 at 328.5 B/ns
    send = int(2 * 470 + 409_600 / 328.5)  # prefill: D = 100 tokens x 4096 x 2 B
    assert r.stages[0].end_ns - r.stages[0].start_ns == 1000 + 2 * 32 * 2 * send
    # the KV: a half per device, node to node through the NIC switch (H100-SXM: 50 GB/s), 2 hops of 5 us
    assert r.stages[1].transfer_ns == 2 * 5000 + SIZE // 2 // 50


def test_a_decode_client_receives_only_the_prompt_blocks_its_prefix_cache_lacks(tmp_path) -> None:
    """vLLM's decode instance looks up its own prefix cache and pulls the rest from the prefill
    instance. Two 100-token prompts, a second apart, share their first 70 tokens: the second
    transfers only what follows the 4 shared full blocks (64 tokens)."""
    caching = {"enable_prefix_caching": True, "block_size": 16}
    config = scenario(clients=[client("p", role="prefill", **caching), client("d", role="decode", **caching)],
                      network={"link": {"bandwidth_gbps": 50, "latency_s": 10e-6}})
    trace = tmp_path / "ids.jsonl"
    ids = [list(range(70)) + list(range(1000 * t, 1000 * t + 30)) for t in (0, 1)]
    trace.write_text("".join(f'{{"t": {t}, "ids": {ids[t]}, "n": 100, "out": 3}}\n' for t in (0, 1)))
    config["workload"] = {"requests": 2, "arrival": {"process": "trace"},
                          "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"},
                          "trace": {"path": str(trace), "format": "jsonl", "arrival_column": "t",
                                    "token_ids_column": "ids", "input_column": "n",
                                    "output_column": "out"}}
    result = runner.run(config)
    first, second = result.requests
    assert first.input_tokens == second.input_tokens == 100
    assert first.stages[1].transfer_ns == 10_000 + 100 * 131_072 // 50
    assert second.stages[1].transfer_ns == 10_000 + 36 * 131_072 // 50
    assert result.summary["kv_transfer_bytes"] == (100 + 36) * 131_072
    assert second.cached_tokens == 64  # the prefill client's hit; the decode client's is not counted twice
    off = copy.deepcopy(config)
    off["clients"][1]["scheduler"]["enable_prefix_caching"] = False
    assert runner.run(off).summary["kv_transfer_bytes"] == 200 * 131_072
