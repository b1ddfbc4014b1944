"""The event kernel: deterministic order, no going back in time, labelled events."""

from __future__ import annotations

import pytest
from cosim_core import StopFlag

from cosim.hub.errors import HubError, ScenarioError
from cosim.hub.sim.kernel import ARRIVAL, DONE, MAX_SIM_NS, WAKE, Kernel
from cosim.hub.sim.records import RequestRecord


def test_events_run_by_time_then_priority_then_scheduling_order() -> None:
    kernel = Kernel()
    seen: list[str] = []
    kernel.call_at(5, WAKE, seen.append, "wake at 5")
    kernel.call_at(5, DONE, seen.append, "done at 5")
    kernel.call_at(5, ARRIVAL, seen.append, "arrival at 5")
    kernel.call_at(5, DONE, seen.append, "second done at 5")
    kernel.call_at(1, WAKE, seen.append, "wake at 1")
    kernel.run()
    assert seen == ["wake at 1", "done at 5", "second done at 5", "arrival at 5", "wake at 5"]
    assert kernel.now_ns == 5 and kernel.num_events == 5


def test_an_event_may_schedule_more_but_never_in_the_past() -> None:
    kernel = Kernel()
    times: list[int] = []

    def tick() -> None:
        times.append(kernel.now_ns)
        if kernel.now_ns < 30:
            kernel.call_at(kernel.now_ns + 10, DONE, tick)

    kernel.call_at(0, DONE, tick)
    kernel.run()
    assert times == [0, 10, 20, 30]
    with pytest.raises(HubError, match=r"event 'late' scheduled at 29 ns, before now \(30 ns\)"):
        kernel.call_at(29, DONE, tick, label="late")


def test_stop_ends_the_run_with_events_left() -> None:
    kernel = Kernel()
    for t in range(10):
        kernel.call_at(t, DONE, lambda: None)
    kernel.run(stop=lambda: kernel.now_ns >= 3)
    assert kernel.num_events == 4


def test_a_flag_set_by_an_event_stops_the_run_before_the_next_and_peek_says_so() -> None:
    kernel, flag = Kernel(), StopFlag()
    peeked: list[int] = []

    def third() -> None:
        flag.set()
        peeked.append(kernel.peek())  # the run stops now: nothing comes after now

    for t in range(10):
        kernel.call_at(t, DONE, third if t == 2 else lambda: None)
    kernel.run(flag=flag)
    assert flag.is_set() and kernel.num_events == 3 and peeked == [2]
    kernel.run()  # the flag is the run's: the next run goes on
    assert kernel.num_events == 10


def test_the_log_keeps_the_first_events_with_their_labels() -> None:
    kernel = Kernel(log_limit=2)
    request = RequestRecord(id=7, model="m", arrival_ns=3, input_tokens=1, output_tokens=1)
    kernel.call_at(3, ARRIVAL, lambda r: None, request, label="arrival")
    kernel.call_at(4, WAKE, lambda: None, label="wake c0")
    kernel.call_at(9, DONE, lambda: None, label="step done c0")
    kernel.run()
    assert kernel.log == [(3, "arrival request 7"), (4, "wake c0")]


def test_peek_says_when_the_next_event_comes_and_advance_handles_one_in_place() -> None:
    kernel = Kernel(log_limit=5)
    assert kernel.peek() == MAX_SIM_NS + 1  # nothing pending
    finished: list[int] = []
    peeked: list[int] = []

    def finish() -> None:
        peeked.append(kernel.peek())
        finished.append(kernel.now_ns)
        peeked.append(kernel.peek())  # the run stops now: nothing comes after now

    kernel.call_at(5, DONE, finish, label="finish")
    kernel.call_at(9, DONE, lambda: None, label="later")
    assert kernel.peek() == 5
    kernel.advance(3, "inline")  # an event its caller handled itself, before the next pending one
    assert (kernel.now_ns, kernel.num_events, kernel.log) == (3, 1, [(3, "inline")])
    kernel.run(stop=lambda: bool(finished))
    assert peeked == [9, 5] and kernel.num_events == 2 and kernel.peek() == 9


def test_an_event_past_the_int64_clock_is_the_scenarios_error() -> None:
    kernel = Kernel()
    with pytest.raises(ScenarioError, match=r"simulated time: event 'step done c0' would happen at 9\.223e\+09 s"):
        kernel.call_at(MAX_SIM_NS + 1, DONE, lambda: None, label="step done c0")
    kernel.call_at(MAX_SIM_NS, DONE, lambda: None)  # the last representable time is fine
    assert kernel.num_pending == 1
