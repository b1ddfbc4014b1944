"""The coordinator moves a request through its pipeline: events in order, routing, hand-over."""

from __future__ import annotations

from pathlib import Path

import cosim
from cosim.hub.config.loading import parse_config
from cosim.hub.config.sections import LinkConfig
from cosim.hub.sim.clients.llm import LLMClient
from cosim.hub.sim.coordinator import GAP_WEIGHT, MEDIAN_GAP_SHARE, Coordinator, Landings
from cosim.hub.sim.kernel import Kernel
from cosim.hub.sim.transfers import LinkTransfers
from cosim.hub.studies.runner import started_backends
from cosim.hub.studies.simulation import Simulation
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


def coordinator_of(raw: dict) -> tuple[Coordinator, list[LLMClient]]:
    """A simulation's coordinator with its requests scheduled, before anything runs."""
    config = parse_config(raw)
    with started_backends(config, ["lin"]) as backends:
        sim = Simulation(config, Path("."), backends)
        sim.coordinator.schedule_arrivals(*sim.workload())
        return sim.coordinator, list(sim.coordinator.clients)


def test_candidates_follow_the_clients_as_they_come_and_go() -> None:
    coordinator, (a, b, d) = coordinator_of(scenario(clients=[client("a"), client("b"), client("d", role="decode")]))
    assert coordinator.candidates("prefill", "m") == (a, b) and coordinator.candidates("decode", "m") == (a, b, d)
    assert coordinator.candidates("prefill", "other") == ()
    coordinator.unregister(a)  # an autoscaled replica draining
    assert coordinator.candidates("prefill", "m") == (b,) and coordinator.candidates("decode", "m") == (b, d)
    coordinator.register(a)  # back, listed last
    assert coordinator.candidates("prefill", "m") == (b, a)


def test_a_prefill_clients_arrival_hint_is_the_first_upcoming_arrival_routed_to_it() -> None:
    """Two idle clients under least_outstanding: the upcoming arrivals alternate between them, ``a`` first."""
    coordinator, (a, b) = coordinator_of(scenario(
        clients=[client("a"), client("b")], router={"policy": "least_outstanding"},
        workload={"requests": 4, "arrival": {"process": "poisson", "rate_per_s": 10},
                  "input_tokens": {"dist": "fixed", "value": 10}, "output_tokens": {"dist": "fixed", "value": 5}}))
    t0, t1, t2, t3 = (r.arrival_ns for r in coordinator.unfinished())
    assert 0 <= t0 < t1 < t2 < t3
    assert coordinator.next_arrival_at(a, t0 - 1) == t0 and coordinator.next_arrival_at(b, t0 - 1) == t1
    assert coordinator.next_arrival_at(a, t0) == t1  # an arrival at ``now`` is past
    assert coordinator.next_arrival_at(b, t1) == t3
    assert coordinator.next_arrival_at(b, t2) == t3  # one left, routed to a: the last upcoming
    assert coordinator.next_arrival_at(a, t3) is None


def test_an_arrival_hint_looks_eight_arrivals_ahead_and_guesses_where_the_router_cannot_tell() -> None:
    workload = {"requests": 12, "arrival": {"process": "poisson", "rate_per_s": 10},
                "input_tokens": {"dist": "fixed", "value": 10}, "output_tokens": {"dist": "fixed", "value": 5}}
    coordinator, (a, b) = coordinator_of(scenario(clients=[client("a"), client("b")],
                                                  router={"policy": "round_robin"}, workload=workload))
    times = [r.arrival_ns for r in coordinator.unfinished()]
    coordinator.unregister(b)  # draining: no arrival goes to it, so the last of the next eight is as near as any
    assert coordinator.next_arrival_at(b, times[0] - 1) == times[7]
    assert coordinator.next_arrival_at(b, times[8]) == times[11]  # fewer than eight left
    coordinator, (a, b) = coordinator_of(scenario(clients=[client("a"), client("b")],
                                                  router={"policy": "random"}, workload=workload))
    now = times[2] + 1  # a random router: the next arrival's wait times the two candidates
    assert coordinator.next_arrival_at(a, now) == now + (times[3] - now) * 2
