"""A client's steps taken in place (core/src/stepping.rs, ``StepTimer.take_steps``): a lone client's step
ends and wake-ups are handled without the kernel's heap while nothing else comes first, logged as the
events the heap would have handled, and recorded as a step ended by the heap is
(tests/scenarios/test_lookahead.py compares whole runs with the heap's)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import cosim
from cosim.hub.sim.clients.llm import LLMClient
from cosim.hub.timing.step_timer import StepTimer
from tests.scenarios.helpers import client, scenario


class Built:
    """The LLM clients a run builds, and how many of each one's step ends the heap handled."""

    def __init__(self) -> None:
        self.clients: list[LLMClient] = []
        self.heap_ends: Counter[str] = Counter()


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Built:
    seen = Built()
    init, step_done = LLMClient.__init__, StepTimer.step_done

    def tracked(self: LLMClient, **kwargs: Any) -> None:
        init(self, **kwargs)
        seen.clients.append(self)

    def counted(self: StepTimer, client: LLMClient, *args: Any) -> None:
        seen.heap_ends[client.name] += 1
        step_done(self, client, *args)

    monkeypatch.setattr(LLMClient, "__init__", tracked)
    monkeypatch.setattr(StepTimer, "step_done", counted)
    return seen


def lone_request(output_tokens: int, **sections: Any) -> dict[str, Any]:
    return scenario(step_ns=1000, per_token_ns=1, workload={
        "requests": 1, "arrival": {"process": "constant"}, "input_tokens": {"dist": "fixed", "value": 100},
        "output_tokens": {"dist": "fixed", "value": output_tokens}}, **sections)


def test_a_lone_clients_steps_end_in_place_as_the_events_the_heap_would_handle(built: Built, tmp_path: Path) -> None:
    result = cosim.run(lone_request(40), output_dir=tmp_path, log_events=1000)
    (c0,) = built.clients
    steps = result.summary["clients"]["c0"]["steps"]
    labels = [label for _, label in result.events]
    assert steps == 40 and built.heap_ends["c0"] == 0  # nothing else ever comes first
    assert labels.count("step done c0") == steps
    # each step's end is followed by the wake-up for the next, at the same time
    ends = [i for i, label in enumerate(labels) if label == "step done c0"]
    assert all(labels[i + 1] == "wake c0" and result.events[i + 1][0] == result.events[i][0] for i in ends)
    # every step recorded: its devices' busy time, and the request's tokens
    assert c0.busy_ns == round(result.summary["clients"]["c0"]["busy_s"] * 1e9) and not c0.busy
    (request,) = result.requests
    assert request.generated_tokens == 40 and request.finish_ns == result.events[ends[-1]][0]


def test_a_step_that_ends_after_an_arrival_goes_through_the_heap(built: Built) -> None:
    raw = lone_request(40)
    raw["workload"].update(requests=2, arrival={"process": "uniform", "rate_per_s": 40_000})  # 25 us apart
    result = cosim.run(raw, log_events=1000)
    (c0,) = built.clients
    assert built.heap_ends["c0"] >= 1  # the step in flight when the second request arrives
    assert [label for _, label in result.events].count("step done c0") == result.summary["clients"]["c0"]["steps"]


def test_pipeline_micro_batches_step_through_the_heap(built: Built) -> None:
    pp2 = {**client(batching="mixed"), "hardware": {"device": "h", "count": 2, "pipeline_parallel": 2}}
    result = cosim.run(lone_request(10, clients=[pp2]))
    (c0,) = built.clients
    assert built.heap_ends["c0"] == result.summary["clients"]["c0"]["steps"] == 10 and not c0.busy
