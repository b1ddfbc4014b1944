"""What a run records: per request, per stage, per client step.

These records are what the coordinator fills in and what
:mod:`cosim.hub.metrics` turns into summary.json, CSVs, traces and plots.
Times are simulated integer nanoseconds; -1 means "did not happen".
A request's and a stage's (:class:`RequestRecord`, :class:`StageRecord`) are the compiled core's
(core/src/records.rs), which writes each step's tokens and times on them natively
(core/src/recording.rs); they read, write, compare and pickle as the dataclasses they were. So is
a client's record of each step (:class:`ClientTimeline`, over core/src/timeline.rs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Self

import numpy as np
from cosim_core import RequestRecord, StageRecord, Timeline

from .power import DevicePower
from .spill import INT64, SpillRows

__all__ = ["ClientInfo", "ClientTimeline", "Reporting", "RequestRecord", "StageRecord"]

if TYPE_CHECKING:
    from .scheduling.lora import LoraStats
    from .scheduling.speculative import SpecStats


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


class ClientTimeline(Timeline):
    """One row per step of one client, kept as growable columns.

    Each step is recorded in the compiled core (:class:`cosim_core.Timeline`, core/src/timeline.rs:
    ``append``, ``add_energy``, ``count_gap``), which the client's step loop writes natively; this
    class makes its tables and reads them back for the reports. The rows spill to a temporary file
    as they accumulate (:class:`cosim.hub.sim.spill.SpillRows`), so a long run's memory does not
    grow with its steps.

    Columns: ``start_ns``, ``end_ns``, ``num_seqs``, ``prefill_tokens``,
    ``decode_tokens``, ``kv_blocks_used``, ``num_waiting``, ``timed_tokens``
    (the tokens a benchmark client times at the step's end: one per request
    that got a token, as the gap counts count them, plus first tokens;
    :meth:`token_times`, for the most output tokens per second).

    Energy (``add_energy``): ``energy_j``, the steps' joules where known;
    ``device_s``, the device-seconds they kept busy; ``reported_energy_steps``,
    the steps whose backend reported it.

    The gap counts are the inter-token latencies (ITL) of the tokens the
    client sampled after each request's first: gap in ns -> number of tokens.
    Exact, and compact: a step gives every sequence in it the same gap, so
    there are at most as many keys as steps, whatever the number of tokens.
    Past :attr:`MAX_GAP_KEYS` keys (read when the timeline is made) the counts
    spill to a temporary file; :meth:`gap_counts` gives every count.
    """

    MAX_GAP_KEYS = 16_384

    # The columns a trace and clients.csv report; each row also holds its ``timed_tokens``.
    COLUMNS = ("start_ns", "end_ns", "num_seqs", "prefill_tokens", "decode_tokens",
               "kv_blocks_used", "num_waiting")

    _rows: SpillRows
    _spilled_gaps: SpillRows

    def __new__(cls) -> Self:
        rows = SpillRows([(name, INT64) for name in (*cls.COLUMNS, "timed_tokens")])
        spilled_gaps = SpillRows([("gap_ns", INT64), ("tokens", INT64)])
        return super().__new__(cls, rows, spilled_gaps, cls.MAX_GAP_KEYS)

    def __init__(self) -> None:
        self.lora: LoraStats | None = None  # a client's LoRA adapter loads, where it serves adapters
        self.speculative: SpecStats | None = None  # a client's speculative counts (its scheduler's)
        self.offload: Reporting | None = None  # a client's KV offload tier (scheduling/offload.py), for its counts

    def gap_counts(self) -> dict[int, int]:
        """Every ITL count (those in memory, ``token_gaps``, and those spilled): gap in ns -> tokens."""
        if not len(self._spilled_gaps):
            return self.token_gaps
        spilled = self._spilled_gaps.columns()
        gaps, where = np.unique(spilled["gap_ns"], return_inverse=True)
        tokens = np.zeros(gaps.size, dtype=np.int64)
        np.add.at(tokens, where, spilled["tokens"])
        counts = dict(zip(gaps.tolist(), tokens.tolist()))
        for gap, n in self.token_gaps.items():
            counts[gap] = counts.get(gap, 0) + n
        return counts

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
