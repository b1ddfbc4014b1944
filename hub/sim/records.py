"""What a run records: per request, per stage, per client step.

These plain records are what the coordinator fills in and what
:mod:`cosim.hub.metrics` turns into summary.json, CSVs, traces and plots.
Times are simulated integer nanoseconds; -1 means "did not happen".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .power import DevicePower, StepJoules
from .spill import INT64, SpillRows

if TYPE_CHECKING:
    from .scheduling.lora import LoraStats
    from .scheduling.speculative import SpecStats
    from .workload.token_ids import SegmentIds


@dataclass(slots=True)
class StageRecord:
    """One stage of one request (prefill, decode, rag, ...)."""

    kind: str
    client: str
    enqueue_ns: int  # the stage was handed to the client (after any transfer)
    start_ns: int = -1  # the client first scheduled it
    end_ns: int = -1  # the client finished it
    transfer_ns: int = 0  # time spent moving its input (KV, context) before enqueue_ns


@dataclass(slots=True)
class RequestRecord:
    """One request from arrival to its last token.

    TTFT is ``first_token_ns - arrival_ns``; TPOT is
    ``(finish_ns - first_token_ns) / (output_tokens / branches - 1)`` (one
    path's output tokens after the first, as vLLM reports it; parallel paths
    decode side by side); E2E is ``finish_ns - arrival_ns``.
    """

    id: int
    model: str
    arrival_ns: int
    input_tokens: int
    output_tokens: int  # tokens asked for
    generated_tokens: int = 0  # tokens produced
    first_token_ns: int = -1
    finish_ns: int = -1
    max_tbt_ns: int = 0  # longest gap between consecutive output tokens
    last_token_ns: int = -1
    preemptions: int = 0
    cached_tokens: int = 0  # prompt tokens served from a prefix cache
    prefix_id: str | None = None
    prefix_tokens: int = 0
    prompt_token_ids: Sequence[int] | np.ndarray | SegmentIds | None = None  # the prompt's ids, where known
    template: str = "chat"
    branches: int = 1  # parallel reasoning paths; output_tokens counts all of them
    branches_done: int = 0
    pipeline: tuple[str, ...] = ("prefill", "decode")
    stage_index: int = 0  # next pipeline stage to push
    retrieved_tokens: int = 0  # prompt tokens whose KV a kv_retrieval stage fetched
    retrieved_at_decode: bool = False  # that KV was fetched to the decode side too (no P->D copy needed)
    context_bytes: int = 0  # retrieved text a RAG stage sends on to prefill
    data_at: str = ""  # client holding data the next stage needs
    stages: list[StageRecord] = field(default_factory=list)
    lora: str | None = None  # the LoRA adapter it names (None: the base model)
    lora_rank: int = 0  # that adapter's rank
    cls: str | None = None  # its request class (workload.classes), if any
    priority: int = 0  # vLLM's request priority (lower first)
    deadline_ns: int = 2**62  # when its first token is due (earliest deadline first); none: never
    session: int = -1  # the session it is a turn of (hub/sim/conversations.py); -1: none
    turn: int = -1  # its turn's index in that session
    output_token_ids: np.ndarray | SegmentIds | None = None  # its output's ids, where a later turn reuses them
    # As its client saw it, through the API server (hub/sim/frontend.py); -1 without one. arrival_ns is then
    # when the engine got it, and client_send_ns when the client sent it.
    client_send_ns: int = -1
    client_first_token_ns: int = -1
    client_last_token_ns: int = -1
    # Every gap between its consecutive tokens (ns), at the engine and at its client, where the run keeps
    # them (output.benchmark_details: vllm bench serve's per-request itls); None otherwise.
    itl_ns: list[int] | None = None
    client_itl_ns: list[int] | None = None

    @property
    def is_finished(self) -> bool:
        return self.finish_ns >= 0


@dataclass(slots=True)
class ClientInfo:
    """Static facts about a client, for reports."""

    name: str
    role: str
    model: str
    backend: str
    fidelity: str
    device: str
    num_devices: int
    price_per_hour_usd: float = 0.0
    kv_capacity_blocks: int = 0
    block_size_tokens: int = 0
    kv_memory: dict[str, int | float] | None = None  # one device's memory split (cosim.hub.config.memory.KVMemory)
    meters_energy: bool = False  # its steps' energy is accounted (LLM clients; see cosim.hub.sim.power)
    power: DevicePower | None = None  # one device's power; None: no power figure
    existed_ns: int | None = None  # how long it existed (a pool's replica, hub/sim/autoscale); None: the whole run


class Reporting(Protocol):
    """A part of a client that reports its own counts (a KV offload tier)."""

    def summary(self) -> dict[str, float | int | None]: ...


class ClientTimeline:
    """One row per step of one client, kept as growable columns.

    The rows spill to a temporary file as they accumulate (:class:`cosim.hub.sim.spill.SpillRows`),
    so a long run's memory does not grow with its steps.

    Columns: ``start_ns``, ``end_ns``, ``num_seqs``, ``prefill_tokens``,
    ``decode_tokens``, ``kv_blocks_used``, ``num_waiting``, ``timed_tokens``
    (the tokens a benchmark client times at the step's end: one per request
    that got a token, as ``token_gaps`` counts them, plus first tokens;
    :meth:`token_times`, for the most output tokens per second).

    Energy (:meth:`add_energy`): ``energy_j``, the steps' joules where known;
    ``device_s``, the device-seconds they kept busy; ``reported_energy_steps``,
    the steps whose backend reported it.

    ``token_gaps`` counts the inter-token latencies (ITL) of the tokens the
    client sampled after each request's first: gap in ns -> number of tokens.
    Exact, and compact: a step gives every sequence in it the same gap, so
    there are at most as many keys as steps, whatever the number of tokens.
    Past :attr:`MAX_GAP_KEYS` keys the counts spill to a temporary file (the
    dict is emptied in place); :meth:`gap_counts` gives every count.
    """

    MAX_GAP_KEYS = 16_384

    # The columns a trace and clients.csv report; each row also holds its ``timed_tokens``.
    COLUMNS = ("start_ns", "end_ns", "num_seqs", "prefill_tokens", "decode_tokens",
               "kv_blocks_used", "num_waiting")

    def __init__(self) -> None:
        self._rows = SpillRows([(name, INT64) for name in (*self.COLUMNS, "timed_tokens")])
        self.energy_j = 0.0
        self.device_s = 0.0
        self.reported_energy_steps = 0
        self.token_gaps: dict[int, int] = {}
        self._spilled_gaps = SpillRows([("gap_ns", INT64), ("tokens", INT64)])
        self.lora: LoraStats | None = None  # a client's LoRA adapter loads, where it serves adapters
        self.speculative: SpecStats | None = None  # a client's speculative counts (its scheduler's)
        self.offload: Reporting | None = None  # a client's KV offload tier (scheduling/offload.py), for its counts

    def append(self, start_ns: int, end_ns: int, num_seqs: int, prefill_tokens: int, decode_tokens: int,
               kv_blocks_used: int, num_waiting: int, timed_tokens: int = 0) -> None:
        self._rows.append(start_ns, end_ns, num_seqs, prefill_tokens, decode_tokens, kv_blocks_used, num_waiting,
                          timed_tokens)
        if len(self.token_gaps) > self.MAX_GAP_KEYS:  # distinct gaps may grow with the steps: spill them
            for gap, tokens in self.token_gaps.items():
                self._spilled_gaps.append(gap, tokens)
            self.token_gaps.clear()  # in place: a client may hold the dict while it counts a step

    def gap_counts(self) -> dict[int, int]:
        """Every ITL count (:attr:`token_gaps` and those spilled): gap in ns -> tokens."""
        if not len(self._spilled_gaps):
            return dict(self.token_gaps)
        spilled = self._spilled_gaps.columns()
        gaps, where = np.unique(spilled["gap_ns"], return_inverse=True)
        tokens = np.zeros(gaps.size, dtype=np.int64)
        np.add.at(tokens, where, spilled["tokens"])
        counts = dict(zip(gaps.tolist(), tokens.tolist()))
        for gap, n in self.token_gaps.items():
            counts[gap] = counts.get(gap, 0) + n
        return counts

    def add_energy(self, step: StepJoules) -> None:
        """Counts one step's energy."""
        self.device_s += step.device_s
        if step.joules is not None:
            self.energy_j += step.joules
            self.reported_energy_steps += step.reported

    def __len__(self) -> int:
        return len(self._rows)

    def token_times(self) -> tuple[np.ndarray, np.ndarray]:
        """Output tokens at each step's end, as (instants in ns, tokens), for the steps that gave any
        (the pair :class:`cosim.hub.sim.token_times.TokenTimes` gives an API server's)."""
        columns = self._rows.columns()
        timed = columns["timed_tokens"] > 0
        return columns["end_ns"][timed], columns["timed_tokens"][timed]

    def columns(self) -> dict[str, np.ndarray]:
        """The timeline as int64 numpy columns (empty arrays for no steps)."""
        return self._rows.columns()

    def close(self) -> None:
        """Drops the steps and ITL counts kept on disk, and removes their temporary files."""
        self._rows.close()
        self._spilled_gaps.close()
