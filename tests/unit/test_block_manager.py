"""Paged KV blocks: allocation, release, the prefix cache (LRU, tail first), parking, forks."""

from __future__ import annotations

from cosim.hub.records import RequestRecord, StageRecord
from cosim.hub.scheduling import BlockManager, Sequence


def seq(prompt: int, *, prefix_id: str | None = None, order: int = 0) -> Sequence:
    request = RequestRecord(id=order, model="m", arrival_ns=0, input_tokens=prompt, output_tokens=4)
    return Sequence(request, StageRecord(kind="prefill", client="c", enqueue_ns=0), num_tokens=prompt,
                    num_computed=0, target_generated=4, order=order, prefix_id=prefix_id)


def test_growing_takes_whole_blocks_and_release_frees_them() -> None:
    kv = BlockManager(4, 16)
    a = seq(20)
    assert kv.blocks_needed(a, 20) == 2 and kv.grow(a, 20)
    a.num_computed = 20
    assert kv.blocks_needed(a, 12) == 0 and kv.blocks_needed(a, 13) == 1
    b = seq(40)
    assert not kv.grow(b, 40) and b.num_blocks == 0 and kv.num_free == 2  # 3 blocks: none taken
    kv.release(a)
    assert kv.num_free == 4 and a.num_blocks == 0


def test_a_finished_prefix_stays_cached_and_is_shared_by_whole_blocks() -> None:
    kv = BlockManager(10, 16, enable_prefix_caching=True)
    first = seq(50, prefix_id="sys")
    kv.grow(first, 50)
    first.num_computed = 50
    kv.release(first, prefix_tokens=40)  # 2 full blocks of the 40-token prefix stay cached
    assert kv.num_used == 2
    second = seq(41, prefix_id="sys", order=1)
    assert kv.attach_prefix(second, 40) == 32 and second.prefix_blocks == 2
    tiny = seq(32, prefix_id="sys", order=2)
    assert kv.attach_prefix(tiny, 40) == 16  # at least one prompt token is always computed


def test_unused_prefixes_are_evicted_least_recently_used_tail_first() -> None:
    kv = BlockManager(6, 4, enable_prefix_caching=True)
    for order, name in enumerate(("old", "new")):
        s = seq(12, prefix_id=name, order=order)
        kv.grow(s, 12)
        s.num_computed = 12
        kv.release(s, prefix_tokens=12)  # 3 cached blocks each: the cache fills the device
    assert kv.num_free == 0 and kv.can_allocate(6) and not kv.can_allocate(7)
    taker = seq(8, order=2)
    assert kv.grow(taker, 8)  # 2 blocks: evicted from the oldest prefix's tail
    reader = seq(13, prefix_id="old", order=3)
    assert kv.attach_prefix(reader, 12) == 4  # "old" keeps its first block, still a valid prefix
    assert kv.attach_prefix(seq(13, prefix_id="new", order=4), 12) == 12


def test_a_parked_sequence_gets_back_what_was_not_evicted() -> None:
    kv = BlockManager(4, 4, enable_prefix_caching=True)
    s = seq(13, order=5)
    kv.grow(s, 13)
    s.num_computed = 13
    kv.park(s)  # preempted by recompute: its 3 full blocks stay cached, the partial one is freed
    s.num_computed = 0
    assert kv.num_free == 1
    assert kv.resume(s) == 12 and s.num_computed == 12
    kv.commit_resume(s)
    assert s.num_blocks == 3 and s.prefix_blocks == 0 and kv.num_free == 1


def test_forked_branches_share_the_prompt_blocks_until_the_last_leaves() -> None:
    kv = BlockManager(8, 4)
    parent = seq(9, order=1)
    kv.grow(parent, 9)
    parent.num_computed = 9
    children = [seq(9, order=2), seq(9, order=3)]
    kv.fork(parent, children, prompt_tokens=9)
    assert parent.prefix_blocks == 2 and parent.num_blocks == 1 and all(c.prefix_blocks == 2 for c in children)
    for s in (parent, *children):
        kv.release(s)
    assert kv.num_used == 2  # the shared blocks, cached and now evictable
    assert kv.can_allocate(8)


def test_a_copy_is_independent() -> None:
    kv = BlockManager(8, 4, enable_prefix_caching=True)
    s = seq(8, prefix_id="p")
    kv.grow(s, 8)
    s.num_computed = 8
    kv.release(s, prefix_tokens=8)
    copy = kv.copy()
    copy.attach_prefix(seq(9, prefix_id="p", order=1), 8)
    copy.grow(seq(30, order=2), 30)
    assert kv.num_free == 6 and kv.can_allocate(8)
