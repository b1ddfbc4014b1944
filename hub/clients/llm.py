"""An LLM client: a scheduler and a cluster timed by a runtime backend.

The client runs one step at a time. At a wake-up it asks its scheduler for
the next step, asks its timing source how long the step takes, and schedules
the step's end. At the end it advances every scheduled sequence, records
tokens, and hands finished stages back to the coordinator.

Decode runs: once every running sequence is decoding and nothing can join,
each following step is the same sequences with contexts one longer, until
one would finish or they would outgrow the free KV blocks. The client then
skips the scheduler and the per-sequence updates, counts the steps, and
applies them to the sequences in bulk (:meth:`LLMClient.settle`) when the
run ends or someone looks. Every step is still an event, timed and
recorded, so results are byte-identical to stepping one by one.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence as Seq

from ..kernel import DONE, WAKE, Kernel
from ..pipelines import decode_kind
from ..records import ClientInfo, ClientTimeline, StageRecord
from ..scheduling import BlockManager, Scheduler, Sequence, Signature, Step, blocks_for


class TimingSource(Protocol):
    """Anything that times a step from its token arrays (the backend proxy)."""

    def step_time(self, new_tokens: Seq[int], context_tokens: Seq[int], *, now_ns: int,
                  ahead: Callable[[int], Seq[Signature]] | None = None, rider: LLMClient | None = None
                  ) -> "TimingLike": ...


class TimingLike(Protocol):
    duration_ns: int
    communication_ns: int
    energy_j: float


class DecodeRun:
    """Steps of one unchanged decode batch whose effects on the sequences are pending.

    Attributes:
        seqs: the batch (the scheduler's running list at the start).
        contexts: each sequence's computed tokens when the pending steps began.
        new_blocks: KV blocks the batch grows into at each step of the run, in order.
        taken: steps begun so far (their blocks taken).
        done: steps finished and not yet applied to the sequences.
        max_gap_ns: longest of those steps (each sequence's gap between tokens).
        last_ns: when the last of them ended.
    """

    __slots__ = ("seqs", "ones", "contexts", "new_blocks", "taken", "done", "max_gap_ns", "last_ns")

    def __init__(self, seqs: list[Sequence], new_blocks: list[int]) -> None:
        self.seqs, self.new_blocks = seqs, new_blocks
        self.ones = [1] * len(seqs)
        self.contexts = [seq.num_computed for seq in seqs]
        self.taken = self.done = self.max_gap_ns = self.last_ns = 0

    @property
    def steps_left(self) -> int:
        return len(self.new_blocks) - self.taken

    def begin_step(self, kv: BlockManager) -> Step:
        """The run's next step; takes the blocks it grows into, as the scheduler would."""
        kv.take_free(self.new_blocks[self.taken])
        self.taken += 1
        k = self.done
        return Step(seqs=self.seqs, num_new=self.ones, context=[c + k for c in self.contexts],
                    num_tokens=len(self.seqs), prefill_tokens=0)

    def end_step(self, start_ns: int, end_ns: int) -> None:
        self.done += 1
        self.max_gap_ns = max(self.max_gap_ns, end_ns - start_ns)
        self.last_ns = end_ns


class LLMClient:
    """One serving instance.

    Args:
        info: static facts for reports.
        kernel: the event kernel.
        scheduler: batching and KV state.
        timing: where step durations come from.
        on_stage_done: called with each sequence whose stage finished.
        serves: stage kinds this client serves (``prefill``, ``decode``).
        host_bandwidth_gbps: device-host bandwidth for swapped KV.
        max_lookahead: most future decode batches predicted per step (0: none).
        decode_runs: advance decode runs in bulk (module docstring); off, every step updates
            every sequence, which the byte-identical test compares against.
    """

    def __init__(self, *, info: ClientInfo, kernel: Kernel, scheduler: Scheduler, timing: TimingSource,
                 on_stage_done: Callable[[Sequence, int], None], serves: frozenset[str],
                 host_bandwidth_gbps: float = 25.0, max_lookahead: int = 256, decode_runs: bool = True) -> None:
        self.info, self.name = info, info.name
        self.kernel, self.scheduler, self.timing = kernel, scheduler, timing
        self.on_stage_done = on_stage_done
        self.serves = serves
        self.host_bandwidth_gbps = host_bandwidth_gbps
        self.max_lookahead = max_lookahead
        self.decode_runs = decode_runs
        self._run: DecodeRun | None = None
        self.collectives_ns: Callable[[int], int] | None = None  # set when the network backend times them
        # Lookahead hint: when the next request may arrive here (set by the coordinator).
        self.next_arrival_ns: Callable[[int], int | None] = lambda now: None
        self._last_duration_ns = 0
        self.timeline = ClientTimeline()
        self.busy = False
        self._wake_pending = False
        self._next_order = 0
        self.busy_ns = 0
        self.outstanding = 0  # stages routed here and not finished (router load)
        self.outstanding_input_tokens = 0
        self._step: Step | None = None  # the step in flight while busy
        self._steps_begun = 0
        self._predicted_through = 0  # the step (counted as _steps_begun) up to which batches were predicted

    # -- work arriving ---------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        """Queues a sequence and wakes the client if it is idle."""
        seq.order = self._next_order
        self._next_order += 1
        self.scheduler.enqueue(seq)
        self._predicted_through = self._steps_begun  # the steps after this one may now admit it
        self.wake()

    def wake(self) -> None:
        """Asks for a scheduling decision at the current time, after same-time events."""
        if not self.busy and not self._wake_pending:
            self._wake_pending = True
            self.kernel.call_at(self.kernel.now_ns, WAKE, self._on_wake)

    # -- stepping --------------------------------------------------------
    def _on_wake(self) -> None:
        self._wake_pending = False
        if self.busy or not self.scheduler.has_work:
            return
        run = self._run
        in_run = run is not None and run.steps_left > 0 and not self.scheduler.may_admit
        if in_run:
            step = run.begin_step(self.scheduler.kv)
        else:
            self.settle()
            self._run = None
            step = self.scheduler.schedule()
            if not step.seqs:
                return  # blocked (e.g. no KV blocks); a finishing stage elsewhere will wake us
        now = self.kernel.now_ns
        self._step = step
        self._steps_begun += 1
        ahead = (lambda depth: self._lookahead(step, self._lookahead_depth(now, depth))) if self.max_lookahead else None
        timing = self.timing.step_time(step.num_new, step.context, now_ns=now, ahead=ahead, rider=self)
        duration = timing.duration_ns
        if self.collectives_ns is not None:
            # The network backend times the TP all-reduces in place of the runtime backend's estimate.
            duration += self.collectives_ns(step.num_tokens) - timing.communication_ns
        if step.swap_bytes:
            duration += int(step.swap_bytes / self.host_bandwidth_gbps)
        self.timeline.energy_j += timing.energy_j
        if not in_run:  # a run's sequences have all started
            for seq in step.seqs:
                if seq.stage.start_ns < 0:
                    seq.stage.start_ns = now
        self.busy = True
        self._last_duration_ns = duration
        self.kernel.call_at(now + duration, DONE, self._on_step_done, step, now)

    def _lookahead(self, step: Step, depth: int) -> list[Signature]:
        self.settle()  # the scheduler predicts from the sequences' state
        batches = self.scheduler.lookahead(step, depth)
        self._predicted_through = self._steps_begun + len(batches)
        return batches

    def top_up(self, now_ns: int, depth: int) -> list[Signature]:
        """The batches after the step in flight, when those predicted so far fall short of the
        lookahead horizon; the timing source asks when another client sharing the session makes
        a call anyway, so that this client's next miss, and its round trip, mostly never come."""
        step = self._step
        if not self.busy or step is None or not self.max_lookahead:
            return []
        depth = self._lookahead_depth(now_ns, depth)
        if self._predicted_through - self._steps_begun >= depth:
            return []
        return self._lookahead(step, depth)

    def _lookahead_depth(self, now: int, depth: int) -> int:
        """How many batches to predict: about the steps until the next request may arrive here,
        plus two (step times drift), else ``depth`` (the proxy's, from how many predictions were
        used lately). Only a hint: predictions are exact or unused. Not while requests wait: an
        arrival then joins the queue's tail, which the predicted steps do not reach.
        """
        arrival = self.next_arrival_ns(now) if "prefill" in self.serves and not self.scheduler.waiting else None
        if arrival is None or self._last_duration_ns <= 0:
            return depth
        return max(2, min(self.max_lookahead, -(-(arrival - now) // self._last_duration_ns) + 2))

    def _on_step_done(self, step: Step, start_ns: int) -> None:
        now = self.kernel.now_ns
        self.busy = False
        self.busy_ns += now - start_ns
        run = self._run
        if run is not None and step.seqs is run.seqs:
            # A run step: no sequence finishes; settle() applies it to the sequences later.
            run.end_step(start_ns, now)
            self.timeline.append(start_ns, now, step.num_tokens, 0, step.num_tokens, self.scheduler.kv.num_used,
                                 len(self.scheduler.waiting))
            self.wake()
            return
        finished, forking = [], []
        for seq, num in zip(step.seqs, step.num_new):
            seq.num_computed += num
            if seq.num_computed < seq.num_tokens:
                continue  # a partial prefill chunk samples nothing
            request = seq.request
            request.generated_tokens += 1
            seq.generated += 1
            seq.num_tokens += 1
            if request.first_token_ns < 0:
                request.first_token_ns = now
                if seq.target_generated > 1:
                    self._begin_decode_stage(seq, now)
            else:
                request.max_tbt_ns = max(request.max_tbt_ns, now - request.last_token_ns)
            request.last_token_ns = now
            if seq.forks:
                forking.append(seq)
            if seq.generated >= seq.target_generated:
                finished.append(seq)
        for seq in forking:
            self._fork(seq)
        self.timeline.append(start_ns, now, len(step.seqs), step.prefill_tokens,
                             step.num_tokens - step.prefill_tokens, self.scheduler.kv.num_used,
                             len(self.scheduler.waiting))
        for seq in finished:
            seq.stage.end_ns = now
            # NOTE: KV is released when the stage ends; a disaggregated prefill's
            # KV is modelled as copied out at that instant (the transfer is timed
            # by the coordinator).
            self.scheduler.finish(seq, prefix_tokens=seq.request.prefix_tokens)
            self.outstanding -= 1
            self.outstanding_input_tokens -= seq.request.input_tokens
            self.on_stage_done(seq, now)
        if self.decode_runs and not finished and not forking:
            self._run = self._start_run(step)
        self.wake()

    def _start_run(self, step: Step) -> DecodeRun | None:
        """A decode run after ``step``, if the next steps are its sequences decoding unchanged.

        That holds when nothing can join, ``step`` ran exactly the running sequences (so
        each sampled a token as it ended), each now decodes, and the scheduler would
        take them all (within a chunked token budget). The run lasts until a
        sequence would finish, or its sequences would need more KV blocks than are
        free (a preemption or a prefix-cache eviction is the scheduler's to decide).
        """
        sched = self.scheduler
        running = sched.running
        n = len(running)
        if sched.may_admit or step.swap_bytes or len(step.seqs) != n or \
                (sched.config.batching == "chunked" and n > sched.token_budget):
            return None
        for seq, ran in zip(running, step.seqs):
            if seq is not ran or seq.num_tokens - seq.num_computed != 1 or seq.generated < 1 or seq.forks:
                return None
        length = min(seq.target_generated - seq.generated for seq in running) - 1
        if length < 1:
            return None
        # A sequence whose blocks hold ``room`` more tokens needs a block at run step
        # room + 1, and every block_size steps after (0-based: room, room + block_size, ...).
        block_size = sched.kv.block_size
        new_blocks = [0] * length
        for seq in running:
            for j in range((seq.num_blocks + seq.prefix_blocks) * block_size - seq.num_computed, length, block_size):
                new_blocks[j] += 1
        free = sched.kv.num_free
        for j, blocks in enumerate(new_blocks):
            free -= blocks
            if free < 0:
                del new_blocks[j:]
                break
        return DecodeRun(list(running), new_blocks) if new_blocks else None

    def settle(self) -> None:
        """Applies the pending steps of a decode run to its sequences and their requests.

        Called before the scheduler or anyone else reads sequence state; idempotent.
        """
        run = self._run
        if run is None or not run.done:
            return
        k, gap, last = run.done, run.max_gap_ns, run.last_ns
        block_size = self.scheduler.kv.block_size
        for seq in run.seqs:
            seq.num_computed += k
            seq.num_tokens += k
            seq.generated += k
            # The blocks the run took for it (BlockManager.grow's count, credited now).
            seq.num_blocks = max(seq.num_blocks, blocks_for(seq.num_computed, block_size) - seq.prefix_blocks)
            request = seq.request
            request.generated_tokens += k
            if gap > request.max_tbt_ns:
                request.max_tbt_ns = gap
            request.last_token_ns = last
        run.contexts = [c + k for c in run.contexts]
        run.done = run.max_gap_ns = 0

    def _fork(self, parent: Sequence) -> None:
        """Multi-path reasoning: the parent's sibling branches start beside it.

        Each sibling shares the parent's prompt KV blocks (copy-on-write, as
        vLLM's parallel sampling), has sampled its own first token from the
        same prefill, and decodes its own tokens into its own blocks.
        """
        request = parent.request
        children = [Sequence(request, parent.stage, num_tokens=request.input_tokens + 1,
                             num_computed=request.input_tokens, target_generated=parent.target_generated,
                             order=0, generated=1) for _ in range(parent.forks)]
        parent.forks = 0
        self.scheduler.kv.fork(parent, children, prompt_tokens=request.input_tokens)
        request.generated_tokens += len(children)
        for child in children:
            child.order = self._next_order
            self._next_order += 1
            self.outstanding += 1
            self.scheduler.enqueue(child, front=True)

    def _begin_decode_stage(self, seq: Sequence, now: int) -> None:
        """Splits a request's stage on this client at its first token: prefill ends, decode begins."""
        seq.stage.end_ns = now
        seq.stage = StageRecord(kind=decode_kind(seq.request), client=self.name, enqueue_ns=now, start_ns=now)
        seq.request.stages.append(seq.stage)
