"""Steps taken in place (hub/timing/in_place.py): a lone client's step ends and wake-ups handled without
the heap while nothing else comes first, logged as the events the heap would have handled."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from cosim.hub.sim.kernel import WAKE, Kernel
from cosim.hub.sim.power import StepJoules
from cosim.hub.sim.scheduling import ScheduledBatch
from cosim.hub.timing.in_place import take_steps


class FakeClient:
    """A client of steps of ``duration`` ns each, ``steps`` of them; records what the clock does."""

    def __init__(self, kernel: Kernel, *, steps: int, duration: int, wakes_at_end: int = -1) -> None:
        self.kernel, self.wake_label, self.done_label = kernel, "wake c", "step done c"
        self.steps_left, self.duration, self.wakes_at_end = steps, duration, wakes_at_end
        self.ended: list[tuple[int, int]] = []  # (start, end) of each step ended
        self.run_steps: list[tuple[int, int, StepJoules | None]] = []
        self.woken = self.waits_for_loads = 0

    def begin_step(self) -> ScheduledBatch | None:
        if not self.steps_left:
            return None
        self.steps_left -= 1
        return ScheduledBatch()

    def time_step(self, batch: ScheduledBatch, now_ns: int, dp_rank_tokens: Sequence[int] = ()) -> int:
        return self.duration

    def end_step(self, batch: ScheduledBatch, start_ns: int) -> None:
        self.ended.append((start_ns, self.kernel.now_ns))
        if self.kernel.now_ns == self.wakes_at_end:  # its end hands a stage on: an event now
            self.kernel.call_at(self.kernel.now_ns, WAKE, lambda: None, label="elsewhere")

    def record_run_step(self, start_ns: int, end_ns: int, joules: StepJoules | None = None) -> None:
        self.run_steps.append((start_ns, end_ns, joules))

    def wake(self) -> None:
        self.woken += 1

    def wake_for_loads(self) -> None:
        self.waits_for_loads += 1


def no_run(start_ns: int, horizon_ns: Callable[[], int]) -> Iterator[tuple[int, StepJoules]]:
    return iter(())


def test_steps_before_the_next_event_end_in_place_and_the_first_after_goes_to_the_heap() -> None:
    kernel = Kernel(log_limit=100)
    kernel.call_at(100, WAKE, lambda: None, label="arrival")
    client = FakeClient(kernel, steps=5, duration=30)
    step = take_steps(client, no_run, overlapping=False)
    assert step is not None and step[1:] == (90, 30)  # 90 + 30 >= 100: the heap handles its end
    assert client.ended == [(0, 30), (30, 60), (60, 90)]
    assert kernel.log == [(30, "step done c"), (30, "wake c"), (60, "step done c"), (60, "wake c"),
                          (90, "step done c"), (90, "wake c")]
    assert kernel.num_events == 6 and kernel.now_ns == 90 and client.woken == 0


def test_a_decode_run_in_bulk_is_recorded_with_its_energy_between_its_events() -> None:
    kernel = Kernel(log_limit=100)
    kernel.call_at(1000, WAKE, lambda: None, label="arrival")
    joules = StepJoules(2.0, 0.5)

    def run_ahead(start_ns: int, horizon_ns: Callable[[], int]) -> Iterator[tuple[int, StepJoules]]:
        while start_ns + 40 < horizon_ns() and start_ns < 100:
            yield 40, joules
            start_ns += 40

    client = FakeClient(kernel, steps=2, duration=30)
    take_steps(client, run_ahead, overlapping=False)
    # the first step ends at 30; the run takes 30-70, 70-110; the second step begins at 110
    assert client.ended == [(0, 30), (110, 140)]
    assert client.run_steps == [(30, 70, joules), (70, 110, joules)]
    assert kernel.log[:6] == [(30, "step done c"), (30, "wake c"), (70, "step done c"), (70, "wake c"),
                              (110, "step done c"), (110, "wake c")]


def test_an_event_due_at_a_step_end_sends_the_wake_up_to_the_heap() -> None:
    kernel = Kernel()
    kernel.call_at(100, WAKE, lambda: None)
    client = FakeClient(kernel, steps=5, duration=30, wakes_at_end=60)
    assert take_steps(client, no_run, overlapping=False) is None
    assert client.ended == [(0, 30), (30, 60)] and client.woken == 1 and kernel.now_ns == 60


def test_overlapping_steps_and_idle_clients_use_the_heap() -> None:
    kernel = Kernel()
    client = FakeClient(kernel, steps=2, duration=30)
    step = take_steps(client, no_run, overlapping=True)
    assert step is not None and step[1:] == (0, 30) and not client.ended and kernel.num_events == 0
    idle = FakeClient(kernel, steps=0, duration=30)
    assert take_steps(idle, no_run, overlapping=False) is None and idle.waits_for_loads == 1
