"""How long a client's step takes, and the devices that make asking cheap.

A step's time is the runtime backend's answer for its batch signature (new
and context tokens per sequence), with the network backend's collectives in
place of the backend's own estimate where one times them, plus the host copy
of any swapped KV, plus the host time the engine loop exposes (:mod:`.host`,
a pure function of the batch and that time). The rest of this module changes
how often a backend is asked, never the answer:

- **timing cache** (:class:`~cosim.hub.timing.cache.RuntimeSessionProxy`):
  a batch signature timed once is never asked again; clients whose sessions
  are identical share one;
- **lookahead** (``cosim_core.Forecast``, core/src/forecast.rs): on a miss, the batches that will follow if
  no work arrives ride along in the same call. They come from the client's
  own scheduler policy run on a copy of its state, so there is one model of
  admission, preemption and KV growth; a wrong prediction costs backend work,
  never a different result. The forecast is kept until work arrives, so
  asking again continues it;
- **top-ups** (:meth:`StepTimer.top_up`): when another client of the session
  misses, this one's predictions ride along too, where they fall short;
- **drafts ahead**: a speculative drafter model's forwards are timed in its own
  session; on a miss there, the step's later forwards and those of the
  predicted steps (the same forecast's) ride along in one call;
- **decode runs** (``cosim_core.DecodeRun``, core/src/runs.rs): steps certain to
  be the same sequences decoding skip the scheduler's per-step forming and
  updating; the scheduler applies them in bulk when anyone looks
  (:meth:`StepTimer.settled`);
- **steps in place** (:mod:`.in_place`, :meth:`StepTimer.take_steps`): a lone
  client's step ends and wake-ups that come before anything else in the
  simulation are handled without the kernel's heap, and a decode run's steps
  whose timings are cached are taken in one go (:meth:`StepTimer.run_ahead`),
  without a batch or an event each.

Every step, formed or a decode run's, taken one by one or in one go, is timed
by one formula: :meth:`StepTimer.step_ns`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from collections.abc import Sequence as Seq

from cosim_core import DecodeRun, Forecast, predict

from ..sim.clients.drafter import Drafter
from ..sim.clients.host import HostTime
from ..sim.ports import Settled, Step, Stepper
from ..sim.power import StepEnergy, StepJoules
from ..sim.scheduling import ScheduledBatch, Scheduler, Signature, StepOutcome
from .cache import RuntimeSessionProxy, Timing
from .in_place import take_steps

__all__ = ["StepTimer", "predict"]


class StepTimer:
    """Steps one client's scheduler and times each step (see the module docstring).

    Args:
        name: the client's name (calls are made for it).
        scheduler: the client's scheduler.
        session: the runtime session timing its steps.
        settled: records a decode run's steps on the requests when they are applied.
        collectives_ns: the network backend's time of a step's collectives, by its tokens; None:
            the runtime backend's own estimate stands.
        host_bandwidth_gbps: device-host bandwidth for swapped KV.
        host_time: the host time each step exposes (:mod:`.host`); None: none.
        drafter: the speculative drafter whose proposals each step adds (:mod:`.drafter`); None: none.
        next_arrival_ns: when the next request may arrive here (a lookahead hint), or None.
        energy: how much energy each step uses (:mod:`cosim.hub.sim.power`); None: only what the
            backend reports.
        max_lookahead: most batches predicted per call (0: none).
        decode_runs: take decode runs in bulk; off, every step is formed and updated one by one
            (what the byte-identity tests compare against).
        alone: the client steps on its own; in a data-parallel lock-step group a step's time depends
            on the other ranks' batches, unknown ahead, so nothing is predicted.
        overlapping: the client's steps overlap (pipeline micro-batches): neither predictions nor
            decode runs apply.
    """

    # A forecast longer than this is made again from the step in flight (bounds its memory).
    MAX_FORECAST_STEPS = 1024

    def __init__(self, *, name: str, scheduler: Scheduler, session: RuntimeSessionProxy, settled: Settled,
                 collectives_ns: Callable[[int], int] | None = None, host_bandwidth_gbps: float = 25.0,
                 next_arrival_ns: Callable[[int], int | None] | None = None, energy: StepEnergy | None = None,
                 max_lookahead: int = 256, decode_runs: bool = True, host_time: HostTime | None = None,
                 drafter: Drafter | None = None, alone: bool = True, overlapping: bool = False) -> None:
        if not alone or overlapping:
            max_lookahead = 0
        if overlapping:
            decode_runs = False
        self.name, self.scheduler, self.session, self.on_settled = name, scheduler, session, settled
        self.host_time, self.drafter = host_time, drafter
        self.collectives_ns, self.host_bandwidth_gbps = collectives_ns, host_bandwidth_gbps
        self.next_arrival_ns, self.energy = next_arrival_ns, energy
        self.max_lookahead, self.decode_runs = max_lookahead, decode_runs
        self.overlapping = overlapping
        self._run: DecodeRun | None = None
        self._in_flight: ScheduledBatch | None = None
        self._last_duration_ns = 0
        self._steps_begun = 0
        self._predicted_through = 0  # the step (counted as _steps_begun) up to which batches were predicted
        self._forecast: Forecast | None = None  # kept until the scheduler changes other than by its steps
        self._forecast_origin = 0  # the step (counted as _steps_begun) in flight when it was made
        session.join(self)

    # -- stepping --------------------------------------------------------------
    def take_steps(self, client: Stepper) -> Step | None:
        """The client's wake-up: its steps taken in place while nothing else comes first
        (:func:`.in_place.take_steps`); the step whose end the heap handles, or None."""
        return take_steps(client, self.run_ahead, overlapping=self.overlapping)

    def begin(self) -> ScheduledBatch | None:
        """The next step: a decode run's, else the scheduler's choice; None when nothing can run."""
        run = self._run
        if run is not None and run.steps_left > 0:
            run.begin()
            batch = run.step()
        else:
            self._settle()
            self._run = None
            if self.scheduler.num_waiting:
                # Forming the step may write queued sequences, which a forecast's copy shares until
                # it writes them itself (Scheduler.copy): a later prediction needs a fresh copy.
                self._forecast = None
            batch = self.scheduler.schedule()
            while not batch.seqs and batch.preempted:
                # A step that only preempted admits no one (as vLLM's); vLLM's engine schedules again at
                # once, and admits then. Idle here, no event would ever wake this client.
                again = self.scheduler.schedule()
                again.preempted = batch.preempted + again.preempted
                batch = again
            if not batch.seqs:
                return None
        self._in_flight = batch
        self._steps_begun += 1
        return batch

    def in_run(self, batch: ScheduledBatch) -> bool:
        """Whether ``batch`` is a decode run's step (its effects are pending, see :meth:`settled`)."""
        return self._run is not None and batch.seqs is self._run.seqs

    @property
    def run_size(self) -> tuple[int, int]:
        """The decode run's sequences and requests (parallel paths of one count once)."""
        run = self._run
        assert run is not None, "asked while a decode run's step ends"
        return len(run.seqs), run.num_requests

    def end(self, batch: ScheduledBatch, start_ns: int, end_ns: int) -> StepOutcome | None:
        """Hands a finished step back to the scheduler; None for a decode run's step (applied later)."""
        self._in_flight = None
        run = self._run
        if run is not None and batch.seqs is run.seqs:
            if run.steps_left:
                run.end_step(start_ns, end_ns)
                return None
            self._settle()  # the run's earlier steps; its last is handed back like any other
            self._run = None
        outcome = self.scheduler.update(batch)
        if self.decode_runs:
            self._run = DecodeRun.start(self.scheduler, batch, outcome)
        return outcome

    def interrupt(self) -> None:
        """Work arrived: the current decode run ends after its steps begun, and the steps after the
        one in flight may now differ from those predicted."""
        if self._run is not None:
            self._run.cut()
        self._predicted_through = self._steps_begun
        self._forecast = None

    def forget_forecast(self) -> None:
        """The scheduler changed other than by its steps (KV released): predict from a fresh copy."""
        self._forecast = None

    def settled(self) -> Scheduler:
        """The scheduler, every step taken so far applied to its sequences and recorded on the
        requests (a decode run's pending steps): the one view of sequence state to read."""
        self._settle()
        return self.scheduler

    def _settle(self) -> None:
        """Applies a decode run's finished steps to its sequences, and has them recorded; idempotent."""
        run = self._run
        if run is not None and run.taken:
            gap, last = run.max_gap_ns, run.last_ns
            steps = run.settle()
            if steps:
                self.on_settled(run.seqs, steps, gap, last)

    # -- timing ----------------------------------------------------------------
    def duration_ns(self, batch: ScheduledBatch, now_ns: int,
                    dp_rank_tokens: Seq[int] = ()) -> tuple[int, StepJoules]:
        """How long ``batch`` takes, and the energy it uses (:class:`~cosim.hub.sim.power.StepEnergy`;
        the time added here to the backend's, host and swaps, counts at idle power); ``dp_rank_tokens``:
        the tokens of every rank of its data-parallel lock-step group (see :mod:`.lockstep`), if any."""
        ahead = (lambda depth: self._lookahead(batch, self._depth(now_ns, depth))) if self.max_lookahead else None
        timing = self.session.time_batch(batch, now_ns, ahead, self, dp_rank_tokens)
        added_ns = int(batch.swap_bytes / self.host_bandwidth_gbps) if batch.swap_bytes else 0
        if self.drafter is not None:
            drafts = (lambda depth: self._drafts_ahead(batch, now_ns, depth)) if self.max_lookahead else None
            added_ns += self.drafter.propose_ns(batch, now_ns, drafts)
        if batch.lora is not None:
            added_ns += batch.lora.load_ns  # adapters copied into GPU slots before the forward pass
        duration = self._last_duration_ns = self.step_ns(timing, batch.num_new, added_ns)
        return duration, self._joules(timing, duration, batch.num_new, batch.context)

    def step_ns(self, timing: Timing, num_new: Seq[int], added_ns: int = 0) -> int:
        """How long a step takes: the formula for every step applied, one by one or in a decode run.

        The runtime backend's time (``timing``), with the network backend's collectives in place of
        the backend's own estimate where one times them, plus what the batch does before its forward
        pass (``added_ns``: the drafter's proposals, swapped KV copied back, LoRA adapters loaded; a
        decode run's steps do none of it), plus the host time the engine loop exposes.
        """
        duration = timing.duration_ns + added_ns
        if self.collectives_ns is not None:
            # The network backend times the TP all-reduces in place of the runtime backend's estimate.
            duration += self.collectives_ns(sum(num_new)) - timing.communication_ns
        if self.host_time is not None:
            duration += self.host_time.exposed_ns(num_new, duration)
        return duration

    def _joules(self, timing: Timing, duration_ns: int, num_new: Seq[int], context: Seq[int]) -> StepJoules:
        """The energy of a step of ``duration_ns`` (:class:`~cosim.hub.sim.power.StepEnergy`; the time
        added to the backend's counts at idle power), else what the backend reports."""
        if self.energy is None:
            return StepJoules(timing.energy_j, 0.0, reported=timing.energy_j is not None)
        return self.energy.step(timing, duration_ns, num_new, context)

    def run_ahead(self, start_ns: int, horizon_ns: Callable[[], int]) -> Iterator[tuple[int, StepJoules]]:
        """Takes the decode run's next steps back to back from ``start_ns``, each as :meth:`begin`,
        :meth:`duration_ns` and :meth:`end` take it, without forming its batch, while: it ends
        before ``horizon_ns()`` (when anything else next happens in the simulation), its timing is
        cached, and it is not the run's last (handed back like any other). Yields each step's
        duration and energy once it is taken, for the client to record.
        """
        run, session = self._run, self.session
        if run is None:
            return
        ones = run.ones
        while run.steps_left > 1:
            timing = session.peek_run(run)  # the step's batch as run.step() would form it
            if timing is None:
                break  # the backend is asked, with lookahead, by the step taken one by one
            context = run.next_context() if self.energy is not None else ()  # only the energy model reads it
            duration = self.step_ns(timing, ones)
            end_ns = start_ns + duration
            if end_ns >= horizon_ns():
                break
            session.count_hit(timing, self)
            run.begin()
            run.end_step(start_ns, end_ns)
            self._steps_begun += 1
            self._last_duration_ns = duration
            yield duration, self._joules(timing, duration, ones, context)
            start_ns = end_ns

    def top_up(self, now_ns: int, depth: int) -> Seq[Signature]:
        """The batches after the step in flight, when those predicted so far fall short of the
        lookahead horizon; the session asks when another client sharing it makes a call anyway,
        so that this client's next miss, and its round trip, mostly never come."""
        batch = self._in_flight
        if batch is None or not self.max_lookahead:
            return []
        depth = self._depth(now_ns, depth)
        if self._predicted_through - self._steps_begun >= depth:
            return []
        return self._lookahead(batch, depth)

    def _lookahead(self, batch: ScheduledBatch, depth: int) -> list[Signature]:
        """The batches after ``batch`` (in flight), as :meth:`_predicted` gives them."""
        _, _, batches = self._predicted(batch, depth)
        self._predicted_through = self._steps_begun + len(batches)
        return batches

    def _drafts_ahead(self, batch: ScheduledBatch, now_ns: int, depth: int) -> list[Signature]:
        """The drafter's forwards after the steps that follow ``batch`` (in flight): ``depth`` (the
        drafter session's hint) counts forwards, ``k`` a step."""
        assert self.drafter is not None
        steps = self._depth(now_ns, -(-depth // self.drafter.k))
        forecast, step, batches = self._predicted(batch, steps)
        return forecast.drafts(step, len(batches))

    def _predicted(self, batch: ScheduledBatch, depth: int) -> tuple[Forecast, int, list[Signature]]:
        """Up to ``depth`` batches after ``batch`` (in flight): the kept forecast's where it holds,
        else a new one's; with the forecast and the step in flight's number in it."""
        forecast, step = self._forecast, self._steps_begun - self._forecast_origin
        batches = forecast.after(step, depth, batch) if forecast is not None else None
        if forecast is None or batches is None or forecast.num_steps > self.MAX_FORECAST_STEPS:
            self._settle()  # the copy is taken from the sequences' state
            drafter = self.drafter
            forecast = self._forecast = Forecast(self.scheduler, batch, drafter.forwards
                                                 if drafter is not None and drafter.session is not None else None)
            self._forecast_origin, step = self._steps_begun, 0
            batches = forecast.after(0, depth, batch)
            assert batches is not None  # its origin is the step in flight
        return forecast, step, batches

    def _depth(self, now: int, depth: int) -> int:
        """How many batches to predict: about the steps until the next request may arrive here,
        plus two (step times drift), else ``depth`` (the session's, from how many predictions were
        used lately). Only a hint: predictions are exact or unused. Not while requests wait: an
        arrival then joins the queue's tail, which the predicted steps do not reach.
        """
        arrival = self.next_arrival_ns(now) if self.next_arrival_ns and not self.scheduler.num_waiting else None
        if arrival is None or self._last_duration_ns <= 0:
            return depth
        return max(2, min(self.max_lookahead, -(-(arrival - now) // self._last_duration_ns) + 2))
