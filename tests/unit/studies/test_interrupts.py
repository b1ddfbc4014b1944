"""A held interrupt raises the flag the kernel stops at (hub/studies/interrupts.py)."""

from __future__ import annotations

from cosim.hub.sim.kernel import DONE, Kernel
from cosim.hub.studies.interrupts import RunStop, Stopped, held_between_events


def test_a_run_stop_from_an_event_stops_the_kernel_before_the_next_and_is_held() -> None:
    stop, kernel = RunStop(), Kernel()
    handled: list[int] = []

    def event(t: int) -> None:
        handled.append(t)
        if t == 1:
            stop.stop("enough")

    for t in range(5):
        kernel.call_at(t, DONE, event, t)
    with held_between_events(stop) as held:
        assert not held.flag.is_set()
        kernel.run(flag=held.flag)
    assert handled == [0, 1] and isinstance(held.interrupt, Stopped) and str(held.interrupt) == "enough"


def test_a_later_held_interrupt_keeps_the_first() -> None:
    with held_between_events() as held:
        first = KeyboardInterrupt()
        held.hold(first)
        held.hold(KeyboardInterrupt())
    assert held.interrupt is first and held.flag.is_set()
