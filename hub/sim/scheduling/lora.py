"""LoRA adapters on one client: GPU slots, a host cache, and what each step loads.

Modelled on vLLM's LoRA serving. The scheduler (``vllm/v1/core/sched/scheduler.py``)
lets a step hold requests of at most ``max_loras`` distinct adapters: a waiting
request whose adapter would exceed that is skipped and keeps its place, and
requests behind it may still be admitted. The worker's
``LRUCacheWorkerLoRAManager`` (``vllm/lora/worker_manager.py``) keeps
``max_cpu_loras`` adapters in host memory (a miss reads the adapter from disk)
and ``max_loras`` of them in GPU slots; activating an adapter that holds no
slot copies it into one, evicting the least recently used.

Here, as :class:`LoraSlots`:

- an adapter is *busy* while a running sequence uses it; the cap counts the
  busy adapters plus the one asked for, so there is always an idle resident
  adapter to evict when the slots are full (never a busy one);
- a load costs ``device bytes / host-to-device GB/s``, plus ``adapter bytes /
  disk GB/s`` when the host cache misses; the time is added to the step that
  first uses the adapter (vLLM loads before the forward pass, in
  ``GPUModelRunner._set_active_loras``);
- every step touches its adapters in both LRU orders, as vLLM's
  ``set_active_adapters`` does each step.

The scheduler writes no records: a step's loads and hits ride on its batch
(:class:`LoraStep`), and the client adds them to its :class:`LoraStats`.
A :meth:`LoraSlots.copy` lets lookahead schedule hypothetically.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["AdapterLoad", "LoraSlots", "LoraSpec", "LoraStats", "LoraStep"]


@dataclass(frozen=True, slots=True)
class LoraSpec:
    """One client's LoRA capacity and load rates.

    Attributes:
        max_loras: GPU slots (distinct adapters a step may hold).
        max_cpu_loras: adapters kept in host memory (>= max_loras).
        device_bytes_per_rank: bytes one rank-1 adapter occupies on one device (this TP/PP
            shard); an adapter of rank r takes r times this (:func:`cosim.hub.config.memory.lora_adapter_bytes`).
        host_bytes_per_rank: bytes of a whole rank-1 adapter, as read from disk.
        host_to_device_gbps: host-to-device copy bandwidth, GB/s (bytes per ns).
        disk_to_host_gbps: disk-to-host read bandwidth, GB/s.
    """

    max_loras: int
    max_cpu_loras: int
    device_bytes_per_rank: int
    host_bytes_per_rank: int
    host_to_device_gbps: float
    disk_to_host_gbps: float

    def load_ns(self, rank: int, *, from_disk: bool) -> int:
        """Time to bring an adapter of ``rank`` into a GPU slot (from disk first when ``from_disk``)."""
        ns = rank * self.device_bytes_per_rank / self.host_to_device_gbps  # bytes / (bytes/ns)
        if from_disk:
            ns += rank * self.host_bytes_per_rank / self.disk_to_host_gbps
        return int(ns)


@dataclass(frozen=True, slots=True)
class AdapterLoad:
    """An adapter brought into a GPU slot for a step."""

    name: str
    slot: int
    evicted: str | None  # the idle adapter whose slot it took, if the slots were full
    from_disk: bool  # the host cache missed
    load_ns: int


@dataclass(slots=True)
class LoraStep:
    """The adapters of one step, as a backend and the client's records see them.

    Attributes:
        ranks: per sequence, its adapter's rank (0: the base model).
        ids: per sequence, its adapter numbered 1, 2, ... in order of first appearance in the
            step (0: none); equal batches get equal ids whatever the adapters' names, so their
            timings are shared.
        loads: adapters loaded for this step.
        hits: sequences admitted in this step whose adapter was already in a slot.
    """

    ranks: tuple[int, ...] = ()
    ids: tuple[int, ...] = ()
    loads: list[AdapterLoad] = field(default_factory=list)
    hits: int = 0

    @property
    def load_ns(self) -> int:
        """Time the step spends loading adapters before its forward pass."""
        return sum(load.load_ns for load in self.loads)

    @property
    def key(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The (StepBatch field, values) pairs a step's timing key carries (see ``Signature``)."""
        return ("lora_ranks", self.ranks), ("lora_ids", self.ids)


class LoraSlots:
    """The GPU slots and host cache of one client's adapters (see the module docstring).

    Args:
        spec: capacity and load rates.
    """

    def __init__(self, spec: LoraSpec) -> None:
        self.spec = spec
        self.resident: OrderedDict[str, int] = OrderedDict()  # adapter -> slot, least recently used first
        self.host: OrderedDict[str, None] = OrderedDict()  # adapters in host memory, least recently used first

    def copy(self) -> LoraSlots:
        """A copy to schedule hypothetically (lookahead)."""
        copy = LoraSlots(self.spec)
        copy.resident, copy.host = self.resident.copy(), self.host.copy()
        return copy

    def is_resident(self, name: str) -> bool:
        """Whether ``name`` holds a GPU slot."""
        return name in self.resident

    def activate(self, name: str, rank: int, busy: set[str]) -> AdapterLoad | None:
        """Makes ``name`` resident for a step; None when it already was (a hit).

        Args:
            name: the adapter.
            rank: its rank (its size).
            busy: adapters running sequences use (never evicted); the caller keeps
                ``len(busy) < max_loras`` when ``name`` is not among them.
        """
        if name in self.resident:
            self.resident.move_to_end(name)
            return None
        evicted = None
        if len(self.resident) >= self.spec.max_loras:
            evicted = next(a for a in self.resident if a not in busy)  # LRU idle: exists, see `busy`
            slot = self.resident.pop(evicted)
        else:
            taken = set(self.resident.values())
            slot = next(s for s in range(self.spec.max_loras) if s not in taken)  # vLLM: first free slot
        from_disk = name not in self.host
        self.resident[name] = slot
        self.host[name] = None
        self.host.move_to_end(name)
        if len(self.host) > self.spec.max_cpu_loras:
            # Room in host memory: the least recently used adapter that holds no slot (one exists,
            # as max_cpu_loras >= max_loras).
            del self.host[next(a for a in self.host if a not in self.resident)]
        return AdapterLoad(name, slot, evicted, from_disk, self.spec.load_ns(rank, from_disk=from_disk))

    def touch(self, names: Iterable[str]) -> None:
        """Marks the adapters of a step used now, in order."""
        for name in names:
            self.resident.move_to_end(name)
            self.host.move_to_end(name)


class AdapterRequest(Protocol):
    """What a request says of its adapter (a :class:`~cosim.hub.sim.records.RequestRecord`)."""

    lora: str | None
    lora_rank: int


def activate(slots: LoraSlots, request: AdapterRequest, step: LoraStep | None, busy: set[str]) -> LoraStep:
    """Brings an admitted request's adapter into a GPU slot for a step, noting the load (or hit) on
    ``step`` (a new one if None), which it returns; ``busy`` gains the adapter. The compiled
    scheduler (core/src/scheduler.rs) calls it as it admits a sequence naming an adapter."""
    assert request.lora is not None
    step = step or LoraStep()
    load = slots.activate(request.lora, request.lora_rank, busy)
    if load is None:
        step.hits += 1
    else:
        step.loads.append(load)
    busy.add(request.lora)
    return step


def step_of(slots: LoraSlots, requests: Iterable[AdapterRequest], step: LoraStep | None) -> LoraStep | None:
    """The adapters of a step whose sequences are those of ``requests``, in order, set on ``step``
    (a new one if None; None: the base model only), and touched. The compiled scheduler calls it
    for each step it forms."""
    numbers: dict[str, int] = {}
    ranks, ids = [], []
    for request in requests:
        if request.lora is None:
            ranks.append(0)
            ids.append(0)
        else:
            ranks.append(request.lora_rank)
            ids.append(numbers.setdefault(request.lora, len(numbers) + 1))
    if numbers:
        slots.touch(numbers)
        step = step or LoraStep()
        step.ranks, step.ids = tuple(ranks), tuple(ids)
    return step


class LoraStats:
    """A client's adapter loads, over a run."""

    def __init__(self) -> None:
        self.loads = self.disk_loads = self.evictions = self.hits = self.load_ns = 0

    def record(self, step: LoraStep) -> None:
        """Counts a step's loads and hits."""
        self.hits += step.hits
        for load in step.loads:
            self.loads += 1
            self.disk_loads += load.from_disk
            self.evictions += load.evicted is not None
            self.load_ns += load.load_ns

    def summary(self) -> dict[str, Any]:
        """summary.json's ``lora`` block of a client."""
        return {"loads": self.loads, "disk_loads": self.disk_loads, "evictions": self.evictions,
                "hits": self.hits, "load_time_s": self.load_ns / 1e9}
