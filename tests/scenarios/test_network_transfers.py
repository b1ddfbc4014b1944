"""KV transfers between prefill and decode clients go through the network backend, in both modes."""

from __future__ import annotations

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
