"""An LLM client: a scheduler and a cluster, stepping one batch at a time.

A step is begun (:meth:`LLMClient.begin_step`: the step clock,
:class:`cosim.hub.sim.ports.StepClock`, has the scheduler form it), timed
(:meth:`LLMClient.time_step`) and ended at that time (:meth:`LLMClient.end_step`:
the scheduler applies it, :meth:`Scheduler.update`, and what happened on the
requests is recorded: tokens, first-token and between-token times, stages; the
client hands finished stages to the coordinator, :meth:`LLMClient.finish_stage`).
The clock does the common path of each natively (core/src/stepping.rs), calling
the client's Python only for what is rare or its own (the :class:`Stepper`
protocol of :mod:`cosim.hub.sim.ports`). A step's end is an event of the
kernel, and so is the client's wake-up for the next; the clock may handle both
in place when nothing else comes first (:meth:`StepClock.take_steps`). What a
step holds is the scheduler's business (:mod:`cosim.hub.sim.scheduling`); how long it
takes, and how cheaply that is found out, :mod:`cosim.hub.timing`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Sequence_
from functools import partial
from typing import Protocol

from cosim_core import record_run

from ...config.choices import LOAD_METRICS as CONFIG_LOAD_METRICS
from ..admission import ClientLimits
from ..frontend import FrontEnd
from ..kernel import WAKE, Kernel
from ..pipelines import decode_kind
from ..ports import MakeStepClock, UnsettledScheduler
from ..records import ClientInfo, ClientTimeline, StageRecord
from ..scheduling import ScheduledBatch, Scheduler, Sequence
from ..scheduling.lora import LoraStats
from .lockstep import LockStepGroup

# Router load metrics: those a config may name (router.load_metric, config/choices.py's LOAD_METRICS),
# and those routers read themselves (``stages`` least_outstanding's, ``dp_score`` vllm_dp's,
# ``prefill_tokens`` and ``kv_blocks`` prefix_aware's).
ROUTER_LOAD_METRICS = ("stages", "dp_score", "prefill_tokens", "kv_blocks")
LOAD_METRICS = (*ROUTER_LOAD_METRICS, *CONFIG_LOAD_METRICS)
# vLLM's DPLBAsyncMPClient.get_core_engine_for_request: score = waiting * 4 + running.
DP_WAITING_WEIGHT = 4


class StageSink(Protocol):
    """Where a client's finished stages go (the coordinator)."""

    def on_llm_done(self, seq: Sequence, now_ns: int, release_kv: Callable[[], None]) -> None:
        """``seq``'s stage ended; ``release_kv`` frees its KV once nothing needs it (a transfer)."""
        ...

    def next_arrival_at(self, client: LLMClient, now_ns: int) -> int | None: ...


class LLMClient:
    """One serving instance.

    Args:
        info: static facts for reports.
        kernel: the event kernel.
        scheduler: batching and KV state.
        clock: builds the step clock that forms and times its steps (:mod:`cosim.hub.sim.ports`).
        sink: takes finished stages (and forecasts arrivals for lookahead).
        serves: stage kinds this client serves (``prefill``, ``decode``).
        group: the data-parallel lock-step group it steps with (:mod:`.lockstep`), if any.
        limits: what it can hold of one request (:mod:`cosim.hub.sim.admission`), checked as requests
            reach it; None: unchecked.
        frontend: the API server in front of it (:mod:`cosim.hub.sim.frontend`): a request's prompt goes
            through it before the scheduler has it, and every sampled token after; None: none. Its steps
            are then recorded one by one (its clock takes no decode run in bulk).
    """

    def __init__(self, *, info: ClientInfo, kernel: Kernel, scheduler: Scheduler, clock: MakeStepClock,
                 sink: StageSink, serves: frozenset[str], group: LockStepGroup | None = None,
                 limits: ClientLimits | None = None, frontend: FrontEnd | None = None,
                 keep_itls: bool = False) -> None:
        self.info, self.name = info, info.name
        self.keep_itls = keep_itls  # record each request's token gaps (RequestRecord.itl_ns)
        self.limits, self.frontend = limits, frontend
        self.group = group
        if group is not None:
            group.join(self)
        self.micro_batches = scheduler.micro_batches
        self._in_flight = 0  # micro-batches in the pipeline
        self._stage_free_ns = 0  # when its first stage can take the next one
        self.kernel, self.sink, self.serves = kernel, sink, serves
        # Its running sequences are read through the clock (self.timer.settled()): a decode run's
        # steps may be pending on them.
        self.scheduler: UnsettledScheduler = scheduler
        self.timer = clock(scheduler=scheduler, settled=record_run,
                           next_arrival_ns=partial(sink.next_arrival_at, self),
                           alone=group is None, overlapping=self.micro_batches > 1)
        self.timeline = ClientTimeline()  # written by the clock at each step
        if scheduler.speculation is not None:
            self.timeline.speculative = scheduler.spec_stats
        if scheduler.lora is not None:
            self.timeline.lora = LoraStats()
        if scheduler.offload is not None:
            self.timeline.offload = scheduler.offload
        self._holds_kv = scheduler.hold_finished_kv  # fixed at the scheduler's making
        self.wake_label, self.done_label = f"wake {self.name}", f"step done {self.name}"
        # what the clock's step loop reads at every step, given once (its busy flags are the clock's)
        self.timer.attach(kernel=kernel, timeline=self.timeline, wake_label=self.wake_label,
                          done_label=self.done_label, keep_itls=keep_itls)
        self._input_tokens = 0  # prompt tokens of the requests with a sequence here
        self._seqs_of: dict[int, int] = {}  # request id -> its sequences here

    # -- work arriving ---------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        """Queues a sequence and wakes the client if it is idle; a request's prompt new to the API server
        in front (``frontend``) is queued once it went through it."""
        if self.frontend is not None and seq.stage.kind == "prefill" and seq.request.client_send_ns < 0:
            self.frontend.admit(seq.request, lambda: self._after_frontend(seq))
            return
        self._queue(seq)

    def _after_frontend(self, seq: Sequence) -> None:
        seq.stage.enqueue_ns = self.kernel.now_ns  # the engine has it now: its queueing starts
        self._queue(seq)

    def _queue(self, seq: Sequence) -> None:
        self.hold(seq, 1)
        self.scheduler.add(seq)
        self.timer.interrupt()
        self.wake()

    def wake(self) -> None:
        """Asks for a scheduling decision at the current time, after same-time events (its
        lock-step group's, if it has one)."""
        if self.group is not None:
            self.group.wake()
        else:
            self.timer.wake(self)  # unless busy or pending; its wake-up event is the clock's (on_wake)

    # -- router load -------------------------------------------------------
    def load(self, metric: str) -> int:
        """Load by a router metric: ``stages`` (sequences here), ``input_tokens`` (prompt tokens of
        the requests here), ``kv_tokens`` (tokens in KV blocks), ``remaining_tokens`` (prefill and
        decode tokens still to compute), ``dp_score`` (vLLM's DP load balancer's 4 x waiting + running),
        ``prefill_tokens`` (prompt tokens still to prefill), ``kv_blocks`` (KV blocks in use)."""
        scheduler = self.scheduler
        if metric == "stages":
            return scheduler.num_running + scheduler.num_waiting
        if metric == "dp_score":
            return DP_WAITING_WEIGHT * scheduler.num_waiting + scheduler.num_running
        if metric == "kv_blocks":
            return scheduler.kv.num_used
        if metric == "input_tokens":
            return self._input_tokens
        if metric == "kv_tokens":
            return scheduler.kv.num_used * scheduler.kv.block_size
        settled = self.timer.settled()  # the running sequences' tokens: a decode run's pending steps count
        if metric == "prefill_tokens":  # prompts (and recomputations) still to prefill
            return settled.remaining_prefill()
        return settled.remaining_work()

    def cached_prefix_tokens(self, probe: Sequence) -> int:
        """Leading prompt tokens of ``probe`` (a request's prompt, not yet here) that this client's
        prefix cache holds, in whole blocks; 0 without prefix caching (:meth:`BlockManager.cache_hit`)."""
        if not self.scheduler.kv.enable_prefix_caching:
            return 0
        return self.timer.settled().kv.cached_tokens(probe)  # a decode run's pending steps cache their blocks

    @property
    def busy(self) -> bool:
        """A step (or, with micro-batches, the first pipeline stage) is in flight (its clock's flag)."""
        return self.timer.busy

    @busy.setter
    def busy(self, busy: bool) -> None:
        self.timer.busy = busy

    @property
    def wake_pending(self) -> bool:
        """Its wake-up is scheduled (its clock's flag)."""
        return self.timer.wake_pending

    @property
    def busy_ns(self) -> int:
        """Time its devices were busy (counted on its timeline by the step loop)."""
        return self.timeline.busy_ns

    @property
    def block_size(self) -> int:
        return self.scheduler.kv.block_size

    def hold(self, seq: Sequence, count: int) -> None:
        """Counts ``count`` more (or fewer) sequences of ``seq``'s request here."""
        request = seq.request
        key = request.id
        before = self._seqs_of.get(key, 0)
        after = before + count
        if after:
            self._seqs_of[key] = after
        else:
            del self._seqs_of[key]
        if not before or not after:
            self._input_tokens += request.input_tokens if after else -request.input_tokens

    # -- stepping --------------------------------------------------------
    def start_micro_batch(self, now: int, duration: int) -> None:
        """Pipeline parallelism (vLLM's batch queue): the step begun at ``now`` moves on to the next
        stage after a stage's share of its ``duration``, and the first stage takes the next micro-batch."""
        stage_ns = -(-duration // self.micro_batches)
        self._in_flight += 1
        self.timeline.busy_ns += stage_ns
        self._stage_free_ns = now + stage_ns
        self.kernel.call_at(self._stage_free_ns, WAKE, self._on_stage_free, label=self.wake_label)

    def wake_for_loads(self) -> None:
        """Idle with KV being copied back from an offload tier: vLLM's engine loop polls the copies, so
        it schedules the request as soon as its copy is done; this wakes then."""
        at = self.scheduler.next_load_ns()
        if at is not None and at > self.kernel.now_ns:
            self.kernel.call_at(at, WAKE, self.wake, label=self.wake_label)

    def _on_stage_free(self) -> None:
        if self.kernel.now_ns >= self._stage_free_ns:  # no later micro-batch took the first stage since
            self.busy = self._in_flight >= self.micro_batches
            self.wake()

    def begin_step(self) -> ScheduledBatch | None:
        """Starts the next step: its batch, or None when nothing can run (its clock's
        :meth:`StepClock.begin_step`)."""
        return self.timer.begin_step(self)

    def has_adapter(self, name: str) -> bool:
        """Whether LoRA adapter ``name`` holds a GPU slot here, or a sequence queued here names it
        (it will be loaded): the ``lora_affinity`` router's test."""
        lora = self.scheduler.lora
        if lora is None:
            return False
        return lora.is_resident(name) or any(seq.request.lora == name for seq in self.scheduler.waiting)

    def time_step(self, batch: ScheduledBatch, now_ns: int, dp_rank_tokens: Sequence_[int] = ()) -> int:
        """How long the step of ``batch`` takes (its energy is counted)."""
        return self.timer.time_step(self, batch, now_ns, dp_rank_tokens)

    def end_step(self, batch: ScheduledBatch, start_ns: int) -> None:
        """Hands a finished step back to the scheduler and records what it did (its clock's
        :meth:`StepClock.end_step`)."""
        self.timer.end_step(self, batch, start_ns)

    def end_micro_batch(self) -> None:
        """A pipeline micro-batch's step ended: the first stage is still busy if a later one took it."""
        self._in_flight -= 1
        self.busy = self.kernel.now_ns < self._stage_free_ns

    def finish_stage(self, seq: Sequence, now: int) -> None:
        """``seq``'s stage here ended at ``now``: the coordinator takes it (a disaggregated prefill's KV
        stays held until the coordinator's transfer of it completes)."""
        seq.stage.end_ns = now
        self.hold(seq, -1)
        self.sink.on_llm_done(seq, now, self._releaser(seq))

    def _releaser(self, seq: Sequence) -> Callable[[], None]:
        """What frees a finished sequence's KV: nothing, unless this client holds it (a prefill
        client keeps a request's KV until its transfer to the decode client completes)."""
        if not self._holds_kv:
            return _nothing

        def release() -> None:
            self.scheduler.release(seq)
            self.timer.forget_forecast()  # predicted with those blocks held
            self.wake()  # the freed blocks may admit a waiting prompt
        return release

    def settle(self) -> None:
        """Applies pending decode-run steps, so that the records are complete (end of a run)."""
        self.timer.settled()

    def begin_decode_stage(self, seq: Sequence, now: int) -> None:
        """Splits a request's stage on this client at its first token: prefill ends, decode begins."""
        seq.stage.end_ns = now
        seq.stage = StageRecord(decode_kind(seq.request), self.name, now, now)  # positional: cheaper
        seq.request.stages.append(seq.stage)


def _nothing() -> None:
    pass
