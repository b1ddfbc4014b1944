"""The coordinator moves a request through its pipeline: events in order, routing, hand-over."""

from __future__ import annotations

import cosim
from cosim.hub.config.sections import LinkConfig
from cosim.hub.sim.coordinator import GAP_WEIGHT, MEDIAN_GAP_SHARE, Landings
from cosim.hub.sim.kernel import Kernel
from cosim.hub.sim.transfers import LinkTransfers
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


def test_a_decode_clients_arrival_hint_is_its_next_kv_transfer() -> None:
    landings = Landings()
    assert landings.next_at(0) is None  # nothing known yet: the session's own depth applies
    landings.started(0, 500)
    landings.started(100, 400)
    assert landings.next_at(100) == 400  # the first of those in flight to land
    assert landings.next_at(400) == 500
    # none in flight: the median of the gaps between transfers (ln 2 of 100 ns), but no sooner than one takes
    assert landings.next_at(500) == 500 + 300
    landings.started(1100, 1110)  # gaps 100 then 1000: their moving average is 280
    assert landings.next_at(1200) == 1200 + int(MEDIAN_GAP_SHARE * (100 + GAP_WEIGHT * 900))


def test_a_link_transfer_says_when_it_lands() -> None:
    kernel = Kernel()
    link = LinkTransfers(kernel, LinkConfig(bandwidth_gbps=10, latency_s=1e-6))
    landed: list[int] = []
    end = link.start("p", "d", 10_000, landed.append)
    kernel.run()
    assert end == kernel.now_ns == 1000 + 1000 and landed == [2000]
