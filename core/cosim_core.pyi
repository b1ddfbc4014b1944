"""cosim's compiled simulation core (Rust, PyO3): the types mypy sees (core/src has the docs)."""

from collections.abc import Callable, Hashable, Mapping
from collections.abc import Sequence as Seq
from typing import Any, Self

import numpy as np

from cosim.hub.config.scheduler import SchedulerConfig
from cosim.hub.sim.ports import Stepper
from cosim.hub.sim.scheduling.lora import LoraSlots, LoraStep
from cosim.hub.sim.scheduling.offload import OffloadTier
from cosim.hub.sim.scheduling.speculative import SpecStats, Speculation
from cosim.hub.sim.workload.token_ids import SegmentIds

def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens."""

def block_hashes(seq: Sequence, num_blocks: int, block_size: int) -> list[bytes]:
    """The hashes of ``seq``'s first ``num_blocks`` full blocks (core/src/hasher.rs: the chain the prefix
    cache and the offload tiers key blocks by)."""

class StageRecord:
    """One stage of one request (prefill, decode, rag, ...) (core/src/records.rs): ``enqueue_ns`` the stage
    was handed to the client (after any transfer), ``start_ns`` the client first scheduled it, ``end_ns`` it
    finished it (-1: not yet), ``transfer_ns`` the time spent moving its input before ``enqueue_ns``."""

    __match_args__: tuple[str, ...]
    kind: str
    client: str
    enqueue_ns: int
    start_ns: int
    end_ns: int
    transfer_ns: int
    def __init__(self, kind: str, client: str, enqueue_ns: int, start_ns: int = -1, end_ns: int = -1,
                 transfer_ns: int = 0) -> None: ...
    def values(self) -> tuple[Any, ...]:
        """Its fields' values, in order."""

class RequestRecord:
    """One request from arrival to its last token (core/src/records.rs has the fields' meanings).

    Built as the dataclass it replaces (the same fields, order and defaults; None for ``template``,
    ``pipeline``, ``data_at`` or ``stages`` gives the default); compared field by field; pickled with its fields.
    """

    __match_args__: tuple[str, ...]
    id: int
    model: str
    arrival_ns: int
    input_tokens: int
    output_tokens: int
    generated_tokens: int
    first_token_ns: int
    finish_ns: int
    max_tbt_ns: int
    last_token_ns: int
    preemptions: int
    cached_tokens: int
    prefix_id: str | None
    prefix_tokens: int
    prompt_token_ids: Seq[int] | np.ndarray | SegmentIds | None
    template: str
    branches: int
    branches_done: int
    pipeline: tuple[str, ...]
    stage_index: int
    retrieved_tokens: int
    retrieved_at_decode: bool
    context_bytes: int
    data_at: str
    stages: list[StageRecord]
    lora: str | None
    lora_rank: int
    cls: str | None
    priority: int
    deadline_ns: int
    session: int
    turn: int
    output_token_ids: np.ndarray | SegmentIds | None
    client_send_ns: int
    client_first_token_ns: int
    client_last_token_ns: int
    itl_ns: list[int] | None
    client_itl_ns: list[int] | None
    def __init__(self, id: int, model: str, arrival_ns: int, input_tokens: int, output_tokens: int,
                 generated_tokens: int = ..., first_token_ns: int = ..., finish_ns: int = ...,
                 max_tbt_ns: int = ..., last_token_ns: int = ..., preemptions: int = ..., cached_tokens: int = ...,
                 prefix_id: str | None = ..., prefix_tokens: int = ...,
                 prompt_token_ids: Seq[int] | np.ndarray | SegmentIds | None = ..., template: str = ...,
                 branches: int = ..., branches_done: int = ..., pipeline: tuple[str, ...] = ...,
                 stage_index: int = ..., retrieved_tokens: int = ..., retrieved_at_decode: bool = ...,
                 context_bytes: int = ..., data_at: str = ..., stages: list[StageRecord] = ...,
                 lora: str | None = ..., lora_rank: int = ..., cls: str | None = ..., priority: int = ...,
                 deadline_ns: int = ..., session: int = ..., turn: int = ...,
                 output_token_ids: np.ndarray | SegmentIds | None = ..., client_send_ns: int = ...,
                 client_first_token_ns: int = ..., client_last_token_ns: int = ...,
                 itl_ns: list[int] | None = ..., client_itl_ns: list[int] | None = ...) -> None: ...
    @property
    def is_finished(self) -> bool: ...
    @staticmethod
    def arriving(ints: Seq[int], model: str, template: str | None, pipeline: tuple[str, ...] | None,
                 branches: int) -> RequestRecord:
        """A request's record as it arrives, without parsing keywords: ``ints`` in ``RequestSpecs.INTS``'
        order (``id``, ``arrival_ns``, ``input_tokens``, ``output_tokens``, ``prefix_tokens``, ``lora_rank``,
        ``priority``, ``deadline_ns``); every other field has its keyword default."""
    def row_ints(self) -> tuple[int, ...]:
        """The integer fields a request table's row takes, in one call: ``id``, ``arrival_ns``,
        ``first_token_ns``, ``finish_ns``, ``output_tokens``, ``branches``, ``max_tbt_ns``, ``input_tokens``,
        ``generated_tokens``, ``preemptions``, ``cached_tokens``, ``session``, ``turn``, ``client_send_ns``,
        ``client_first_token_ns``, ``client_last_token_ns``."""
    def values(self) -> tuple[Any, ...]:
        """Its fields' values, in order."""

def record_start(batch: ScheduledBatch, now_ns: int) -> None:
    """Records that ``batch``'s step began at ``now_ns`` (core/src/recording.rs): its admitted sequences'
    cached prompt tokens, its stages' ``start_ns`` where unset, a preemption per sequence it preempted."""

def record_tokens(outcome: StepOutcome, now_ns: int, timeline: Timeline, keep_itls: bool,
                  begin_decode: Callable[[Sequence, int], None]) -> int:
    """Records the tokens ``outcome`` sampled at ``now_ns`` on their requests and the gaps in ``timeline``,
    calling ``begin_decode(seq, now_ns)`` at a first token the sequence decodes on from; the tokens timed now."""

def record_run(seqs: list[Sequence], steps: int, max_gap_ns: int, last_ns: int) -> None:
    """Records a decode run's ``steps`` applied steps on its sequences' requests."""

class BlockManager:
    """Paged KV blocks of one client, with vLLM V1's prefix cache (core/src/manager.rs)."""

    @property
    def num_blocks(self) -> int:
        """Capacity in blocks."""
    @property
    def block_size(self) -> int:
        """Tokens per block."""
    @property
    def num_free(self) -> int:
        """Blocks no sequence holds (cached ones nobody uses included)."""
    @property
    def num_used(self) -> int:
        """Blocks held by sequences."""
    @property
    def enable_prefix_caching(self) -> bool:
        """Whether blocks are cached by content."""
    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False) -> None: ...
    def copy(self) -> BlockManager:
        """An independent copy (lookahead schedules on it)."""
    def __copy__(self) -> BlockManager: ...
    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Extra blocks ``seq`` needs to compute ``num_new_tokens`` more tokens."""
    def cache_hit(self, seq: Sequence) -> list[Hashable]:
        """The cached blocks holding the longest run of ``seq``'s leading tokens."""
    def cached_tokens(self, seq: Sequence) -> int:
        """The tokens of :meth:`cache_hit`'s blocks."""
    def fits(self, seq: Sequence, num_new_tokens: int, hit: Seq[Hashable] | None = None) -> bool:
        """Whether :meth:`allocate` can give ``seq`` the blocks ``hit`` and those of ``num_new_tokens``."""
    def allocate(self, seq: Sequence, num_new_tokens: int, hit: Seq[Hashable] | None = None) -> bool:
        """Gives ``seq`` the cached blocks ``hit`` and the blocks of ``num_new_tokens``; False if it cannot."""
    def grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Allocates the blocks ``seq`` needs for ``num_new_tokens`` more tokens; False if it cannot."""
    def grow_by(self, seq: Sequence, num_blocks: int) -> bool:
        """Gives ``seq`` ``num_blocks`` more blocks (swap-in); False if it cannot."""
    def take(self, num_blocks: int) -> None:
        """Takes ``num_blocks`` free blocks from the free queue's head, evicting cached ones."""
    def release(self, seq: Sequence) -> None:
        """Frees a sequence's blocks; with prefix caching its full blocks stay cached."""
    def fork(self, parent: Sequence, children: list[Sequence], *, prompt_tokens: int) -> None:
        """Lets ``children`` share the parent's full prompt blocks."""
    def cache_full_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Turns ``seq``'s own full blocks within its first ``num_tokens`` tokens into cached blocks."""
    def holder_counts(self) -> list[int]:
        """Holder counts of the cached (or fork-shared) blocks, in no particular order (for checks)."""
    def free_queue_blocks(self) -> list[int]:
        """Blocks of each free queue entry, head first; empty without prefix caching (for checks)."""
    def check(self) -> None:
        """Raises RuntimeError if the pool's invariants do not hold."""

class Sequence:
    """One request's stage on one client, in vLLM's unified token view (core/src/sequence.rs).

    A sequence knows ``num_tokens`` tokens (prompt plus tokens generated so far) and holds
    ``num_computed`` of them in its KV cache; when a step brings ``num_computed`` up to
    ``num_tokens`` the model samples a new token. After a preemption by recompute ``num_computed``
    drops to 0 and the prompt plus the generated tokens are prefilled again.
    """

    request: RequestRecord
    stage: StageRecord
    num_tokens: int
    num_computed: int
    target_generated: int
    num_blocks: int
    """Blocks of its own, after the cached ones."""
    prefix_blocks: int
    """``len(cached)``."""
    prefix_id: str | None
    """The declared shared prefix its first prompt tokens are (no token ids)."""
    order: int
    """Admission order on this client (FCFS and preemption victim choice)."""
    generated: int
    forks: int
    swapped_blocks: int
    swapped_bytes: int
    prompt_tokens: int
    """Tokens it did not generate itself."""
    @property
    def block_hashes(self) -> list[bytes]:
        """Its full blocks' content hashes, as far as hashed so far (a new list)."""
    drafts: int
    """Speculative draft tokens to verify at its next step."""
    spec_draws: np.ndarray | None
    spec_step: int
    state: str
    """``waiting``, ``running``, ``swapped``, ``finished`` or ``loading``."""
    def __init__(self, request: RequestRecord, stage: StageRecord, *, num_tokens: int, num_computed: int,
                 target_generated: int, order: int = 0, prefix_id: str | None = None, generated: int = 0,
                 forks: int = 0) -> None: ...
    @property
    def cached(self) -> list[Hashable]:
        """Its leading blocks, shared through the cache (a new list)."""
    @property
    def remaining_tokens(self) -> int:
        """Tokens still to schedule before the next sample (speculative drafts included)."""
    @property
    def remaining_work(self) -> int:
        """Tokens left to process before the stage ends (prefill plus decodes)."""
    def clone(self) -> Sequence:
        """A copy to schedule hypothetically; it shares the request and stage records."""

class ScheduledBatch:
    """One scheduled step: sequences with the tokens each computes (core/src/batch.rs)."""

    swap_bytes: int
    num_tokens: int
    prefill_tokens: int
    admitted: int
    queue_blocked: bool
    queue_stamp: int
    lora: LoraStep | None
    def __init__(self, *, seqs: list[Sequence] | None = None, num_new: Seq[int] | None = None,
                 context: Seq[int] | None = None, swap_bytes: int = 0, num_tokens: int = 0, prefill_tokens: int = 0,
                 admitted: int = 0, queue_blocked: bool = False, queue_stamp: int = 0,
                 preempted: Seq[Sequence] | None = None, cache_hits: Seq[tuple[Sequence, int]] | None = None,
                 lora: LoraStep | None = None, draft_tokens: Seq[int] | None = None) -> None: ...
    @property
    def seqs(self) -> list[Sequence]:
        """The sequences, in scheduling order (the same list at every call)."""
    @property
    def num_new(self) -> list[int]:
        """Tokens each computes in this step (the same list at every call)."""
    @property
    def context(self) -> list[int]:
        """Tokens each already holds in KV (the same list at every call)."""
    @property
    def draft_tokens(self) -> list[int]:
        """Speculative: of each sequence's new tokens, the drafts it verifies (empty without)."""
    @property
    def preempted(self) -> list[Sequence]:
        """Sequences preempted to make room for it (a new list)."""
    @preempted.setter
    def preempted(self, seqs: Seq[Sequence]) -> None: ...
    @property
    def cache_hits(self) -> list[tuple[Sequence, int]]:
        """(sequence, prompt tokens served from the prefix cache) of the admitted."""
    @property
    def fields(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Its StepBatch fields beyond the new and context tokens: drafts, LoRA adapters."""
    @property
    def signature(self) -> tuple[Any, ...]:
        """``(new tokens, context)`` per sequence, then :attr:`fields`: what times the step."""
    def add(self, seq: Sequence, num_tokens: int) -> None:
        """Adds ``seq`` to compute ``num_tokens`` tokens."""
    def drop(self, seq: Sequence) -> bool:
        """Takes ``seq`` out of the step if it is in it; whether it was."""

class StepOutcome:
    """What a step changed, for the client to record (core/src/batch.rs)."""

    @property
    def sampled(self) -> list[Sequence]:
        """Sequences that sampled a token at the end of the step, in batch order."""
    @property
    def forked(self) -> list[tuple[Sequence, list[Sequence]]]:
        """(parent, its new sibling branches) for multi-path reasoning."""
    @property
    def finished(self) -> list[Sequence]:
        """Sequences whose stage ended."""
    @property
    def kv_blocks_used(self) -> int:
        """Blocks in use after the step, before the finished freed theirs."""
    @property
    def num_waiting(self) -> int:
        """The waiting queue's length at that moment."""
    @property
    def extra_tokens(self) -> list[tuple[Sequence, int]]:
        """Speculative decoding: (sequence, tokens it sampled beyond one)."""

class SteadyDecodes:
    """Steps certain to be the same sequences decoding while no work arrives (core/src/batch.rs)."""

    @property
    def seqs(self) -> list[Sequence]:
        """The sequences (the scheduler's running list when the steps begin)."""
    @property
    def contexts(self) -> list[int]:
        """Each one's computed tokens when the steps begin."""
    @property
    def new_blocks(self) -> list[int]:
        """KV blocks they grow into at each step, in order."""
    @property
    def queue_stamp(self) -> int:
        """The queue stamp of each step's batch."""
    @property
    def lora(self) -> LoraStep | None:
        """Their LoRA adapters, the same every step (None: the base model only)."""

class BatchingPolicy:
    """How a scheduler forms each step (core/src/policies.rs), by its section's ``batching``."""

    def __init__(self, config: SchedulerConfig) -> None: ...
    @property
    def token_budget(self) -> int:
        """Most tokens one step computes."""
    @property
    def whole_prompts(self) -> bool:
        """Prompts are admitted whole, never split."""
    def decodes_all(self, num_running: int) -> bool:
        """Whether a step with no admissions runs every one of ``num_running`` decoding sequences."""

class PackingOrder:
    """A packing order by name (core/src/packing.rs), on Python lists (for checks)."""

    def __init__(self, name: str) -> None: ...
    @property
    def arrival_order(self) -> bool:
        """The queue is in the order sequences were queued."""
    def queue(self, waiting: list[Sequence], seq: Sequence, *, front: bool = False) -> None:
        """Puts a new sequence in ``waiting``."""
    def requeue(self, waiting: list[Sequence], seq: Sequence) -> None:
        """Puts a preempted sequence back in ``waiting``."""
    def victim(self, running: list[Sequence]) -> Sequence:
        """The running sequence to preempt."""

class Scheduler:
    """Waiting queue, running set and KV blocks of one client, stepped through :meth:`schedule`
    and :meth:`update` (core/src/scheduler.rs, whose module doc gives the semantics)."""

    def __init__(self, config: SchedulerConfig, kv: BlockManager, *, kv_bytes_per_token: float = 0.0,
                 micro_batches: int = 1, hold_finished_kv: bool = False, lora: LoraSlots | None = None,
                 speculation: Speculation | None = None, offload: OffloadTier | None = None,
                 lock_step: bool = False, one_step_ahead: bool | None = None) -> None: ...
    @property
    def config(self) -> SchedulerConfig: ...
    @property
    def kv(self) -> BlockManager: ...
    @property
    def kv_bytes_per_token(self) -> float: ...
    @property
    def offload(self) -> OffloadTier | None: ...
    @property
    def hold_finished_kv(self) -> bool: ...
    @property
    def micro_batches(self) -> int: ...
    @property
    def policy(self) -> BatchingPolicy: ...
    @property
    def swap_free_bytes(self) -> int: ...
    @property
    def one_step_ahead(self) -> bool: ...
    @property
    def lock_step(self) -> bool: ...
    speculation: Speculation | None
    @property
    def spec_stats(self) -> SpecStats | None:
        """The client's speculative counts (None in a copy without speculation)."""
    @property
    def lora(self) -> LoraSlots | None: ...
    @property
    def running(self) -> list[Sequence]:
        """The running sequences, in admission order (a new list)."""
    @property
    def waiting(self) -> list[Sequence]:
        """The waiting queue, in order (a new list)."""
    @property
    def has_work(self) -> bool: ...
    @property
    def num_running(self) -> int: ...
    @property
    def num_waiting(self) -> int: ...
    def add(self, seq: Sequence, *, front: bool = False) -> None:
        """Queues a new sequence (ordered by the packing order)."""
    def remaining_work(self) -> int:
        """Tokens left to process before its sequences' stages end (prefill plus decodes)."""
    def remaining_prefill(self) -> int:
        """Prompt (and recomputed) tokens still to prefill."""
    def release(self, seq: Sequence) -> None:
        """Frees a finished sequence's KV held since it finished (``hold_finished_kv``)."""
    def next_load_ns(self) -> int | None:
        """When a copy back from the offload tier is next done, if one is under way."""
    def schedule(self) -> ScheduledBatch:
        """Forms the next step (possibly empty: nothing can run)."""
    def update(self, batch: ScheduledBatch) -> StepOutcome:
        """Applies a finished step: samples, forks, finishes stages and frees their KV."""
    def steady_decodes(self, batch: ScheduledBatch, outcome: StepOutcome) -> SteadyDecodes | None:
        """The steps after ``batch`` certain to be the running sequences decoding unchanged."""
    def begin_decode_step(self, new_blocks: int) -> None:
        """A step of :meth:`steady_decodes` begins: it takes its new KV blocks."""
    def apply_decodes(self, seqs: list[Sequence], steps: int, begun: int) -> None:
        """Applies ``steps`` decode steps of :meth:`steady_decodes`'s sequences at once."""
    def copy(self) -> Scheduler:
        """A copy to schedule hypothetically (lookahead)."""

class DecodeRun:
    """Steps of one unchanged decode batch whose effects on the sequences are pending (core/src/runs.rs).

    After a step, the scheduler says which steps follow for certain while no work arrives
    (:meth:`Scheduler.steady_decodes`). A run takes them one by one, as the client times and records
    them, without forming a batch or updating the sequences: each step only takes its blocks, and its
    effect waits until :meth:`settle` has the scheduler apply the finished ones in bulk. The run's last
    step is formed and handed back like any other. Work arriving cuts the run short (:meth:`cut`).
    None of it changes a result.
    """

    @staticmethod
    def start(scheduler: Scheduler, batch: ScheduledBatch, outcome: StepOutcome) -> DecodeRun | None:
        """The run of the steps after ``batch`` (just updated into ``outcome``), if steady decodes."""
    @property
    def seqs(self) -> list[Sequence]:
        """The batch (every step's ``seqs``, the same list)."""
    @property
    def ones(self) -> list[int]:
        """One new token per sequence (every step's ``num_new``)."""
    @property
    def taken(self) -> int:
        """Steps begun so far (their blocks taken)."""
    @property
    def done(self) -> int:
        """Steps finished and not yet applied to the sequences."""
    @property
    def max_gap_ns(self) -> int:
        """Longest of those steps (each sequence's gap between tokens)."""
    @property
    def last_ns(self) -> int:
        """When the last of them ended."""
    @property
    def lora(self) -> LoraStep | None:
        """Its sequences' LoRA adapters, the same every step (None: the base model only)."""
    @property
    def num_requests(self) -> int:
        """Requests among its sequences (parallel paths of one count once)."""
    @property
    def steps_left(self) -> int:
        """Steps left to begin."""
    def next_context(self) -> list[int]:
        """The context of the run's next step."""
    def step(self) -> ScheduledBatch:
        """The batch of the run's next step (:meth:`begin` takes its blocks)."""
    def begin(self) -> None:
        """Begins the run's next step: it takes its KV blocks."""
    def end_step(self, start_ns: int, end_ns: int) -> None:
        """A begun step ended (its effect pending until :meth:`settle`)."""
    def cut(self) -> None:
        """Work arrived: the run ends after the steps begun."""
    def settle(self) -> int:
        """Applies the finished steps to the sequences; how many. Idempotent."""
    def signatures(self, steps: int) -> list[tuple[Any, ...]]:
        """The signatures of the run's next ``steps`` steps (as ``ScheduledBatch.signature``)."""
    def take_in_bulk(self, steps: int) -> ScheduledBatch:
        """Lookahead on a copy: begins ``steps`` steps at once, applies all but the last, returns its batch."""

def predict(scheduler: Scheduler, in_flight: ScheduledBatch, depth: int) -> list[tuple[Any, ...]]:
    """The signatures of up to ``depth`` batches that follow ``in_flight`` if no work arrives
    (core/src/forecast.rs): a backlog is predicted while it lasts; once the predicted steps empty
    the queue, prediction stops at the next departure."""

class Forecast:
    """Predicted steps after an origin (the step in flight when it was made), grown on demand
    (core/src/forecast.rs).

    Runs the client's own scheduler policy on a copy of its state, decode runs taken in bulk. Kept
    while the scheduler changes by its own steps alone, it answers for a later step in flight as
    :func:`predict` would from a fresh copy. With ``drafts_of`` (the drafter's forwards after a
    formed batch) it keeps each predicted step's drafter forwards.
    """

    def __init__(self, scheduler: Scheduler, in_flight: ScheduledBatch,
                 drafts_of: Callable[[ScheduledBatch], list[tuple[Any, ...]]] | None = None) -> None: ...
    @property
    def ended(self) -> bool:
        """The copy can run nothing more."""
    @property
    def num_steps(self) -> int:
        """Steps predicted so far."""
    def after(self, step: int, depth: int, in_flight: ScheduledBatch) -> list[tuple[Any, ...]] | None:
        """Up to ``depth`` signatures after step ``step`` (now in flight as ``in_flight``), as
        :func:`predict` would give them; None when the forecast does not hold that step."""
    def drafts(self, step: int, count: int) -> list[tuple[Any, ...]]:
        """The drafter's forwards after each of the ``count`` predicted steps after step ``step``."""

class Timing:
    """The parts of a StepTiming the hub uses (``energy_j`` None: the backend reported none)
    (core/src/timing.rs)."""

    @property
    def duration_ns(self) -> int: ...
    @property
    def energy_j(self) -> float | None: ...
    @property
    def out_of_range(self) -> bool: ...
    @property
    def communication_ns(self) -> int: ...
    @property
    def compute_ns(self) -> int: ...
    @property
    def memory_ns(self) -> int: ...
    @property
    def dispatch_ns(self) -> int: ...
    def __init__(self, duration_ns: int, energy_j: float | None = None, out_of_range: bool = False,
                 communication_ns: int = 0, compute_ns: int = 0, memory_ns: int = 0, dispatch_ns: int = 0) -> None: ...

class TimingCache:
    """Step timings by batch signature, the oldest stored dropped first past a bound (core/src/timing.rs)."""

    def __init__(self) -> None: ...
    def __len__(self) -> int: ...

class SharedTimings:
    """Step timings kept across the runs of one process, by backend and session spec: runs that open
    equal sessions share one cache (core/src/timing.rs)."""

    @property
    def max_sessions(self) -> int: ...
    def __init__(self, max_sessions: int = 16) -> None: ...
    def __len__(self) -> int:
        """The sessions' caches kept."""
    def cache(self, key: Hashable) -> TimingCache:
        """The cache of the sessions identified by ``key`` (backend and spec), empty at first; the
        least recently used dropped past ``max_sessions``."""

class RuntimeSessionProxy:
    """Times the steps of the clients sharing one runtime session, caching by batch signature
    (core/src/timing.rs): on a miss the step, the caller's predicted batches (``ahead``) and the
    other riders' top-ups go to the backend in one ``client.predict_steps`` call; where ``native``
    (a RooflineModel) times misses in process, the step alone, nothing predicted."""

    MIN_LOOKAHEAD: int
    MAX_LOOKAHEAD: int
    max_cache_entries: int

    @property
    def client(self) -> Any: ...
    @property
    def session_id(self) -> str: ...
    @property
    def client_name(self) -> str: ...
    @property
    def scale(self) -> float: ...
    @property
    def use_cache(self) -> bool: ...
    @property
    def lookahead(self) -> bool:
        """Whether a miss carries the batches predicted to follow (never where misses are timed natively)."""
    @property
    def bucket_tokens(self) -> int: ...
    @property
    def pooled_decodes(self) -> bool:
        """Whether each batch is looked up and timed as its representative one, its decodes pooled at
        their mean context (the session declares ``pooled_decodes``)."""
    @property
    def num_lookups(self) -> int: ...
    @property
    def num_hits(self) -> int: ...
    @property
    def num_out_of_range(self) -> int: ...
    @property
    def num_native_calls(self) -> int:
        """Calls of the client's that the compiled model answered in its place (the client counts the others)."""
    @property
    def hit_rate(self) -> float: ...
    @property
    def native(self) -> bool:
        """Whether misses are timed by the backend's compiled model (``native``: a RooflineModel), in process."""
    def __init__(self, client: Any, session_id: str, *, client_name: str = "", cache: bool = True,
                 lookahead: bool = True, max_cache_entries: int = 20_000, bucket_tokens: int = 0,
                 pooled_decodes: bool = False, shared_cache: TimingCache | None = None, scale: float = 1.0,
                 native: object | None = None) -> None: ...
    def join(self, rider: Any) -> None:
        """Adds a client whose top-ups ride along when another misses: a :class:`StepTimer` (asked
        natively), or any object with a ``name`` and ``top_up(now_ns, depth)`` giving signatures."""
    def step_time(self, new_tokens: Seq[int], context_tokens: Seq[int], *, now_ns: int,
                  ahead: Callable[[int], Seq[tuple[Any, ...]]] | None = None, rider: Any = None,
                  dp_rank_tokens: Seq[int] = (), fields: Seq[tuple[str, tuple[int, ...]]] | None = None) -> Timing:
        """Timing of one step of ``rider``; on a miss ``ahead(n)`` and the other riders' top-ups ride along."""
    def peek(self, signature: tuple[Any, ...]) -> Timing | None:
        """The cached timing of the batch of ``signature``, if any, not counted as a lookup."""
    def cached(self) -> list[tuple[Any, ...]]:
        """The signatures cached, oldest first."""

class StepTimer:
    """Steps one client's scheduler and times each step (core/src/step_timer.rs): decode runs taken
    without forming each, one step-time formula (:meth:`step_ns`), and on a miss the forecast's
    predicted batches (and the other riders' top-ups) timed in the same call. The optional parts
    (``collectives_ns``, ``host_time``, ``drafter``, a batch's LoRA loads) are Python objects called
    where given; ``energy`` is the core's :class:`StepEnergy`."""

    @property
    def name(self) -> str: ...
    @property
    def scheduler(self) -> Scheduler: ...
    @property
    def session(self) -> RuntimeSessionProxy: ...
    @property
    def max_lookahead(self) -> int:
        """Most batches predicted per call; 0 where the session looks nothing ahead."""
    @property
    def decode_runs(self) -> bool: ...
    @property
    def overlapping(self) -> bool: ...
    @property
    def _forecast(self) -> Forecast | None:
        """The kept forecast, if any."""
    @property
    def _spare(self) -> BlockManager | None:
        """The KV blocks of the last forecast dropped, which the next brings up to date."""
    def __init__(self, *, name: str, scheduler: Scheduler, session: RuntimeSessionProxy,
                 settled: Callable[[list[Sequence], int, int, int], None],
                 collectives_ns: Callable[[int], int] | None = None, host_bandwidth_gbps: float = 25.0,
                 next_arrival_ns: Callable[[int], int | None] | None = None, energy: StepEnergy | None = None,
                 max_lookahead: int = 256, decode_runs: bool = True, host_time: Any = None, drafter: Any = None,
                 alone: bool = True, overlapping: bool = False) -> None: ...
    busy: bool
    """A step of its client's (or, with micro-batches, the first pipeline stage) is in flight."""
    wake_pending: bool
    """Its client's wake-up is scheduled."""
    def attach(self, *, kernel: Kernel, timeline: Timeline, wake_label: str, done_label: str,
               keep_itls: bool) -> None:
        """Gives the timer what its client's step loop reads at every step, once."""
    def begin(self) -> ScheduledBatch | None:
        """The next step: a decode run's, else the scheduler's choice; None when nothing can run."""
    def in_run(self, batch: ScheduledBatch) -> bool:
        """Whether ``batch`` is a decode run's step (its effects pending until :meth:`settled`)."""
    @property
    def run_size(self) -> tuple[int, int]:
        """The decode run's sequences and requests (parallel paths of one count once)."""
    def end(self, batch: ScheduledBatch, start_ns: int, end_ns: int) -> StepOutcome | None:
        """Hands a finished step back to the scheduler; None for a decode run's step (applied later)."""
    def interrupt(self) -> None:
        """Work arrived: the decode run ends after its steps begun; predictions start afresh."""
    def forget_forecast(self) -> None:
        """The scheduler changed other than by its steps (KV released): predict from a fresh copy."""
    def settled(self) -> Scheduler:
        """The scheduler, every step taken so far applied and recorded."""
    def duration_ns(self, batch: ScheduledBatch, now_ns: int, dp_rank_tokens: Seq[int] = ()) -> tuple[int, StepJoules]:
        """How long ``batch`` takes, and the energy it uses."""
    def step_ns(self, timing: Timing, num_new: Seq[int], added_ns: int = 0) -> int:
        """How long a step takes: the formula for every step, one by one or in a decode run."""
    def take_steps(self, client: Stepper) -> tuple[ScheduledBatch, int, int] | None:
        """The client's wake-up: its steps begun, timed, ended and recorded in place while each ends
        before anything else happens (a decode run's in bulk where cached); the step whose end the
        heap handles (batch, start, duration), or None (core/src/stepping.rs)."""
    def begin_step(self, client: Stepper) -> ScheduledBatch | None:
        """The client's next step, its start recorded; None when it is busy or nothing can run."""
    def time_step(self, client: Stepper, batch: ScheduledBatch, now_ns: int, dp_rank_tokens: Seq[int] = ()) -> int:
        """How long the client's step of ``batch`` takes; its energy counted on the client's timeline."""
    def end_step(self, client: Stepper, batch: ScheduledBatch, start_ns: int) -> None:
        """The client's step begun at ``start_ns`` ends now: handed back, and what it did recorded."""
    def wake(self, client: Stepper) -> None:
        """Schedules the client's wake-up (:meth:`on_wake`) now, after the events due now, unless it is busy
        or one is pending."""
    def on_wake(self, client: Stepper) -> None:
        """The client's wake-up: its steps taken (:meth:`take_steps`), the end of the one the heap handles
        scheduled (:meth:`step_done`)."""
    def step_done(self, client: Stepper, batch: ScheduledBatch, start_ns: int) -> None:
        """A step's end the heap handles: ended (:meth:`end_step`), and the client woken."""
    def _lookahead(self, batch: ScheduledBatch, depth: int) -> list[tuple[Any, ...]]:
        """The signatures of the batches after ``batch`` (in flight), the kept forecast's or a new
        one's. The session takes the forecast's keys directly; a subclass replacing this method
        (a test checking each prediction) is asked instead."""

class Timeline:
    """What a client records at each step (core/src/timeline.rs): its row, energy and inter-token gaps;
    the rows and the gaps past ``max_gap_keys`` go to the tables given (``SpillRows``)."""

    energy_j: float
    device_s: float
    reported_energy_steps: int
    busy_ns: int
    """The time its devices were busy (its steps, or each step's share of the first pipeline stage)."""

    def __new__(cls, rows: Any, spilled_gaps: Any, max_gap_keys: int) -> Self: ...
    def append(self, start_ns: int, end_ns: int, num_seqs: int, prefill_tokens: int, decode_tokens: int,
               kv_blocks_used: int, num_waiting: int, timed_tokens: int = 0) -> None:
        """Adds one step's row."""
    def add_energy(self, step: StepJoules) -> None:
        """Counts one step's energy."""
    def count_gap(self, gap_ns: int, tokens: int) -> None:
        """Counts ``tokens`` tokens sampled ``gap_ns`` after their requests' previous ones."""
    @property
    def token_gaps(self) -> dict[int, int]:
        """The gap counts not spilled: gap in ns -> tokens (a new dict)."""
    def __len__(self) -> int: ...

class StageSums:
    """What a request table keeps of requests' stages (core/src/stage_sums.rs): per stage kind, the count,
    queue, service and transfer ns of its ended top-level stages; per template, ns per latency component
    over finished requests; finished requests per template; every kind seen. Keys keep the order they
    first came."""

    has_lora: bool
    def __init__(self, stages: Mapping[str, Seq[int]] | None = None,
                 breakdown: Mapping[str, Mapping[str, int]] | None = None, finished: Mapping[str, int] | None = None,
                 kinds: Seq[str] | None = None, has_lora: bool = False) -> None: ...
    def add(self, record: RequestRecord, spans: RowBuffer | None = None,
            template: str | None = None) -> tuple[int, int, str | None]:
        """Adds a request (its breakdown under ``template``, default its own), appending its trace spans'
        starts to ``spans``; returns its queueing ns, whether a stage started (1/0), and the client its
        latency is attributed to."""
    def merged(self, other: StageSums) -> StageSums:
        """These sums and ``other``'s."""
    def stages(self) -> dict[str, list[int]]: ...
    def breakdown(self) -> dict[str, dict[str, int]]: ...
    def finished(self) -> dict[str, int]: ...
    def kinds(self) -> set[str]: ...

def attributed_client(record: RequestRecord) -> str | None:
    """The client a request's latency is attributed to: that of its last decode stage, else of its last
    stage; None with no stages."""

class RowBuffer:
    """The in-memory part of a table of fixed-width integer rows (core/src/rows.rs): rows packed
    little-endian as they are appended, handed to ``spill`` as bytes each time ``capacity`` bytes are held."""

    def __init__(self, widths: list[int], capacity: int, spill: Callable[[bytes], object], held: bytes = b"") -> None:
        """``widths``: each column's bytes (8, 4 or 1); ``held``: whole rows to start with (never spilled)."""
    def append(self, *values: int) -> None:
        """Adds one row, spilling the held rows once they fill the buffer."""
    def held(self) -> bytes:
        """The rows held (not yet spilled)."""
    def clear(self) -> None:
        """Drops the rows held and forgets the count."""
    def __len__(self) -> int:
        """Rows appended in all, spilled ones included."""

IDLE_FRACTION: float
MEMORY_BOUND_FRACTION: float

class StepJoules:
    """What one step used (core/src/power.rs): ``joules`` on the client's devices (None: unknown),
    ``device_s`` the device-seconds it kept busy, ``reported`` whether the backend reported ``joules``."""

    @property
    def joules(self) -> float | None: ...
    @property
    def device_s(self) -> float: ...
    @property
    def reported(self) -> bool: ...
    def __init__(self, joules: float | None, device_s: float, reported: bool = False) -> None: ...

class DevicePower:
    """One device's power, watts (core/src/power.rs); figures out of order raise ValueError."""

    @property
    def idle_w(self) -> float: ...
    @property
    def memory_bound_w(self) -> float: ...
    @property
    def peak_w(self) -> float: ...
    def __init__(self, *, idle_w: float, memory_bound_w: float, peak_w: float) -> None: ...
    @classmethod
    def from_extra(cls, extra: Mapping[str, float]) -> DevicePower | None:
        """The power of a ``HardwareSpec.extra``'s figures; None without ``tdp_w``."""
    def power_w(self, u_compute: float, u_memory: float) -> float:
        """Power of one device whose step is ``u_compute`` compute-bound and ``u_memory`` memory-bound."""
    def as_dict(self) -> dict[str, float]:
        """The figures under their config names (for summary.json)."""

class Intensity:
    """A batch's roofline times from the model's shape, for the split of a step's busy time where the
    backend reports none (core/src/power.rs)."""

    @property
    def flops_per_token(self) -> float: ...
    @property
    def flops_per_pair(self) -> float: ...
    @property
    def weight_bytes(self) -> float: ...
    @property
    def kv_bytes_per_token(self) -> float: ...
    @property
    def peak_flops(self) -> float: ...
    @property
    def mem_bytes_per_s(self) -> float: ...
    def __init__(self, *, flops_per_token: float, flops_per_pair: float, weight_bytes: float,
                 kv_bytes_per_token: float, peak_flops: float, mem_bytes_per_s: float) -> None: ...
    def shares(self, num_new: Seq[int], context: Seq[int]) -> tuple[float, float]:
        """(compute, memory) time of the batch, each over the larger of the two."""

class StepEnergy:
    """The energy of one client's steps (core/src/power.rs)."""

    @property
    def power(self) -> DevicePower | None: ...
    @property
    def intensity(self) -> Intensity | None: ...
    @property
    def active_devices(self) -> float: ...
    def __init__(self, *, power: DevicePower | None, num_devices: int, stages: int = 1,
                 intensity: Intensity | None = None) -> None: ...
    def utilization(self, timing: Timing, duration_ns: int, num_new: Seq[int],
                    context: Seq[int]) -> tuple[float, float]:
        """(u_compute, u_memory): the shares of ``duration_ns`` bound by arithmetic and by memory."""
    def step(self, timing: Timing, duration_ns: int, num_new: Seq[int], context: Seq[int]) -> StepJoules:
        """The energy of one step lasting ``duration_ns``: the backend's ``energy_j`` where set, else the model's."""

MAX_SIM_NS: int
DONE: int
ARRIVAL: int
WAKE: int

class Kernel:
    """The discrete-event kernel: a clock and a heap of events ``fn(*args)`` ordered by time, priority
    and scheduling order (core/src/kernel.rs)."""

    @property
    def now_ns(self) -> int:
        """The simulated time of the event being handled."""
    @now_ns.setter
    def now_ns(self, value: int) -> None: ...
    @property
    def num_events(self) -> int:
        """Events handled so far."""
    @property
    def log_limit(self) -> int: ...
    @property
    def log(self) -> list[tuple[int, str]]:
        """(time_ns, description) of the first ``log_limit`` events handled."""
    @property
    def num_pending(self) -> int:
        """Events scheduled and not yet handled."""
    @property
    def in_place(self) -> bool:
        """Callers may handle the events due before any other in place; off, every event goes
        through the heap (:meth:`peek` is always now)."""
    def __init__(self, *, log_limit: int = 0, in_place: bool = True) -> None: ...
    def call_at(self, time_ns: int, priority: int, fn: Callable[..., object], *args: object, label: str = "") -> None:
        """Schedules ``fn(*args)`` at ``time_ns`` (never in the past)."""
    def peek(self) -> int:
        """When the next event is handled (``now_ns`` when the run stops first; past MAX_SIM_NS if none)."""
    def advance(self, time_ns: int, label: str) -> None:
        """Handles an event its caller handles itself, at ``time_ns`` (one before :meth:`peek`)."""
    def run(self, *, stop: Callable[[], bool] | None = None, flag: StopFlag | None = None) -> None:
        """Handles events in order until the heap is empty, ``flag`` is set or ``stop()`` is true (each
        checked before every event)."""

class StopFlag:
    """A run's stop sign (:meth:`Kernel.run`'s ``flag``): set by a signal handler or another thread,
    read by the kernel between two events without a Python call."""

    def __init__(self) -> None: ...
    def set(self) -> None:
        """Stops the run before its next event."""
    def is_set(self) -> bool:
        """Whether it was set."""

# -- the roofline's step-time model (core/src/roofline; adapters/roofline documents it) ---------

PCIE_PROTOCOLS: list[tuple[str, float, float, float]]
CUSTOM_AR_MAX_BYTES: float

class BatchGroup:
    """Sums over the sequences of one attention group (``operators.Group``)."""

    seqs: int
    new: float
    ctx: float
    pairs: float
    causal: float
    max_len: float
    def __init__(self, seqs: int = 0, new: float = 0.0, ctx: float = 0.0, pairs: float = 0.0, causal: float = 0.0,
                 max_len: float = 0.0) -> None: ...

class BatchStats:
    """One step: token counts, attention groups and LoRA adapters (``operators.batch_stats``)."""

    tokens: float
    seqs: int
    prefill_share: float
    prefill: BatchGroup
    decode: BatchGroup
    lora: tuple[tuple[int, float], ...]
    def __init__(self, tokens: float, seqs: int, prefill_share: float, prefill: BatchGroup, decode: BatchGroup,
                 lora: Seq[tuple[int, float]] = ()) -> None: ...
    def _replace(self, *, tokens: float | None = None, lora: Seq[tuple[int, float]] | None = None) -> BatchStats:
        """A copy with ``tokens`` or ``lora`` changed."""

StepTimes = tuple[int, int, int, int, int, dict[str, float] | None, float | None]

class RooflineModel:
    """A roofline session's model (``estimator.SessionModel.native``): times steps, memoizing what a
    decode run leaves unchanged. Answers (duration, compute, memory, communication, dispatch ns,
    breakdown or None, energy_j or None)."""

    def __init__(self, shape: Any, params: Any, device: Any) -> None: ...
    def estimate(self, stats: BatchStats, with_breakdown: bool = True) -> StepTimes: ...
    def predict_batch(self, new: Seq[int], context: Seq[int], dp_rank_tokens: Seq[int], drafts: Seq[int],
                      lora_ranks: Seq[int], lora_ids: Seq[int], slim: bool = False) -> StepTimes:
        """Times a batch as the backend receives it, from the model's timing cache where it was timed
        before (raises InvalidArgument for per-sequence fields of the wrong length)."""
    def cached(self) -> int:
        """Timings in the model's cache."""
    def device_times(self, stats: BatchStats, with_breakdown: bool = True) -> tuple[
            list[float], float, float, dict[str, float], list[float]]: ...
    def layer_busy(self, stats: BatchStats, keys: Seq[str]) -> list[float]:
        """Device time per module of one layer's ops whose keys are in ``keys`` (attention core aside)."""

def kernel_ns(kind: int, work: float, traffic: float, rows: float, k: Any, peak_flops: float, mem_bw: float,
              span: float = 0.0) -> tuple[float, bool]: ...
def attention_tiles(heads: float, kv_heads: float, tokens: float, seqs: float) -> float: ...
def moe_ns(shape: Any, tokens: float, active: float, k: Any, peak_flops: float, mem_bw: float) -> float: ...
def all_reduce_ns(size_bytes: float, ranks: int, bus_bytes_per_s: float, *, latency_us: float = 0.0,
                  hop_latency_us: float = 0.0, formula: str = "ring") -> float: ...
def all_to_all_ns(size_bytes: float, ranks: int, bus_bytes_per_s: float, *, latency_us: float = 0.0,
                  hop_latency_us: float = 0.0) -> float: ...
def path_protocol_ns(link: Any, protocol: int, size_bytes: float, steps: int, share: float) -> float: ...
def path_fastest_ns(link: Any, size_bytes: float, steps: int, share: float) -> tuple[float, int]: ...
def path_all_reduce_ns(size_bytes: float, ranks: int, link: Any) -> float: ...
def path_all_to_all_ns(size_bytes: float, ranks: int, link: Any) -> float: ...
def batch_stats(new_tokens: Seq[int], context_tokens: Seq[int], draft_tokens: Seq[int] = ()) -> BatchStats: ...
def decode_stats(seqs: int, context_sum: int) -> BatchStats: ...
def lora_adapters(new_tokens: Seq[int], ranks: Seq[int], ids: Seq[int]) -> tuple[tuple[int, float], ...]: ...
def run_stage(pre: Seq[tuple[float, float]], layer: Seq[tuple[float, float]], num_layers: int,
              post: Seq[tuple[float, float]]) -> float: ...

# The run folder's rows as text (core/src/run_files.rs; numbers as Python formats them, core/src/text.rs).
def float_repr(x: float) -> str:
    """``repr(x)``."""
def float_text(x: float) -> str:
    """CSV text of a float: empty for NaN, else ``"%.9g" % x``."""
def ns_to_s_text(ns: int) -> str:
    """Exact decimal seconds of an integer nanosecond count: 1_500_000_000 -> "1.5"."""
def stage_cells(record: RequestRecord, kinds: Seq[str]) -> list[str | int | None]:
    """requests.csv's five cells per stage kind of one request, as values (None: no value)."""
def client_rows(name_cell: str, start_ns: np.ndarray, end_ns: np.ndarray, steps: np.ndarray, num_seqs: np.ndarray,
                prefill_tokens: np.ndarray, decode_tokens: np.ndarray, kv_blocks_used: np.ndarray,
                num_waiting: np.ndarray) -> str:
    """clients.csv's rows of one client, each ending in a newline (int64 columns; ``num_seqs`` float64)."""
def step_events(pid: int, start_ns: np.ndarray, end_ns: np.ndarray, num_seqs: np.ndarray,
                prefill_tokens: np.ndarray, decode_tokens: np.ndarray, kv_blocks_used: np.ndarray,
                num_waiting: np.ndarray) -> str:
    """trace.json's three events per step of a client (int64 columns), joined with ",\\n"."""

class RequestsCsv:
    """requests.csv's rows, a chunk of requests at a time (``quote``: a string's csv cell)."""

    def __init__(self, kinds: Seq[str], with_lora: bool, with_class: bool, with_sessions: bool,
                 quote: Callable[[object], str]) -> None: ...
    def rows(self, records: Seq[RequestRecord], ttft_s: np.ndarray, tpot_s: np.ndarray, e2e_s: np.ndarray,
             tbt_max_s: np.ndarray, queue_s: np.ndarray) -> str:
        """The rows of ``records``, each ending in a newline (float64 columns aligned with them)."""

class RequestSpans:
    """trace.json's events of requests (``encode``: a value's JSON text; spans from ``cutoff_ns`` on left out)."""

    def __init__(self, pid: int, cutoff_ns: int | None, encode: Callable[[object], str]) -> None: ...
    def events(self, records: Seq[RequestRecord]) -> str:
        """The events of ``records``, joined with ",\\n" ("" when none has any)."""
