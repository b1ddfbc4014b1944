"""Steps taken in place: a lone client's step ends and wake-ups handled without the kernel's heap.

A client's step ends at an event of the kernel's heap, and the client's wake-up for its next step is
another (:class:`cosim.hub.sim.clients.llm.LLMClient`). When nothing else in the simulation happens
before the step ends (its end is before :meth:`Kernel.peek`), its end and the wake-up after it are
the next events the heap would handle: :func:`take_steps` handles them in place, in the heap's order
(:meth:`Kernel.advance` counts and logs them as events), and goes on to the next step. The steps of a
decode run that end before anything else happens, and whose timings are cached, are taken in one go
(``run_ahead``: :meth:`cosim.hub.timing.step_timer.StepTimer.run_ahead`), without a batch each.

The client says what each step does (:class:`cosim.hub.sim.ports.Stepper`: begin, time, end, record);
this module decides only how many of them the heap sees. None of it changes a result:
``tests/scenarios/test_lookahead.py`` compares the events and outputs with the heap's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..sim.ports import Step, Stepper
from ..sim.power import StepJoules

# StepTimer.run_ahead: a decode run's steps from a start while each ends before a horizon.
RunAhead = Callable[[int, Callable[[], int]], Iterator[tuple[int, StepJoules]]]


def take_steps(client: Stepper, run_ahead: RunAhead, *, overlapping: bool) -> Step | None:
    """The client's wake-up (:meth:`cosim.hub.sim.ports.StepClock.take_steps`): its steps taken in
    place while each ends before anything else happens; the step whose end the heap must handle, or
    None (idle, or the wake-up after a step ended in place is an event again). ``overlapping``: the
    client's steps overlap (pipeline micro-batches), so each goes through the heap.

    NOTE: every step and wake-up handled here is the event the heap would handle next: a step's end
    is before :meth:`Kernel.peek`, and the wake-up after it at a time no pending event is due.
    """
    kernel = client.kernel
    while True:
        batch = client.begin_step()
        if batch is None:
            client.wake_for_loads()
            return None  # idle, or blocked (e.g. no KV blocks): a finishing stage elsewhere will wake it
        now = kernel.now_ns
        duration = client.time_step(batch, now)
        if overlapping or now + duration >= kernel.peek():
            return batch, now, duration
        kernel.advance(now + duration, client.done_label)
        client.end_step(batch, now)
        if kernel.now_ns >= kernel.peek():  # the step's end scheduled other events first (or a wake-up)
            client.wake()
            return None
        kernel.advance(kernel.now_ns, client.wake_label)
        _run_alone(client, run_ahead)


def _run_alone(client: Stepper, run_ahead: RunAhead) -> None:
    """Takes the decode run's steps that end before anything else happens in one go, each recorded
    as the client records a run's step, its end and the wake-up after it counted as the events
    they stand for."""
    kernel = client.kernel
    start = kernel.now_ns
    for duration, joules in run_ahead(start, kernel.peek):
        end = start + duration
        kernel.advance(end, client.done_label)
        client.record_run_step(start, end, joules)
        kernel.advance(end, client.wake_label)
        start = end
