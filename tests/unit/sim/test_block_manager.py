"""Paged KV blocks: allocation and release, vLLM's prefix cache by content (hash chains, the LRU
free queue, tail blocks first), preempted sequences' blocks, forks."""

from __future__ import annotations

import hashlib
import time

import numpy as np
from cosim_core import block_hashes

from cosim.hub.sim.records import RequestRecord, StageRecord
from cosim.hub.sim.scheduling import BlockManager, Sequence
from cosim.hub.sim.workload.token_ids import SegmentIds, block_key


def seq(prompt: int, *, prefix: tuple[str, int] | None = None, rid: int = 0,
        ids: list[int] | None = None) -> Sequence:
    request = RequestRecord(id=rid, model="m", arrival_ns=0, input_tokens=prompt, output_tokens=4,
                            prefix_id=prefix and prefix[0], prefix_tokens=prefix[1] if prefix else 0,
                            prompt_token_ids=ids)
    return Sequence(request, StageRecord(kind="prefill", client="c", enqueue_ns=0), num_tokens=prompt,
                    num_computed=0, target_generated=4, prefix_id=request.prefix_id)


def computed(kv: BlockManager, s: Sequence, tokens: int) -> Sequence:
    """``s`` allocated and computed up to ``tokens`` tokens (its cache hit first)."""
    hit = kv.cache_hit(s)
    assert kv.allocate(s, tokens - len(hit) * kv.block_size, hit)
    s.num_computed = tokens
    return s


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


def test_blocks_are_shared_by_token_content_as_soon_as_they_are_allocated() -> None:
    kv = BlockManager(10, 4, enable_prefix_caching=True)
    first = seq(10, ids=list(range(10)), rid=1)
    assert kv.cache_hit(first) == [] and kv.allocate(first, 10)  # not computed yet: its 2 full blocks are cached
    same_start = seq(9, ids=[0, 1, 2, 3, 4, 5, 6, 7, 99], rid=2)
    assert len(kv.cache_hit(same_start)) == 2
    other_second_block = seq(9, ids=[0, 1, 2, 3, 4, 5, 6, 99, 8], rid=3)
    assert len(kv.cache_hit(other_second_block)) == 1  # a block's hash chains its parent's
    exact = seq(8, ids=list(range(8)), rid=4)
    assert len(kv.cache_hit(exact)) == 1  # at least one prompt token is always computed
    assert [kv.cached_tokens(s) for s in (same_start, other_second_block, exact)] == [8, 4, 4]  # the hits' tokens


def test_declared_prefixes_give_identical_leading_blocks_without_token_ids() -> None:
    kv = BlockManager(10, 4, enable_prefix_caching=True)
    kv.release(computed(kv, seq(11, prefix=("sys", 6), rid=1), 11))
    assert kv.num_free == 10  # released, cached, evictable
    assert len(kv.cache_hit(seq(20, prefix=("sys", 6), rid=2))) == 1  # the prefix's one full block
    assert kv.cache_hit(seq(20, prefix=("doc", 6), rid=3)) == []


ROOT = b"cosim-kv-root"  # the parent hash of a sequence's first block (core/src/hasher.rs)


def _content(s: Sequence, start: int, stop: int) -> bytes:
    """The tokens ``start:stop`` of ``s`` as bytes, as core/src/hasher.rs defines them (the Python
    block_hash module's ``_content`` the core replaced, kept here as the specification)."""
    request, prompt = s.request, s.prompt_tokens
    parts = []
    if start < prompt:
        end = min(stop, prompt)
        ids = request.prompt_token_ids
        if ids is not None and end <= len(ids):
            parts.append(np.asarray(ids[start:end], dtype=np.int64).tobytes())
        else:
            shared = request.prefix_tokens if s.prefix_id is not None else 0
            if s.prefix_id is not None and start < shared:
                parts.append(f"prefix {s.prefix_id} {start}:{min(end, shared)};".encode())
            if end > shared:
                parts.append(f"request {request.id} {max(start, shared)}:{end};".encode())
    if stop > prompt:
        out, first = request.output_token_ids, max(start, prompt)
        if out is not None and request.branches == 1 and stop - prompt <= len(out):
            parts.append(np.asarray(out[first - prompt:stop - prompt], dtype=np.int64).tobytes())
        else:
            parts.append(f"generated {request.id}#{s.order} {first}:{stop};".encode())
    return b"".join(parts)


def _chain_by_content(s: Sequence, num_blocks: int, block_size: int) -> list[bytes]:
    """The chain of ``s``'s blocks hashed one by one from :func:`_content` (what block_hashes means)."""
    chain, parent = [], ROOT
    for i in range(num_blocks):
        parent = hashlib.sha256(parent + _content(s, i * block_size, (i + 1) * block_size)).digest()
        chain.append(parent)
    return chain


def test_a_declared_prefix_is_hashed_at_once_and_chains_as_its_contents_do() -> None:
    """The prefix's chain, shared by every request naming it, is the chain of the same contents
    hashed one by one; the request's own tokens chain on from it."""
    first = seq(50, prefix=("doc", 37), rid=1)
    assert block_hashes(first, 1, 8) == first.block_hashes[:1]
    assert len(first.block_hashes) == 4  # 37 tokens: the prefix's 4 full blocks, taken at once
    second = seq(50, prefix=("doc", 37), rid=2)
    chain = _chain_by_content(second, 6, 8)
    assert block_hashes(second, 6, 8) == chain
    assert first.block_hashes == chain[:4]
    other = block_hashes(seq(50, prefix=("doc", 37), rid=3), 5, 8)
    assert other[:4] == chain[:4] and other[4] != chain[4]  # block 4 holds each request's own tokens


def test_block_hashes_in_any_steps_are_the_chain_of_each_block_s_content() -> None:
    """Synthesized prompts (with and without a declared prefix, blocks straddling its end and the
    prompt's), generated tokens, a session turn's output ids (and a multi-path request's, which are
    not reused), prompt ids as a list, an array or segments (and ids shorter than the prompt), asked for
    a few blocks at a time as the cache does: the chain of each block's content hashed in turn."""
    cases = [seq(45, rid=1), seq(45, prefix=("doc", 21), rid=2), seq(48, prefix=("doc", 21), rid=3),
             seq(40, ids=list(range(100, 137)), rid=4), seq(40, ids=list(range(100, 140)), rid=6),
             seq(19, prefix=("doc", 21), rid=7)]
    as_array = seq(40, rid=8)
    as_array.request.prompt_token_ids = np.arange(100, 140, dtype=np.int32)
    as_segments = seq(40, rid=9)
    as_segments.request.prompt_token_ids = SegmentIds([block_key(3), block_key(5)], [16, 24])
    turn = seq(24, rid=5)
    turn.request.output_token_ids = [7] * 40
    branched = seq(24, rid=10)
    branched.request.output_token_ids, branched.request.branches = [7] * 40, 2
    for s in [*cases, as_array, as_segments, turn, branched]:
        s.num_tokens += 30  # generated tokens past the prompt
        s.order = s.request.id % 3
        for asked in (1, 3, 4, 9, 9):
            assert block_hashes(s, asked, 8) == s.block_hashes[:asked]
        assert s.block_hashes == _chain_by_content(s, 9, 8), s
    assert cases[4].block_hashes[:5] == as_array.block_hashes[:5]  # the same ids, the same blocks


def test_a_sequence_s_copies_share_its_chain() -> None:
    s = seq(40, ids=list(range(40)), rid=1)
    copy = s.clone()
    block_hashes(copy, 3, 8)
    assert s.block_hashes == copy.block_hashes == _chain_by_content(s, 3, 8)


def test_prefix_chains_beyond_those_kept_are_hashed_again_the_same() -> None:
    """The process keeps the chains of the 256 prefixes used last; one dropped is hashed again."""
    chains = [block_hashes(seq(20, prefix=(f"p{i}", 16), rid=i), 2, 8) for i in range(300)]
    again = seq(20, prefix=("p0", 16), rid=0)
    assert block_hashes(again, 2, 8) == chains[0] == _chain_by_content(again, 2, 8)


def test_the_free_queue_evicts_least_recently_freed_blocks_tail_first() -> None:
    kv = BlockManager(6, 4, enable_prefix_caching=True)
    old = computed(kv, seq(12, ids=list(range(12)), rid=1), 12)
    new = computed(kv, seq(12, ids=list(range(100, 112)), rid=2), 12)
    kv.release(old)
    kv.release(new)  # both cached and evictable: the cache fills the device
    assert kv.num_free == 6 and kv.num_used == 0
    taker = seq(8, ids=list(range(200, 208)), rid=3)
    assert kv.grow(taker, 8)  # 2 blocks from the queue's head: the oldest request's tail blocks
    assert len(kv.cache_hit(seq(13, ids=list(range(13)), rid=4))) == 1  # "old" keeps its first block
    assert len(kv.cache_hit(seq(13, ids=list(range(100, 113)), rid=5))) == 3


def test_reusing_a_cached_block_takes_it_off_the_free_queue() -> None:
    kv = BlockManager(4, 4, enable_prefix_caching=True)
    kv.release(computed(kv, seq(9, ids=list(range(9)), rid=1), 9))
    reader = seq(9, ids=list(range(9)), rid=2)
    hit = kv.cache_hit(reader)
    assert len(hit) == 2 and kv.fits(reader, 1, hit) and not kv.fits(reader, 9, hit)  # 3 more: 2 left
    assert kv.allocate(reader, 1, hit) and reader.num_computed == 8 and reader.prefix_blocks == 2
    assert kv.num_free == 1 and reader.num_blocks == 1


def test_a_preempted_sequence_gets_back_what_was_not_evicted() -> None:
    kv = BlockManager(4, 4, enable_prefix_caching=True)
    s = computed(kv, seq(13, ids=list(range(13)), rid=5), 13)
    kv.release(s)  # preempted by recompute: its 3 full blocks stay cached, the partial one is freed
    s.num_computed = 0
    assert kv.num_free == 4
    hit = kv.cache_hit(s)
    assert len(hit) == 3 and kv.allocate(s, 1, hit) and s.num_computed == 12 and kv.num_free == 0


def test_forked_branches_share_the_prompt_blocks_until_the_last_leaves() -> None:
    kv = BlockManager(8, 4)
    parent = computed(kv, seq(9, rid=1), 9)
    children = [seq(9, rid=1), seq(9, rid=1)]
    kv.fork(parent, children, prompt_tokens=9)
    assert parent.prefix_blocks == 2 and parent.num_blocks == 1 and all(c.prefix_blocks == 2 for c in children)
    kv.release(parent)
    kv.release(children[0])
    assert kv.num_free == 6  # the shared blocks stay while a branch holds them
    kv.release(children[1])
    assert kv.num_free == 8 and not kv.holder_counts()  # without prefix caching nothing stays cached


def test_a_transferred_prompt_hits_the_blocks_it_shares_and_computes_nothing_again() -> None:
    """A disaggregated decode's prompt arrives computed: blocks its client caches already are
    held (not received, not duplicated), all but the prompt's last token at most, and the
    tokens it computed stay computed."""
    kv = BlockManager(8, 4, enable_prefix_caching=True)
    kv.release(computed(kv, seq(10, ids=list(range(10)), rid=1), 10))  # blocks [0-3], [4-7] cached
    request = RequestRecord(id=2, model="m", arrival_ns=0, input_tokens=9, output_tokens=4,
                            prompt_token_ids=list(range(8)) + [99])
    decode = Sequence(request, StageRecord(kind="decode", client="c", enqueue_ns=0), num_tokens=10,
                      num_computed=9, target_generated=4, generated=1)
    hit = kv.cache_hit(decode)
    assert len(hit) == 2
    assert kv.fits(decode, 1, hit) and kv.allocate(decode, 1, hit)
    assert decode.num_computed == 9 and decode.prefix_blocks == 2 and decode.num_blocks == 1  # tokens 8-9
    assert kv.num_free == 5
    exact = RequestRecord(id=3, model="m", arrival_ns=0, input_tokens=8, output_tokens=4,
                          prompt_token_ids=list(range(8)))
    whole = Sequence(exact, StageRecord(kind="decode", client="c", enqueue_ns=0), num_tokens=9,
                     num_computed=8, target_generated=4, generated=1)
    assert len(kv.cache_hit(whole)) == 1  # the prompt's last token's block is received, as vLLM's
    retrieved = seq(12, ids=list(range(12)), rid=4)
    retrieved.num_computed = 4  # part of a prompt from a KV store: the rest is computed after it
    assert kv.cache_hit(retrieved) == []


def test_a_copy_costs_the_same_however_many_blocks_were_cached_and_freed() -> None:
    """The lookahead copies the KV at about every arrival: what a copy costs must not grow with
    the cached blocks or with how many blocks were ever freed (issue 37). A copy shares the
    vectors' chunks (core/src/cow_vec.rs): timed against a fresh manager's, best of many, it costs
    the same; a copy of the entries (20,000 cached blocks, megabytes) would cost 50x."""

    def copy_seconds(kv: BlockManager) -> float:
        best = float("inf")
        for _ in range(200):
            start = time.perf_counter()
            copy = kv.copy()
            best = min(best, time.perf_counter() - start)
        assert copy.num_free == kv.num_free
        return best

    kv = BlockManager(20_000, 16, enable_prefix_caching=True)
    fresh = copy_seconds(kv)
    for rid in range(2_000):  # 80,000 blocks cached and freed, the last 20,000 still cached
        kv.release(computed(kv, seq(640, rid=rid), 640))
    assert kv.num_free == 20_000 and len(kv.free_queue_blocks()) == 20_000  # cached, one entry each
    kv.check()
    assert copy_seconds(kv) <= fresh * 4 + 20e-6
