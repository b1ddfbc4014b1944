"""Decode runs: steps certain to be the same sequences decoding, taken without forming or updating each.

After a step, the scheduler says which steps follow for certain while no work arrives
(:meth:`Scheduler.steady_decodes`: the same sequences decoding, and the KV blocks each step takes).
A :class:`DecodeRun` takes those steps one by one, as the client times and records them, without
forming a batch or updating the sequences: each step only takes its blocks
(:meth:`Scheduler.begin_decode_step`), and its effect waits until :meth:`DecodeRun.settle` has the
scheduler apply the finished ones in bulk (:meth:`Scheduler.apply_decodes`). The run's last step is
formed and handed back like any other (sequences may finish in it). Work arriving cuts the run
short after the steps begun (:meth:`DecodeRun.cut`). None of it changes a result.
"""

from __future__ import annotations

from ..sim.scheduling import ScheduledBatch, Scheduler, Signature, SteadyDecodes, StepOutcome


class DecodeRun:
    """Steps of one unchanged decode batch whose effects on the sequences are pending.

    Attributes:
        scheduler: the scheduler whose steps these are.
        seqs: the batch (the scheduler's running list at the start).
        ones: one new token per sequence (every step's ``num_new``).
        contexts: each sequence's computed tokens when the pending steps began.
        new_blocks: KV blocks the batch grows into at each step of the run, in order.
        taken: steps begun so far (their blocks taken).
        done: steps finished and not yet applied to the sequences.
        max_gap_ns: longest of those steps (each sequence's gap between tokens).
        last_ns: when the last of them ended.
        lora: its sequences' LoRA adapters, the same every step (None: the base model only).
    """

    __slots__ = ("scheduler", "seqs", "ones", "contexts", "new_blocks", "queue_stamp", "taken", "done",
                 "max_gap_ns", "last_ns", "lora", "_num_requests")

    def __init__(self, scheduler: Scheduler, steady: SteadyDecodes) -> None:
        self.scheduler = scheduler
        self.seqs, self.contexts, self.new_blocks = steady.seqs, steady.contexts, steady.new_blocks
        self.queue_stamp, self.lora = steady.queue_stamp, steady.lora
        self.ones = [1] * len(self.seqs)
        self.taken = self.done = self.max_gap_ns = self.last_ns = 0
        self._num_requests = -1  # counted when first asked: most runs are cut before a step is recorded

    @staticmethod
    def start(scheduler: Scheduler, batch: ScheduledBatch, outcome: StepOutcome) -> DecodeRun | None:
        """The run of the steps after ``batch`` (just updated into ``outcome``), if they are steady
        decodes (:meth:`Scheduler.steady_decodes`)."""
        steady = scheduler.steady_decodes(batch, outcome)
        return DecodeRun(scheduler, steady) if steady is not None else None

    @property
    def num_requests(self) -> int:
        """Requests among its sequences (parallel paths of one count once)."""
        if self._num_requests < 0:
            self._num_requests = len({id(seq.request) for seq in self.seqs})
        return self._num_requests

    @property
    def steps_left(self) -> int:
        return len(self.new_blocks) - self.taken

    def step(self) -> ScheduledBatch:
        """The batch of the run's next step (:meth:`begin` takes its blocks)."""
        k = self.done
        return ScheduledBatch(seqs=self.seqs, num_new=self.ones, context=[c + k for c in self.contexts],
                              num_tokens=len(self.seqs), queue_blocked=True, queue_stamp=self.queue_stamp,
                              lora=self.lora)

    def begin(self) -> None:
        """Begins the run's next step: it takes its KV blocks, as :meth:`Scheduler.schedule` would."""
        self.scheduler.begin_decode_step(self.new_blocks[self.taken])
        self.taken += 1

    def end_step(self, start_ns: int, end_ns: int) -> None:
        """A begun step ended (its effect pending until :meth:`settle`)."""
        self.done += 1
        if end_ns - start_ns > self.max_gap_ns:
            self.max_gap_ns = end_ns - start_ns
        self.last_ns = end_ns

    def cut(self) -> None:
        """Work arrived: the run ends after the steps begun."""
        del self.new_blocks[self.taken:]

    def settle(self) -> int:
        """Has the scheduler apply the run's finished steps to its sequences, and credit them the
        blocks of the steps begun; returns how many steps it applied. Idempotent."""
        if not self.taken:
            return 0
        k = self.done
        self.scheduler.apply_decodes(self.seqs, k, self.taken - k)
        if k:
            self.contexts = [c + k for c in self.contexts]
            self.taken -= k
            del self.new_blocks[:k]
            self.done = self.max_gap_ns = 0
        return k

    def signatures(self, steps: int) -> list[Signature]:
        """The signatures of the run's next ``steps`` steps (lookahead, on a scheduler's copy)."""
        ones, done = tuple(self.ones), self.done
        if self.lora is not None:
            lora = self.lora.key
            return [(ones, tuple([c + k for c in self.contexts]), *lora) for k in range(done, done + steps)]
        return [(ones, tuple([c + k for c in self.contexts])) for k in range(done, done + steps)]

