"""vLLM's CPU KV offload tier of one client, and an LMCache-style storage tier below it.

As vLLM 0.12 to 0.15's ``OffloadingConnector`` with its CPU backend and LRU manager
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py``,
``vllm/v1/kv_offload/``), block for block (offloaded blocks of the GPU's block size):

- **stores, on compute**: after each step, every full block a scheduled request has computed
  and the host tier lacks is copied there (``_get_reqs_to_store``: the store is issued with
  the step and runs on its own stream once the step's forward is done, so it starts at the
  step's end). Room is made by evicting the least recently used blocks that are stored
  and not being read; when there is not enough, the store is skipped and tried again after
  the next step (``prepare_store`` returns None). A block is found by lookups only once its
  copy is done (``complete_store``);
- **loads, on a prefix hit**: a request with nothing computed (new, or preempted) that the
  GPU's prefix cache leaves with leading blocks the host tier holds gets GPU blocks for
  them and waits while they are copied back (``get_num_new_matched_tokens`` returns them
  with ``load_kv_async``: the request is ``WAITING_FOR_REMOTE_KVS``, skipped by the queue
  without blocking it, taking no token budget and no seat); once the copy is reported done
  it is scheduled with those tokens computed;
- **when the scheduler learns of a copy**: the worker polls its transfers once per step
  (``get_finished``, as the step is launched) and the step's output carries the news. So a
  step formed after an idle engine sees copies done by then, and one formed as a step ends
  sees those done by the start of that step, or with async scheduling (the step formed one
  step ahead) by the start of the step before it.

Each direction of the host link (PCIe) copies one block after another: device to host for
stores, host to device for loads, each at ``host_gbps``. A storage tier takes a copy of every
block stored to the host tier (write-through, at its write rate, after the host copy) and
serves, after the host tier, the blocks the host tier lost: read at its read rate, then over
the host link. Its capacity is LRU too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from cosim_core import Sequence, block_hashes

from .kv import BlockManager

NS_PER_S = 1_000_000_000
WAITING, LOADING = "waiting", "loading"  # the Sequence states a load moves between (core/src/sequence.rs)


@dataclass(frozen=True)
class StorageSpec:
    """An LMCache-style tier below the host tier (:class:`~cosim.hub.config.offload.StorageTierConfig`)."""

    blocks: int
    read_ns_per_block: float
    write_ns_per_block: float
    latency_ns: int


@dataclass(frozen=True)
class OffloadSpec:
    """One client's offload tiers, in its own units.

    Attributes:
        cpu_blocks: host tier capacity, blocks.
        block_size: tokens per block.
        block_bytes: one block on one device (each device copies its share over its own link).
        host_ns_per_block: one block's copy over the host link, either way.
        storage: the storage tier, if any.
        one_step_ahead: the client forms each step one step ahead (vLLM's async scheduling).
    """

    cpu_blocks: int
    block_size: int
    block_bytes: int
    host_ns_per_block: float
    storage: StorageSpec | None = None
    one_step_ahead: bool = False


@dataclass
class OffloadStats:
    """What the tiers did (summary.json's ``clients.<name>.kv_offload``)."""

    queried_blocks: int = 0  # blocks looked up past the GPU's prefix hit
    cpu_hit_blocks: int = 0
    storage_hit_blocks: int = 0
    loads: int = 0
    load_ns: int = 0  # summed over loads: issued -> copied
    stored_blocks: int = 0
    store_busy_ns: int = 0  # the device-to-host link's time on stores
    skipped_stores: int = 0  # stores the host tier had no room for (tried again later)
    evicted_blocks: int = 0
    storage_stored_blocks: int = 0

    def summary(self, block_bytes: int) -> dict[str, float | int | None]:
        """The counts, with the hit rate over the blocks looked up and the times in seconds."""
        hits = self.cpu_hit_blocks + self.storage_hit_blocks
        return {"queried_blocks": self.queried_blocks, "hit_blocks": hits, "cpu_hit_blocks": self.cpu_hit_blocks,
                "storage_hit_blocks": self.storage_hit_blocks,
                "hit_rate": hits / self.queried_blocks if self.queried_blocks else None,
                "loads": self.loads, "load_s": self.load_ns / NS_PER_S,
                "mean_load_s": self.load_ns / self.loads / NS_PER_S if self.loads else None,
                "stored_blocks": self.stored_blocks, "stored_bytes": self.stored_blocks * block_bytes,
                "store_busy_s": self.store_busy_ns / NS_PER_S, "skipped_stores": self.skipped_stores,
                "evicted_blocks": self.evicted_blocks, "storage_stored_blocks": self.storage_stored_blocks}


class _Tier:
    """Blocks by hash, least recently used first, each with the time its copy is done."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: OrderedDict[bytes, int] = OrderedDict()  # hash -> ready (copy done) ns
        self.reading: dict[bytes, int] = {}  # hash -> loads reading it (not evictable)

    def ready(self, block: bytes, by_ns: int) -> bool:
        at = self.blocks.get(block)
        return at is not None and at <= by_ns

    def touch(self, blocks: list[bytes]) -> None:
        for block in blocks:
            if block in self.blocks:
                self.blocks.move_to_end(block)

    def make_room(self, count: int, now_ns: int) -> int | None:
        """Evicts least recently used blocks (stored, not being read) until ``count`` more fit; how
        many it evicted, or None (nothing evicted) when not enough can go."""
        excess = len(self.blocks) + count - self.capacity
        if excess <= 0:
            return 0
        victims = []
        for block, ready in self.blocks.items():
            if ready <= now_ns and not self.reading.get(block):
                victims.append(block)
                if len(victims) == excess:
                    break
        if len(victims) < excess:
            return None
        for block in victims:
            del self.blocks[block]
        return excess


class OffloadTier:
    """The host tier (and storage tier) of one client (see the module docstring).

    Args:
        spec: capacities and copy times.
        kv: the client's GPU blocks (loads take blocks there; loaded blocks are cached there).
        clock: the simulated time now.
    """

    def __init__(self, spec: OffloadSpec, kv: BlockManager, clock: Callable[[], int]) -> None:
        self.spec, self.kv, self.clock = spec, kv, clock
        self.stats = OffloadStats()
        self._cpu = _Tier(spec.cpu_blocks)
        self._storage = _Tier(spec.storage.blocks) if spec.storage is not None else None
        self._to_host_free_ns = self._to_device_free_ns = self._storage_write_free_ns = 0
        self._stored: dict[int, tuple[Sequence, int]] = {}  # id(seq) -> (seq, blocks stored or skipped so far)
        self._loading: dict[int, tuple[Sequence, int, list[bytes]]] = {}  # id(seq) -> (seq, done ns, blocks)
        self._asked: dict[int, Sequence] = {}  # the sequences counted in queried_blocks, until they run
        self._starts: list[int] = []  # the last two steps' starts
        self._last_end_ns = -1

    def summary(self) -> dict[str, float | int | None]:
        """summary.json's ``clients.<name>.kv_offload``: its capacity and :class:`OffloadStats`."""
        return {"cpu_blocks": self.spec.cpu_blocks,
                "storage_blocks": self.spec.storage.blocks if self.spec.storage is not None else 0,
                **self.stats.summary(self.spec.block_bytes)}

    # -- the scheduler's view of time ------------------------------------------------
    def step_started(self) -> None:
        self._starts = [*self._starts[-1:], self.clock()]

    def step_ended(self) -> None:
        self._last_end_ns = self.clock()

    def _known_by(self) -> int:
        """Copies done by this time are known to a step formed now (the module's last point)."""
        now = self.clock()
        if not self._starts or self._last_end_ns < now:
            return now  # after an idle engine: its loop polled the copies all along
        return self._starts[0] if self.spec.one_step_ahead else self._starts[-1]

    # -- loads -----------------------------------------------------------------------
    def start_load(self, seq: Sequence, hit: list[Hashable], reserve_tokens: int) -> bool:
        """Admits ``seq`` (nothing computed; ``hit``: its GPU prefix hit) to load the blocks after
        ``hit`` that the tiers hold, if any and if GPU blocks for them and ``reserve_tokens`` more
        tokens after them can be had: it takes the blocks and waits, LOADING, in the queue."""
        if seq.num_computed or seq.state != WAITING:
            return False
        size = self.spec.block_size
        most = (seq.num_tokens - 1) // size  # at least one token is left to compute, as for a GPU hit
        if most <= len(hit):
            return False
        chain = block_hashes(seq, most, size)
        known = self._known_by()
        self._cpu.touch(chain)
        found: list[bytes] = []
        from_storage = 0
        for block in chain[len(hit):]:
            if self._cpu.ready(block, known):
                found.append(block)
            elif self._storage is not None and self._storage.ready(block, known):
                found.append(block)
                from_storage += 1
            else:
                break
        if id(seq) not in self._asked:  # once per admission (a queue blocked asks again each step)
            self._asked[id(seq)] = seq
            self.stats.queried_blocks += most - len(hit)
        if not found:
            return False
        tokens = len(found) * size
        if not self.kv.fits(seq, max(tokens, reserve_tokens), hit):
            return False
        self.kv.allocate(seq, 0, hit)
        self.kv.grow_by(seq, len(found))  # not cached until loaded (vLLM's delay_cache_blocks)
        for block in found:
            self._cpu.reading[block] = self._cpu.reading.get(block, 0) + 1
        now = self.clock()
        start = max(now, self._to_device_free_ns)
        copy = len(found) * self.spec.host_ns_per_block
        storage = self.spec.storage
        if from_storage and storage is not None:  # read from storage first, then over the host link
            start += storage.latency_ns + round(from_storage * storage.read_ns_per_block)
        done = start + round(copy)
        self._to_device_free_ns = done
        self._loading[id(seq)] = (seq, done, found)
        seq.state = LOADING
        stats = self.stats
        stats.cpu_hit_blocks += len(found) - from_storage
        stats.storage_hit_blocks += from_storage
        stats.loads += 1
        stats.load_ns += done - now
        return True

    def loaded(self, seq: Sequence) -> bool:
        """Whether ``seq`` (LOADING) is known to have its blocks; if so it holds them, cached and computed,
        and waits as any other."""
        entry = self._loading.get(id(seq))
        if entry is None or entry[1] > self._known_by():
            return False
        del self._loading[id(seq)]
        found = entry[2]
        for block in found:
            left = self._cpu.reading.get(block, 0) - 1
            if left > 0:
                self._cpu.reading[block] = left
            else:
                self._cpu.reading.pop(block, None)
        seq.num_computed += len(found) * self.spec.block_size
        self.kv.cache_full_blocks(seq, seq.num_computed)
        seq.state = WAITING
        self._stored[id(seq)] = (seq, seq.num_computed // self.spec.block_size)  # those are in the host tier
        return True

    def next_load_ns(self) -> int | None:
        """When the next copy back to the GPU is done, if any is under way."""
        return min((done for _, done, _ in self._loading.values()), default=None)

    # -- stores ----------------------------------------------------------------------
    def store_step(self, seqs: list[Sequence], num_new: list[int]) -> None:
        """A step that computed ``num_new`` tokens of each of ``seqs`` ended now: their new full blocks
        the host tier lacks are copied there (module docstring)."""
        size, spec, stats = self.spec.block_size, self.spec, self.stats
        now = self.clock()
        asked = self._asked
        for seq, num in zip(seqs, num_new):
            key = id(seq)
            if asked:
                asked.pop(key, None)  # it runs: a lookup after a preemption counts again
            full = min(seq.num_computed + num, seq.num_tokens) // size
            start = self._stored[key][1] if key in self._stored else 0
            if full <= start:
                continue
            chain = block_hashes(seq, full, size)
            new = [block for block in chain[start:] if block not in self._cpu.blocks]
            evicted = self._cpu.make_room(len(new), now)
            if evicted is None:
                stats.skipped_stores += 1
                continue
            stats.evicted_blocks += evicted
            self._stored[key] = (seq, full)
            self._cpu.touch(chain)
            if not new:
                continue
            begin = max(now, self._to_host_free_ns)
            busy = round(len(new) * spec.host_ns_per_block)
            done = self._to_host_free_ns = begin + busy
            stats.store_busy_ns += busy
            stats.stored_blocks += len(new)
            for block in new:
                self._cpu.blocks[block] = done
            self._write_through(new, done, now)

    def _write_through(self, blocks: list[bytes], copied_ns: int, now_ns: int) -> None:
        """The storage tier takes a copy of blocks new to the host tier, once they are there."""
        storage, tier = self.spec.storage, self._storage
        if storage is None or tier is None:
            return
        new = [block for block in blocks if block not in tier.blocks]
        if not new or tier.make_room(len(new), now_ns) is None:
            return
        begin = max(copied_ns, self._storage_write_free_ns) + storage.latency_ns
        done = self._storage_write_free_ns = begin + round(len(new) * storage.write_ns_per_block)
        for block in new:
            tier.blocks[block] = done
        self.stats.storage_stored_blocks += len(new)

    def forget(self, seq: Sequence) -> None:
        """``seq`` finished: nothing more of it is stored."""
        self._stored.pop(id(seq), None)
        self._asked.pop(id(seq), None)
