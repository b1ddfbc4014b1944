"""The coordinator moves a request through its pipeline: events in order, routing, hand-over."""

from __future__ import annotations

import cosim
from tests.scenarios.helpers import client, scenario


def test_a_disaggregated_request_goes_prefill_transfer_decode_in_event_order() -> None:
    raw = scenario(clients=[client("p", role="prefill"), client("d", role="decode")],
                   workload={"requests": 1, "arrival": {"process": "constant"},
                             "input_tokens": {"dist": "fixed", "value": 100},
                             "output_tokens": {"dist": "fixed", "value": 3}},
                   network={"link": {"bandwidth_gbps": 1000, "latency_s": 1e-6}})
    result = cosim.run(raw, log_events=50)
    # A client wakes after each step to pick its next one, also when there is none.
    assert result.events == [
        (0, "arrival request 0"), (0, "wake p"), (1000, "step done p"), (1000, "wake p"),
        (15107, "transfer done d"), (15107, "wake p"), (15107, "wake d"), (16107, "step done d"),
        (16107, "wake d"), (17107, "step done d"), (17107, "wake d")]  # p freed the copied KV: it wakes
    (request,) = result.requests
    assert [(s.kind, s.client) for s in request.stages] == [("prefill", "p"), ("decode", "d")]
    # 100 tokens of Llama-3-8B KV (131,072 bytes each) at 1000 GB/s, after 1 us of latency
    assert request.stages[1].transfer_ns == 1000 + 100 * 131072 // 1000 == 14107


def test_a_prefill_client_keeps_the_kv_until_its_transfer_completes() -> None:
    raw = scenario(clients=[client("p", role="prefill", num_gpu_blocks=8), client("d", role="decode")],
                   workload={"requests": 2, "arrival": {"process": "constant"},
                             "input_tokens": {"dist": "fixed", "value": 100},
                             "output_tokens": {"dist": "fixed", "value": 3}},
                   network={"link": {"bandwidth_gbps": 1000, "latency_s": 1e-6}})
    first, second = cosim.run(raw).requests
    # 100 tokens take 7 of p's 8 blocks: the second prompt fits only once the first's KV reached d
    assert first.stages[0].end_ns == 1000 and second.stages[0].start_ns == 1000 + 14107


def test_stages_go_to_the_least_loaded_client_and_every_client_ends_empty() -> None:
    raw = scenario(clients=[client("a"), client("b"), client("c")], step_ns=1000,
                   workload={"requests": 6, "arrival": {"process": "constant"},
                             "input_tokens": {"dist": "fixed", "value": 10},
                             "output_tokens": {"dist": "fixed", "value": 50}},
                   router={"policy": "least_outstanding"})
    result = cosim.run(raw)
    assert [r.stages[0].client for r in result.requests] == ["a", "b", "c", "a", "b", "c"]
    assert all(r.generated_tokens == 50 for r in result.requests)
