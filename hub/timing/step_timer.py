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
- **lookahead** (:mod:`.forecast`): on a miss, the batches that will follow if
  no work arrives ride along in the same call. They come from the client's
  own scheduler policy run on a copy of its state, so there is one model of
  admission, preemption and KV growth; a wrong prediction costs backend work,
  never a different result. The forecast is kept until work arrives, so
  asking again continues it;
- **top-ups** (:meth:`StepTimer.top_up`): when another client of the session
  misses, this one's predictions ride along too, where they fall short;
- **decode runs** (:class:`~cosim.hub.sim.scheduling.DecodeRun`): steps certain to
  be the same sequences decoding skip the scheduler's per-step forming and
  updating; the scheduler applies them in bulk when anyone looks
  (:meth:`StepTimer.settle`). Those that end before anything else happens in
  the simulation, and whose timings are cached, are taken in one go
  (:meth:`StepTimer.run_ahead`), without a batch or an event each.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq

from ..sim.clients.drafter import Drafter
from ..sim.clients.host import HostTime
from ..sim.ports import Settled
from ..sim.power import StepEnergy, StepJoules
from ..sim.scheduling import DecodeRun, ScheduledBatch, Scheduler, Sequence, Signature, StepOutcome
from .cache import RuntimeSessionProxy
from .forecast import Forecast, predict

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
        self.name, self.scheduler, self.session, self.settled = name, scheduler, session, settled
        self.host_time, self.drafter = host_time, drafter
        self.collectives_ns, self.host_bandwidth_gbps = collectives_ns, host_bandwidth_gbps
        self.next_arrival_ns, self.energy = next_arrival_ns, energy
        self.max_lookahead, self.decode_runs = max_lookahead, decode_runs
        self._run: DecodeRun | None = None
        self._in_flight: ScheduledBatch | None = None
        self._last_duration_ns = 0
        self._steps_begun = 0
        self._predicted_through = 0  # the step (counted as _steps_begun) up to which batches were predicted
        self._forecast: Forecast | None = None  # kept until the scheduler changes other than by its steps
        self._forecast_origin = 0  # the step (counted as _steps_begun) in flight when it was made
        session.join(self)

    # -- stepping --------------------------------------------------------------
    def begin(self) -> ScheduledBatch | None:
        """The next step: a decode run's, else the scheduler's choice; None when nothing can run."""
        run = self._run
        if run is not None and run.steps_left > 0:
            batch = self.scheduler.run_step(run)
        else:
            self.settle()
            self._run = None
            if self.scheduler.waiting:
                # Forming the step may write queued sequences, which a forecast's copy shares until
                # it writes them itself (Scheduler.copy): a later prediction needs a fresh copy.
                self._forecast = None
            batch = self.scheduler.schedule()
            while not batch.seqs and batch.preempted:
                # A step that only preempted admits no one (as vLLM's); vLLM's engine schedules again at
                # once, and admits then. Idle here, no event would ever wake this client.
                again = self.scheduler.schedule()
                again.preempted[:0] = batch.preempted
                batch = again
            if not batch.seqs:
                return None
        self._in_flight = batch
        self._steps_begun += 1
        return batch

    @property
    def run_seqs(self) -> list[Sequence] | None:
        """The sequences of the decode run under way with steps left, if any."""
        run = self._run
        return run.seqs if run is not None and run.steps_left > 0 else None

    def in_run(self, batch: ScheduledBatch) -> bool:
        """Whether ``batch`` is a decode run's step (its effects are pending, see :meth:`settle`)."""
        return self._run is not None and batch.seqs is self._run.seqs

    def end(self, batch: ScheduledBatch, start_ns: int, end_ns: int) -> StepOutcome | None:
        """Hands a finished step back to the scheduler; None for a decode run's step (applied later)."""
        self._in_flight = None
        run = self._run
        if run is not None and batch.seqs is run.seqs:
            if run.steps_left:
                run.end_step(start_ns, end_ns)
                return None
            self.settle()  # the run's earlier steps; its last is handed back like any other
            self._run = None
        outcome = self.scheduler.update(batch)
        if self.decode_runs:
            self._run = self.scheduler.decode_run(batch, outcome)
        return outcome

    def interrupt(self) -> None:
        """Work arrived: the current decode run ends after its steps begun, and the steps after the
        one in flight may now differ from those predicted."""
        run = self._run
        if run is not None:
            del run.new_blocks[run.taken:]
        self._predicted_through = self._steps_begun
        self._forecast = None

    def forget_forecast(self) -> None:
        """The scheduler changed other than by its steps (KV released): predict from a fresh copy."""
        self._forecast = None

    def settle(self) -> None:
        """Applies a decode run's finished steps to its sequences, and has them recorded.

        Called before anyone reads sequence state; idempotent.
        """
        run = self._run
        if run is not None and run.taken:
            gap, last = run.max_gap_ns, run.last_ns
            steps = self.scheduler.settle(run)
            if steps:
                self.settled(run.seqs, steps, gap, last)

    # -- timing ----------------------------------------------------------------
    def duration_ns(self, batch: ScheduledBatch, now_ns: int,
                    dp_rank_tokens: Seq[int] = ()) -> tuple[int, StepJoules]:
        """How long ``batch`` takes, and the energy it uses (:class:`~cosim.hub.sim.power.StepEnergy`;
        the time added here to the backend's, host and swaps, counts at idle power); ``dp_rank_tokens``:
        the tokens of every rank of its data-parallel lock-step group (see :mod:`.lockstep`), if any."""
        ahead = (lambda depth: self._lookahead(batch, self._depth(now_ns, depth))) if self.max_lookahead else None
        timing = self.session.step_time(batch.num_new, batch.context, now_ns=now_ns, ahead=ahead, rider=self,
                                        dp_rank_tokens=dp_rank_tokens, fields=batch.fields)
        duration = timing.duration_ns
        if self.drafter is not None:
            duration += self.drafter.propose_ns(batch, now_ns)
        if self.collectives_ns is not None:
            # The network backend times the TP all-reduces in place of the runtime backend's estimate.
            duration += self.collectives_ns(batch.num_tokens) - timing.communication_ns
        if batch.swap_bytes:
            duration += int(batch.swap_bytes / self.host_bandwidth_gbps)
        if batch.lora is not None:
            duration += batch.lora.load_ns  # adapters copied into GPU slots before the forward pass
        if self.host_time is not None:
            duration += self.host_time.exposed_ns(batch.num_new, duration)
        self._last_duration_ns = duration
        if self.energy is None:
            return duration, StepJoules(timing.energy_j, 0.0, reported=timing.energy_j is not None)
        return duration, self.energy.step(timing, duration, batch.num_new, batch.context)

    def run_ahead(self, start_ns: int, horizon_ns: int,
                  stopping: Callable[[], bool]) -> list[tuple[int, StepJoules, int]]:
        """Takes the decode run's next steps back to back from ``start_ns``, each as :meth:`begin`,
        :meth:`duration_ns` and :meth:`end` take it, without forming its batch: while each ends
        before ``horizon_ns`` (the next event anywhere) and the run is not ``stopping()``, its
        timing is cached, and it is not the run's last (handed back like any other). Returns each
        step's duration, energy and the KV blocks in use, for the client to record.

        Only for plain decode runs (no drafter, LoRA adapters or collectives timed by the network
        backend); none is taken otherwise.
        """
        run, scheduler, session = self._run, self.scheduler, self.session
        if (run is None or self.drafter is not None or run.lora is not None or self.collectives_ns is not None
                or scheduler.has_retiring):
            return []
        host, energy, kv = self.host_time, self.energy, scheduler.kv
        ones, contexts = tuple(run.ones), run.contexts
        steps: list[tuple[int, StepJoules, int]] = []
        while run.steps_left > 1 and not stopping():
            done = run.done
            context = [c + done for c in contexts]  # as run.step()
            timing = session.peek(session.key(ones, context))
            if timing is None:
                break  # the backend is asked, with lookahead, by the step taken one by one
            duration = timing.duration_ns
            if host is not None:
                duration += host.exposed_ns(ones, duration)
            end_ns = start_ns + duration
            if end_ns >= horizon_ns:
                break
            session.count_hit(timing, self)
            scheduler.take_run_step(run)
            run.end_step(start_ns, end_ns)
            self._steps_begun += 1
            self._last_duration_ns = duration
            joules = StepJoules(timing.energy_j, 0.0, reported=timing.energy_j is not None) if energy is None \
                else energy.step(timing, duration, ones, context)
            steps.append((duration, joules, kv.num_used))
            start_ns = end_ns
        return steps

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
        """The batches after ``batch`` (in flight): the kept forecast's where it holds, else a new one's."""
        forecast, step = self._forecast, self._steps_begun - self._forecast_origin
        batches = forecast.after(step, depth, batch) if forecast is not None else None
        if batches is None or (forecast is not None and forecast.num_steps > self.MAX_FORECAST_STEPS):
            self.settle()  # the copy is taken from the sequences' state
            forecast = self._forecast = Forecast(self.scheduler, batch)
            self._forecast_origin = self._steps_begun
            batches = forecast.after(0, depth, batch)
            assert batches is not None  # its origin is the step in flight
        self._predicted_through = self._steps_begun + len(batches)
        return batches

    def _depth(self, now: int, depth: int) -> int:
        """How many batches to predict: about the steps until the next request may arrive here,
        plus two (step times drift), else ``depth`` (the session's, from how many predictions were
        used lately). Only a hint: predictions are exact or unused. Not while requests wait: an
        arrival then joins the queue's tail, which the predicted steps do not reach.
        """
        arrival = self.next_arrival_ns(now) if self.next_arrival_ns and not self.scheduler.waiting else None
        if arrival is None or self._last_duration_ns <= 0:
            return depth
        return max(2, min(self.max_lookahead, -(-(arrival - now) // self._last_duration_ns) + 2))
