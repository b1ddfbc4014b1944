"""Time-synchronized mode of the memory backend: LRU contents and shared bandwidth."""

from __future__ import annotations

import itertools

import pytest

from cosim.adapters.memory import Hierarchy
from cosim.adapters.memory.channel import SharedChannel
from cosim.adapters.sdk import FailedPrecondition, InvalidArgument
from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import types_pb2 as pb

LOOKUP, STORE, EVICT = mem_pb.ACCESS_OP_LOOKUP, mem_pb.ACCESS_OP_STORE, mem_pb.ACCESS_OP_EVICT


def make_level(*, capacity_bytes: int = 10**12, bandwidth_gbps: float = 10.0, latency_ns: int = 0,
               shared_by: tuple[str, ...] = ()) -> mem_pb.MemoryLevel:
    return mem_pb.MemoryLevel(capacity_bytes=capacity_bytes, bandwidth_gbps=bandwidth_gbps,
                              latency_ns=latency_ns, shared_by=list(shared_by))


def make_hierarchy(*levels: mem_pb.MemoryLevel, kv_bytes_per_token: int = 100) -> Hierarchy:
    return Hierarchy(mem_pb.MemorySessionSpec(client="c", levels=levels, mode=pb.SYNC_MODE_TIME_SYNCHRONIZED,
                                              kv_bytes_per_token=kv_bytes_per_token))


class Driver:
    """Issues one access at a time with fresh ids."""

    def __init__(self, hierarchy: Hierarchy) -> None:
        self.hierarchy, self.ids = hierarchy, itertools.count(1)

    def __call__(self, op: int, key: str, size_bytes: int = 100, *, now_ns: int = 0,
                 client: str = "c") -> mem_pb.AccessResult:
        access = mem_pb.MemoryAccess(id=next(self.ids), op=op, key=key, size_bytes=size_bytes,
                                     now_ns=now_ns, client=client)
        return self.hierarchy.access([access])[0]


def contents(hierarchy: Hierarchy) -> list[list[str]]:
    """Keys of each level instance, least recently used first."""
    return [list(inst.store.entries) for inst in hierarchy.instances.values()]


def test_store_evicts_least_recently_used_down_the_hierarchy_then_drops() -> None:
    hierarchy = make_hierarchy(make_level(capacity_bytes=300), make_level(capacity_bytes=200))
    do = Driver(hierarchy)
    for key in "abc":
        assert do(STORE, key).level == 0
    assert do(LOOKUP, "a").level == 0  # a becomes most recently used; b is now the LRU
    do(STORE, "d")                      # evicts b to level 1
    assert contents(hierarchy) == [["c", "a", "d"], ["b"]]
    assert do(LOOKUP, "b").level == 1   # the hit copies b to level 0, demoting c
    assert contents(hierarchy) == [["a", "d", "b"], ["b", "c"]]
    do(STORE, "e")                      # a goes down; level 1's LRU (b) falls off the end
    assert contents(hierarchy) == [["d", "b", "e"], ["c", "a"]]


def test_lru_order_is_exact() -> None:
    """Level 0 holds 2 entries, level 1 holds 2; a fifth store drops the oldest past the end."""
    hierarchy = make_hierarchy(make_level(capacity_bytes=200), make_level(capacity_bytes=200))
    do = Driver(hierarchy)
    for key in "abcd":
        do(STORE, key)
    assert contents(hierarchy) == [["c", "d"], ["a", "b"]]
    do(STORE, "e")  # c goes down, pushing a (LRU of level 1) past the last level
    assert contents(hierarchy) == [["d", "e"], ["b", "c"]]
    miss = do(LOOKUP, "a", 250)
    assert (miss.level, miss.hit, miss.recompute_tokens, miss.duration_ns) == (-1, False, 3, 0)


def test_a_hit_further_out_promotes_a_copy_to_the_nearest_level() -> None:
    hierarchy = make_hierarchy(make_level(capacity_bytes=200), make_level(capacity_bytes=400, latency_ns=50))
    do = Driver(hierarchy)
    for key in "abc":
        do(STORE, key)
    first = do(LOOKUP, "a")
    assert (first.level, first.hit, first.duration_ns) == (1, True, 50 + 10)
    assert do(LOOKUP, "a").level == 0
    assert contents(hierarchy) == [["c", "a"], ["a", "b"]]


def test_evict_drops_the_key_everywhere() -> None:
    do = Driver(make_hierarchy(make_level(capacity_bytes=100), make_level()))
    do(STORE, "a")
    do(STORE, "b")  # a moves to level 1
    assert (do(EVICT, "a").level, do(EVICT, "a").hit) == (1, False)
    assert do(LOOKUP, "a").level == -1


def _lookup_pair(shared_by: tuple[str, ...]) -> list[int]:
    """Clients x and y each store a 1 MB key, then look it up at the same time."""
    hierarchy = make_hierarchy(make_level(latency_ns=1000, bandwidth_gbps=10.0, shared_by=shared_by))
    do = Driver(hierarchy)
    do(STORE, "kx", 10**6, client="x")
    do(STORE, "ky", 10**6, client="y")
    hierarchy.advance(10**9)
    accesses = [mem_pb.MemoryAccess(id=100 + i, op=LOOKUP, key=key, size_bytes=10**6, now_ns=10**9, client=client)
                for i, (key, client) in enumerate([("kx", "x"), ("ky", "y")])]
    return [r.duration_ns for r in hierarchy.access(accesses)]


def test_two_clients_sharing_a_level_stream_at_half_the_bandwidth() -> None:
    dedicated = _lookup_pair(shared_by=())
    shared = _lookup_pair(shared_by=("x", "y"))
    assert dedicated == [1000 + 100_000] * 2  # 1 µs latency + 1 MB at 10 GB/s each
    assert shared == [1000 + 200_000] * 2     # the same bytes at 5 GB/s each
    assert (shared[0] - 1000) / (dedicated[0] - 1000) == 2.0


def test_a_later_access_slows_one_in_flight_and_advance_reports_both() -> None:
    hierarchy = make_hierarchy(make_level(bandwidth_gbps=10.0, shared_by=("x", "y")))
    do = Driver(hierarchy)
    assert do(STORE, "a", 10**6, client="x").duration_ns == 100_000  # alone: provisional finish at 100 µs
    assert hierarchy.advance(50_000) == pb.AdvanceResponse(next_event_ns=100_000)
    # y joins at 50 µs with a's 0.5 MB left: both at 5 GB/s, a finishes at 150 µs, b then alone.
    assert do(STORE, "b", 10**6, now_ns=50_000, client="y").duration_ns == 150_000
    reply = hierarchy.advance(150_000)
    assert [(c.id, c.completion_ns) for c in reply.completions] == [(1, 150_000)]
    assert reply.next_event_ns == 200_000
    reply = hierarchy.advance(300_000)
    assert [(c.id, c.completion_ns) for c in reply.completions] == [(2, 200_000)]
    assert reply.next_event_ns == -1


def test_latency_does_not_use_bandwidth() -> None:
    channel = SharedChannel(10.0)
    channel.start(1, 0, 10**6)
    channel.start(2, 100_000, 10**6)  # joins just as the first finishes
    assert channel.projected() == {1: 100_000.0, 2: 200_000.0}


def test_misses_and_evicts_finish_at_once_and_are_reported() -> None:
    hierarchy = make_hierarchy(make_level())
    do = Driver(hierarchy)
    do(LOOKUP, "nothing", now_ns=7)
    do(EVICT, "nothing", now_ns=9)
    reply = hierarchy.advance(9)
    assert [(c.id, c.completion_ns) for c in reply.completions] == [(1, 7), (2, 9)]


def test_time_going_backwards_is_refused() -> None:
    hierarchy = make_hierarchy(make_level())
    hierarchy.advance(1000)
    with pytest.raises(FailedPrecondition, match="accesses\\[0\\].now_ns=999"):
        Driver(hierarchy)(LOOKUP, "a", now_ns=999)
    with pytest.raises(FailedPrecondition, match="until_ns=10"):
        hierarchy.advance(10)


def test_a_client_outside_shared_by_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidArgument, match="accesses\\[0\\].client='z'.*spec.levels\\[0\\].shared_by"):
        Driver(make_hierarchy(make_level(shared_by=("x", "y"))))(LOOKUP, "a", client="z")


def test_an_id_still_in_flight_is_refused() -> None:
    hierarchy = make_hierarchy(make_level())
    access = mem_pb.MemoryAccess(id=5, op=STORE, key="a", size_bytes=100)
    hierarchy.access([access])
    with pytest.raises(InvalidArgument, match="accesses\\[0\\].id=5"):
        hierarchy.access([access])


def test_dedicated_levels_keep_separate_contents_per_client() -> None:
    do = Driver(make_hierarchy(make_level(), make_level(shared_by=("x", "y"), capacity_bytes=10**6)))
    do(STORE, "k", client="x")
    assert do(LOOKUP, "k", client="y").level == -1
    assert do(LOOKUP, "k", client="x").level == 0


def test_processor_sharing_conserves_work_and_orders_by_size() -> None:
    """Flows started together finish smallest first; the last finishes when all bytes have moved."""
    channel = SharedChannel(4.0, clock_ns=10**15)  # a late clock must not stall the event loop
    for access_id, size in enumerate([400, 100, 300, 200]):
        channel.start(access_id, 0, size)
    finishes = channel.run_until(float("inf"))
    assert [access_id for _, access_id in finishes] == [1, 3, 2, 0]
    # 100 B at 1 B/ns each (4 flows), then 100 more at 4/3, 100 more at 2, the last 100 alone at 4.
    assert [t - 10**15 for t, _ in finishes] == pytest.approx([100, 175, 225, 250])
    assert len(channel) == 0
