"""What the simulation asks of timing, as protocols: the seam between :mod:`cosim.hub.sim` and :mod:`cosim.hub.timing`.

The simulator decides what a step holds and what it does to the requests; how long it lasts, and how
cheaply that is found out, is the timing layer's business. The simulator sees only these protocols,
so it never imports the timing layer; the assembly (:mod:`cosim.hub.studies.simulation`) plugs in
:class:`cosim.hub.timing.step_timer.StepTimer` and :class:`cosim.hub.timing.cache.RuntimeSessionProxy`.

Both directions are here: a :class:`Stepper` (the client) holds what a step reads and writes, and
its :class:`StepClock` begins, times, ends and records each step, and decides how many are taken
without the kernel's heap. While a clock holds a decode run's steps unapplied, the client reads its scheduler
as an :class:`UnsettledScheduler` (counts, the queue, KV blocks), and the running sequences only
through :meth:`StepClock.settled`: a stale read is a type error.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import Protocol

from .frontend import FrontEnd
from .kernel import Kernel
from .records import ClientTimeline
from .scheduling import ScheduledBatch, Scheduler, Sequence, Signature
from .scheduling.lora import LoraSlots
from .scheduling.offload import OffloadTier
from .scheduling.speculative import SpecStats, Speculation

# A step whose end the kernel's heap handles: its batch, start and duration (ns).
Step = tuple[ScheduledBatch, int, int]


class Timed(Protocol):
    """A backend's answer for one step, as far as the simulation reads it."""

    @property
    def duration_ns(self) -> int: ...


class StepTimes(Protocol):
    """A runtime session: how long a step of given new and context tokens per sequence takes; on a
    miss of its timing cache, ``ahead(n)`` gives up to n more batches (their signatures) to time in
    the same call."""

    def step_time(self, new_tokens: Seq[int], context_tokens: Seq[int], *, now_ns: int,
                  ahead: Callable[[int], Seq[Signature]] | None = None) -> Timed: ...


class Settled(Protocol):
    """Records steps the timing layer applied in bulk: a decode run's sequences, its steps applied,
    their longest step and the last's end (each sequence sampled a token per step)."""

    def __call__(self, seqs: list[Sequence], steps: int, max_gap_ns: int, last_ns: int) -> None: ...


class KVCounts(Protocol):
    """A client's KV blocks as they may be read at any time: how many are in use (a decode run's
    step takes its blocks as it begins), their size. What the prefix cache holds lags while a run's
    steps are pending (their blocks are cached as they are applied): it is read settled."""

    @property
    def num_used(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def enable_prefix_caching(self) -> bool: ...


class UnsettledScheduler(Protocol):
    """A client's scheduler as it may be read at any time, a decode run's steps pending or not: its
    queue, how many sequences run, KV block counts, its parts. The running sequences' tokens and the
    prefix cache lag while a run's steps are pending; they are read from :meth:`StepClock.settled`
    (the :class:`Scheduler` itself)."""

    @property
    def waiting(self) -> Seq[Sequence]: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    @property
    def has_work(self) -> bool: ...

    @property
    def kv(self) -> KVCounts: ...

    @property
    def micro_batches(self) -> int: ...

    @property
    def hold_finished_kv(self) -> bool: ...

    @property
    def speculation(self) -> Speculation | None: ...

    @property
    def spec_stats(self) -> SpecStats | None: ...

    @property
    def lora(self) -> LoraSlots | None: ...

    @property
    def offload(self) -> OffloadTier | None: ...

    def add(self, seq: Sequence) -> None: ...

    def release(self, seq: Sequence) -> None: ...

    def next_load_ns(self) -> int | None: ...


class Stepper(Protocol):
    """A client whose steps a :class:`StepClock` takes (:class:`cosim.hub.sim.clients.llm.LLMClient`):
    the clock begins, times, ends and records its steps natively (core/src/stepping.rs) on what it
    reads here, and calls back only for what is rare or the client's own. It decides which steps'
    ends and wake-ups the kernel's heap handles and which it handles in place (:meth:`Kernel.advance`,
    with these labels)."""

    @property
    def kernel(self) -> Kernel: ...

    @property
    def timeline(self) -> ClientTimeline:
        """Where each step is recorded (its row, energy and token gaps)."""

    @property
    def wake_label(self) -> str: ...

    @property
    def done_label(self) -> str: ...

    busy: bool
    """A step (or, with micro-batches, the first pipeline stage) is in flight (the clock's flag)."""

    @property
    def busy_ns(self) -> int:
        """Time its devices were busy (counted on its timeline)."""

    @property
    def wake_pending(self) -> bool:
        """Its wake-up is scheduled (the clock's flag)."""

    @property
    def keep_itls(self) -> bool:
        """Each request's token gaps are kept (``RequestRecord.itl_ns``)."""

    @property
    def frontend(self) -> FrontEnd | None:
        """The API server in front, which every sampled token goes through (its ``deliver``)."""

    def start_micro_batch(self, now: int, duration: int) -> None:
        """A pipeline micro-batch's step began at ``now`` (its steps overlap): its first stage frees later."""

    def end_micro_batch(self) -> None:
        """A pipeline micro-batch's step ended."""

    def begin_decode_stage(self, seq: Sequence, now: int) -> None:
        """``seq``'s first token: its prefill stage here ends, its decode stage begins."""

    def hold(self, seq: Sequence, count: int) -> None:
        """Counts ``count`` more sequences of ``seq``'s request here (forks)."""

    def finish_stage(self, seq: Sequence, now: int) -> None:
        """``seq``'s stage here ended at ``now``: handed on."""

    def wake(self) -> None:
        """Asks for the next step at the current time, after the events already due then (its lock-step
        group's, if it has one; else :meth:`StepClock.wake`)."""

    def wake_for_loads(self) -> None:
        """Idle: wakes when KV being copied back from an offload tier is in."""


class StepClock(Protocol):
    """Forms one LLM client's steps, times and records them (:class:`cosim.hub.timing.step_timer.StepTimer`).

    The client's step is begun, timed, and ended at that time; the clock may apply steps of a
    decode run in bulk (reported through :class:`Settled`), never changing what they do. The
    scheduler's sequences are up to date only as :meth:`settled` returns them.
    """

    busy: bool
    """A step of its client's (or, with micro-batches, the first pipeline stage) is in flight."""

    @property
    def wake_pending(self) -> bool:
        """Its client's wake-up is scheduled."""

    def attach(self, *, kernel: Kernel, timeline: ClientTimeline, wake_label: str, done_label: str,
               keep_itls: bool) -> None:
        """Gives the clock what its step loop reads of its client at every step (the client's kernel,
        :attr:`Stepper.timeline`, labels and :attr:`Stepper.keep_itls`), once."""

    def wake(self, client: Stepper) -> None:
        """Schedules the client's wake-up at the current time, after the events already due then, unless
        it is busy or one is pending; the wake-up event and the step ends the heap handles are the
        clock's (``on_wake``, ``step_done``)."""

    def take_steps(self, client: Stepper) -> Step | None:
        """The client's wake-up: begins its next step and times it; while nothing else happens in the
        simulation before a step ends, ends it, wakes and takes the next in place (a decode run's in
        bulk where their timings are known). Returns the step whose end the heap handles, or None:
        the client is idle, or its wake-up is an event again."""

    def begin_step(self, client: Stepper) -> ScheduledBatch | None:
        """Begins the client's next step (its start recorded): its batch, or None when nothing can run
        or the client is busy."""

    def time_step(self, client: Stepper, batch: ScheduledBatch, now_ns: int, dp_rank_tokens: Seq[int] = ()) -> int:
        """How long the step of ``batch`` takes (its energy counted); ``dp_rank_tokens``: the tokens of
        every rank of its data-parallel lock-step group, if any."""

    def end_step(self, client: Stepper, batch: ScheduledBatch, start_ns: int) -> None:
        """The client's step begun at ``start_ns`` ends now: handed back, and what it did recorded."""

    def interrupt(self) -> None: ...

    def forget_forecast(self) -> None: ...

    def settled(self) -> Scheduler:
        """The scheduler with every step taken applied to its sequences (and recorded)."""


class MakeStepClock(Protocol):
    """Builds a client's :class:`StepClock` over its scheduler.

    Args:
        scheduler: the client's scheduler.
        settled: records a decode run's steps on the requests when they are applied.
        next_arrival_ns: when the next request may arrive at the client (a hint), or None.
        alone: the client steps on its own, not in a data-parallel lock-step group (whose step
            times depend on the other ranks' batches).
        overlapping: its steps overlap (pipeline micro-batches).
    """

    def __call__(self, *, scheduler: Scheduler, settled: Settled,
                 next_arrival_ns: Callable[[int], int | None] | None, alone: bool,
                 overlapping: bool) -> StepClock: ...
