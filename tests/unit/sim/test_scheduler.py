"""The scheduler contract: each batching policy's steps, preemption, update, decode runs and
lookahead on a copy, checked against hand-worked batches."""

from __future__ import annotations

from typing import Any

import pytest

from cosim.hub.config.choices import BATCHING
from cosim.hub.config.scheduler import SchedulerConfig
from cosim.hub.config.sections import ClientConfig
from cosim.hub.config.speculative import SpeculativeConfig
from cosim.hub.sim.records import RequestRecord, StageRecord
from cosim.hub.sim.scheduling import BlockManager, ScheduledBatch, Scheduler, Sequence
from cosim.hub.timing.step_timer import predict


def scheduler(blocks: int = 100, block_size: int = 4, **config: Any) -> Scheduler:
    """A scheduler stepped by hand: each step formed with the last one's outputs applied (no async
    scheduling, unless a test asks for it)."""
    config.setdefault("async_scheduling", False)
    return Scheduler(SchedulerConfig(block_size=block_size, **config), BlockManager(blocks, block_size),
                     kv_bytes_per_token=2.0)


def seq(prompt: int, output: int, rid: int = 0) -> Sequence:
    request = RequestRecord(id=rid, model="m", arrival_ns=0, input_tokens=prompt, output_tokens=output)
    return Sequence(request, StageRecord(kind="prefill", client="c", enqueue_ns=0), num_tokens=prompt,
                    num_computed=0, target_generated=output)


def shape(batch: ScheduledBatch) -> list[tuple[int, int, int]]:
    """(request id, new tokens, context) per sequence."""
    return [(s.request.id, n, c) for s, n, c in zip(batch.seqs, batch.num_new, batch.context)]


def step(s: Scheduler) -> list[tuple[int, int, int]]:
    batch = s.schedule()
    s.update(batch)
    return shape(batch)


def test_continuous_prefills_whole_prompts_alone_then_decodes_everyone() -> None:
    s = scheduler(batching="continuous")
    s.add(seq(10, 3, rid=0))
    assert step(s) == [(0, 10, 0)]
    s.add(seq(6, 2, rid=1))
    assert step(s) == [(1, 6, 0)]  # the running decode pauses for the admission
    assert step(s) == [(0, 1, 10), (1, 1, 6)]  # a decode computes the token sampled last
    assert [x.request.id for x in s.running] == [0]  # request 1 sampled its 2 tokens and left
    assert step(s) == [(0, 1, 11)]
    assert not s.has_work


def test_chunked_runs_running_first_and_splits_prompts_to_the_budget() -> None:
    s = scheduler(batching="chunked", chunk_size=8)
    s.add(seq(4, 5, rid=0))
    assert step(s) == [(0, 4, 0)]
    s.add(seq(20, 2, rid=1))
    assert step(s) == [(0, 1, 4), (1, 7, 0)]
    assert step(s) == [(0, 1, 5), (1, 7, 7)]
    assert step(s) == [(0, 1, 6), (1, 6, 14)]  # the prompt's last chunk samples its first token
    assert step(s) == [(0, 1, 7), (1, 1, 20)]


def test_mixed_takes_every_decode_plus_whole_prompts_that_fit() -> None:
    s = scheduler(batching="mixed", max_num_batched_tokens=12)
    s.add(seq(4, 5, rid=0))
    step(s)
    s.add(seq(11, 2, rid=1))
    s.add(seq(10, 2, rid=2))
    assert step(s) == [(0, 1, 4), (1, 11, 0)]  # 1 + 11 fills the budget: the 10-token prompt waits


def test_static_lets_nothing_join_a_running_batch() -> None:
    s = scheduler(batching="static")
    s.add(seq(4, 3, rid=0))
    s.add(seq(4, 1, rid=1))
    assert step(s) == [(0, 4, 0), (1, 4, 0)]
    s.add(seq(4, 1, rid=2))
    assert step(s) == [(0, 1, 4)]  # request 1 left; request 2 waits for the batch to end
    assert step(s) == [(0, 1, 5)]
    assert step(s) == [(2, 4, 0)]


def test_the_newest_sequence_is_preempted_when_blocks_run_out_and_recomputes_first() -> None:
    s = scheduler(blocks=3, block_size=4, batching="continuous")
    s.add(seq(4, 6, rid=0))
    s.add(seq(4, 6, rid=1))
    assert step(s) == [(0, 4, 0), (1, 4, 0)]  # 2 blocks
    batch = s.schedule()  # a 5th token each: one more block each, and only 1 is free
    assert [p.request.id for p in batch.preempted] == [1]
    assert shape(batch) == [(0, 1, 4)]
    preempted = s.waiting[0]
    assert preempted.request.id == 1 and preempted.num_computed == 0 and preempted.num_tokens == 5
    assert s.kv.num_free == 1  # its block came back


def test_swap_preemption_keeps_the_kv_in_host_memory_and_times_the_copy() -> None:
    s = scheduler(blocks=3, block_size=4, batching="continuous", preemption="swap", swap_space_bytes=10**6)
    s.add(seq(4, 6, rid=0))
    s.add(seq(4, 6, rid=1))
    step(s)
    s.update(s.schedule())  # request 1 swapped out (4 tokens, 8 bytes of KV)
    assert s.waiting[0].state == "swapped" and s.waiting[0].num_computed == 4
    for _ in range(4):
        s.update(s.schedule())  # request 0 samples its 6th token and leaves
    batch = s.schedule()
    assert shape(batch) == [(1, 1, 4)] and batch.swap_bytes == 16  # copied out and back


def test_update_samples_forks_and_frees_the_finished() -> None:
    s = scheduler(batching="continuous")
    parent = seq(8, 3, rid=7)
    parent.forks = 2
    s.add(parent)
    outcome = s.update(s.schedule())
    assert outcome.sampled == [parent] and outcome.finished == []
    (forked_parent, children), = outcome.forked
    assert forked_parent is parent and len(children) == 2
    assert all(c.generated == 1 and c.num_computed == 8 and c.prefix_blocks == 2 for c in children)
    assert s.running == [parent, *children] and not s.waiting  # branches decode beside the parent
    assert outcome.kv_blocks_used == 2 and outcome.num_waiting == 0
    assert shape(s.schedule()) == [(7, 1, 8)] * 3  # all three paths decode in the next step


def test_branches_without_a_seat_wait_at_the_queue_front() -> None:
    s = scheduler(batching="continuous", max_num_seqs=2)
    parent = seq(8, 3, rid=7)
    parent.forks = 2
    s.add(parent)
    (_, children), = s.update(s.schedule()).forked
    assert s.running == [parent, children[0]] and s.waiting == [children[1]]


def decode_state(s: Scheduler) -> list[tuple[str, int, int, list[object]]]:
    """Every sequence's progress and blocks, and the KV pool's, as stepping leaves them."""
    return [(repr(x), x.num_blocks, x.prefix_blocks, list(x.cached)) for x in s.running + s.waiting] + \
        [("kv", s.kv.num_free, s.kv.num_used, [])]


def decoding(caching: bool = False) -> Scheduler:
    """Three sequences decoding, their blocks filled to different depths (block size 4)."""
    s = scheduler(blocks=40, batching="continuous", enable_prefix_caching=caching)
    for rid, (prompt, output) in enumerate([(5, 30), (8, 12), (3, 20)]):
        s.add(seq(prompt, output, rid=rid))
    s.update(s.schedule())
    return s


def test_steady_decodes_give_the_blocks_each_step_takes_when_stepped_one_by_one() -> None:
    s = decoding()
    batch = s.schedule()
    steady = s.steady_decodes(batch, s.update(batch))
    assert steady is not None and steady.seqs == s.running
    # contexts 6, 9, 4 after the step: one more block at steps 2, 3, 0 (0-based), then every 4th;
    # request 1 samples its 12th token at step 9 (12 - 2 generated - 1): the run is 10 steps
    assert steady.new_blocks == [1, 0, 1, 1, 1, 0, 1, 1, 1, 0]
    for blocks in steady.new_blocks:
        used = s.kv.num_used
        step_batch = s.schedule()
        assert step_batch.seqs == steady.seqs and step_batch.num_new == [1, 1, 1]
        assert s.kv.num_used - used == blocks  # taken as the step is formed
        finished = s.update(step_batch).finished
    assert [x.request.id for x in finished] == [1]  # in the run's last step


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("spare", [5, 1000], ids=["few_free", "many_free"])
def test_steady_decodes_blocks_over_many_block_periods_are_those_stepping_takes(block_size: int, spare: int) -> None:
    prompts = [5, 17, 3, 33]
    s = scheduler(blocks=sum(-(-p // block_size) for p in prompts) + spare, block_size=block_size,
                  batching="continuous")
    for rid, (prompt, output) in enumerate(zip(prompts, [70, 64, 90, 80])):
        s.add(seq(prompt, output, rid=rid))
    batch = s.schedule()
    steady = s.steady_decodes(batch, s.update(batch))
    assert steady is not None and steady.contexts == [x.num_computed for x in s.running]
    taken = []
    for _ in steady.new_blocks:
        used = s.kv.num_used
        batch = s.schedule()
        taken.append(s.kv.num_used - used)  # taken as the step is formed
        s.update(batch)
    assert taken == steady.new_blocks
    if spare > 100:
        assert len(taken) == 64 - 1  # request 1 samples its 64th token in the run's last step


def test_steady_decodes_stop_where_the_free_blocks_run_out() -> None:
    s = decoding()
    s.kv.take(s.kv.num_free - 2)  # two blocks left: the step's decodes take one, the run's step 0 the other
    batch = s.schedule()
    steady = s.steady_decodes(batch, s.update(batch))
    assert steady is not None and steady.new_blocks == [1, 0]


@pytest.mark.parametrize("caching", [False, True], ids=["plain", "prefix_caching"])
@pytest.mark.parametrize("steps", [1, 4, 9])
def test_applying_k_decode_steps_at_once_is_stepping_k_times(caching: bool, steps: int) -> None:
    bulk, one_by_one = decoding(caching), decoding(caching)
    batch = bulk.schedule()
    steady = bulk.steady_decodes(batch, bulk.update(batch))
    one_by_one.update(one_by_one.schedule())
    assert steady is not None and decode_state(bulk) == decode_state(one_by_one)
    for blocks in steady.new_blocks[:steps + 1]:  # and the step after them begun (in flight)
        bulk.begin_decode_step(blocks)
    bulk.apply_decodes(steady.seqs, steps, 1)
    for _ in range(steps):
        one_by_one.update(one_by_one.schedule())
    in_flight = one_by_one.schedule()  # the next step holds its blocks as it begins
    assert in_flight.seqs == one_by_one.running
    assert decode_state(bulk) == decode_state(one_by_one)


def test_no_decode_run_while_the_queue_could_give_someone() -> None:
    s = scheduler(batching="continuous", max_num_seqs=2)
    s.add(seq(4, 10, rid=0))
    s.update(s.schedule())
    batch = s.schedule()
    outcome = s.update(batch)
    s.add(seq(4, 6, rid=1))
    assert s.steady_decodes(batch, outcome) is None  # queued after the batch was formed: the next step admits it
    s.update(s.schedule())
    s.add(seq(4, 3, rid=2))  # no seat left: the queue can give no one until a departure
    batch = s.schedule()
    assert batch.queue_blocked and s.steady_decodes(batch, s.update(batch)) is not None


def test_a_decode_run_follows_a_departure_when_the_queue_is_empty() -> None:
    s = scheduler(batching="continuous")
    s.add(seq(4, 2, rid=0))
    s.add(seq(4, 9, rid=1))
    s.update(s.schedule())
    batch = s.schedule()
    outcome = s.update(batch)  # request 0 leaves
    steady = s.steady_decodes(batch, outcome)
    assert [x.request.id for x in outcome.finished] == [0] and steady is not None and steady.seqs == s.running


def test_no_decode_run_for_sequences_that_did_not_sample_in_the_batch() -> None:
    s = scheduler(batching="continuous")
    s.add(seq(4, 9, rid=0))
    s.update(s.schedule())
    s.add(seq(4, 1, rid=1))  # prefilled alone (continuous batching pauses the decode), and leaves
    batch = s.schedule()
    outcome = s.update(batch)
    assert batch.seqs != s.running and not s.waiting
    assert s.steady_decodes(batch, outcome) is None  # request 0's last token is older than this step


def test_scheduling_a_copy_leaves_the_original_untouched() -> None:
    s = scheduler(blocks=5, block_size=4, batching="chunked", chunk_size=6, enable_prefix_caching=True)
    for rid in range(4):
        s.add(seq(9, 4, rid=rid))
    s.update(s.schedule())
    before = [repr(x) for x in s.running + s.waiting], s.kv.num_free
    sim = s.copy()
    for _ in range(12):
        sim.update(sim.schedule())
    assert [repr(x) for x in s.running + s.waiting] == before[0] and s.kv.num_free == before[1]


@pytest.mark.parametrize("batching", list(BATCHING))
def test_lookahead_predicts_exactly_the_batches_that_follow_when_nothing_arrives(batching: str) -> None:
    s = scheduler(blocks=12, block_size=4, batching=batching, max_num_seqs=3, chunk_size=8,
                  max_num_batched_tokens=16)
    for rid, (prompt, output) in enumerate([(5, 9), (7, 3), (12, 6), (3, 12), (9, 2)]):
        s.add(seq(prompt, output, rid=rid))
    in_flight = s.schedule()
    predicted = predict(s, in_flight, depth=40)
    s.update(in_flight)
    actual = []
    while s.has_work and len(actual) < 40:
        batch = s.schedule()
        actual.append(batch.signature)
        if s.update(batch).finished and not s.waiting:
            break  # once the backlog is gone an arrival could join: prediction stops at this departure
    assert predicted == actual


def test_no_decode_run_after_a_prefill_chunk_that_used_the_budget_the_queue_needs() -> None:
    s = scheduler(batching="chunked", chunk_size=8)
    s.add(seq(16, 9, rid=0))
    s.update(s.schedule())
    s.add(seq(4, 3, rid=1))
    batch = s.schedule()  # the prompt's last chunk takes the whole budget: the queue is blocked by budget only
    assert shape(batch) == [(0, 8, 8)] and batch.queue_blocked
    assert s.steady_decodes(batch, s.update(batch)) is None
    assert shape(s.schedule()) == [(0, 1, 16), (1, 4, 0)]


def test_async_scheduling_forms_each_step_as_from_the_start_of_the_one_before() -> None:
    """vLLM's async scheduling: a prompt queued while a step runs joins one step later than it
    would synchronously, and a sequence finished in the step just done holds its seat one more
    step; with nothing else to run the engine waits for the step in flight and forms again."""
    s = scheduler(batching="chunked", max_num_seqs=2, async_scheduling=True)
    assert s.one_step_ahead
    s.add(seq(4, 2, rid=0))
    assert step(s) == [(0, 4, 0)]  # an idle engine sees its queue at once
    s.add(seq(4, 3, rid=1))  # queued while step 1 ran
    assert step(s) == [(0, 1, 4)]  # step 2 was formed when step 1 started: request 1 is not seen yet
    s.add(seq(4, 3, rid=2))  # queued while step 2 ran; request 0 finished in it
    assert step(s) == [(1, 4, 0)]  # request 0 still holds its seat: request 2 waits
    assert step(s) == [(1, 1, 4), (2, 4, 0)]
    sync = scheduler(batching="chunked", max_num_seqs=2)
    sync.add(seq(4, 2, rid=0))
    assert step(sync) == [(0, 4, 0)]
    sync.add(seq(4, 3, rid=1))
    assert step(sync) == [(0, 1, 4), (1, 4, 0)]


def test_async_scheduling_is_vllm_v1s_default_with_chunked_batching_alone() -> None:
    """vLLM V1 (chunked) schedules one step ahead by default, host time modelled or not; V0's
    whole-prompt schedulers never did; the field overrides either way."""
    assert Scheduler(SchedulerConfig(batching="chunked"), BlockManager(10, 4)).one_step_ahead
    for batching in ("continuous", "mixed", "static"):
        assert not SchedulerConfig(batching=batching).forms_one_step_ahead
        assert SchedulerConfig(batching=batching, async_scheduling=True).forms_one_step_ahead
    assert not SchedulerConfig(batching="chunked", async_scheduling=False).forms_one_step_ahead
    assert not Scheduler(SchedulerConfig(batching="chunked"), BlockManager(10, 4), micro_batches=2).one_step_ahead


@pytest.mark.parametrize("packing", ["fcfs", "least_work_left"])
def test_a_prompt_the_early_view_cannot_see_leaves_the_queue_unblocked(packing: str) -> None:
    """A step formed before a prompt was queued did not try it: the queue is not blocked, so no
    decode run may start on the assumption that it was (whatever the packing order)."""
    s = scheduler(batching="chunked", max_num_seqs=4, async_scheduling=True, packing=packing)
    s.add(seq(4, 5, rid=0))
    step(s)
    s.add(seq(8, 3, rid=1))  # queued while step 1 ran
    batch = s.schedule()
    assert shape(batch) == [(0, 1, 4)] and not batch.queue_blocked
    assert s.steady_decodes(batch, s.update(batch)) is None
    assert shape(s.schedule()) == [(0, 1, 5), (1, 8, 0)]


@pytest.mark.parametrize(("method", "ahead"), [(None, True), ("mtp", True), ("ngram", False), ("draft_model", False)])
def test_a_client_drafting_alone_leaves_async_scheduling_off_by_default(method: str | None, ahead: bool) -> None:
    """vLLM turns async scheduling on by default with EAGLE/MTP drafters only (PR #31998)."""
    speculative = None if method is None else SpeculativeConfig(
        method=method, num_speculative_tokens=2, acceptance_rate=0.5,
        draft_model="d" if method == "draft_model" else None)
    client = ClientConfig(name="c", model="m", backend="b", hardware={"device": "h"},
                          scheduler={"batching": "chunked"}, speculative=speculative)
    assert client.forms_one_step_ahead is ahead
    forced = client.model_copy(update={"scheduler": SchedulerConfig(batching="chunked", async_scheduling=True)})
    assert forced.forms_one_step_ahead


def test_async_scheduling_reforms_when_the_early_view_gives_nothing() -> None:
    s = scheduler(batching="chunked", max_num_seqs=1, async_scheduling=True)
    s.add(seq(4, 1, rid=0))
    first = s.schedule()
    s.add(seq(4, 1, rid=1))  # queued while step 1 runs
    s.update(first)  # request 0 finishes at its first token, its seat held for the step formed ahead
    assert s.kv.num_used == 1
    second = s.schedule()
    assert shape(second) == [(1, 4, 0)]  # the early view has no seat and no visible prompt: formed again
    assert s.kv.num_used == 1  # request 0's block was freed when the step was formed; request 1 took one
    s.update(second)
    assert s.kv.num_used == 0  # nothing left to form a step of: freed with the step's outputs


def test_priority_preempts_the_least_important_running_sequence_not_the_newest() -> None:
    """vLLM's priority policy: the victim is max(running, key=(priority, arrival)); FCFS takes the newest."""
    def run(packing: str) -> list[int]:
        s = scheduler(blocks=4, block_size=4, batching="chunked", packing=packing)
        low, high = seq(4, 8, rid=0), seq(4, 8, rid=1)
        low.request.priority, high.request.priority = 5, 0
        s.add(low)
        step(s)  # low prefills first: it runs ahead of high, the newest
        s.add(high)
        step(s)  # then both decode, growing until the four blocks run out
        preempted: list[int] = []
        for _ in range(6):
            batch = s.schedule()
            preempted += [x.request.id for x in batch.preempted]
            s.update(batch)
        return preempted

    assert run("priority")[0] == 0  # the older but less important one
    assert run("fcfs")[0] == 1  # the newest


def test_a_victim_scheduled_earlier_in_the_step_leaves_it() -> None:
    """Priority preemption may pick a sequence the step took already: vLLM takes it out of the step
    and gives its tokens back to the budget (``Scheduler.schedule``: ``scheduled_running_reqs.remove``)."""
    s = scheduler(blocks=3, block_size=4, batching="chunked", packing="priority")
    low, high = seq(1, 8, rid=0), seq(1, 8, rid=1)
    low.request.priority, high.request.priority = 5, 0
    s.add(low)
    step(s)
    s.add(high)
    step(s)
    victims = []
    for _ in range(8):
        batch = s.schedule()
        assert not any(x is y for x in batch.preempted for y in batch.seqs)
        assert batch.num_tokens == sum(batch.num_new)
        victims += [(x.request.id, [y.request.id for y in batch.seqs]) for x in batch.preempted]
        s.update(batch)
    assert victims and victims[0] == (0, [1])  # low was taken, then preempted for high: high alone runs


def test_a_lock_step_rank_with_an_empty_early_view_sits_out_one_step() -> None:
    """vLLM's DP engine loop: a rank whose step formed one step ahead is empty runs a dummy batch with the
    others' next step, and takes what it missed the step after (a lone engine forms again at once)."""
    s = Scheduler(SchedulerConfig(block_size=4, batching="chunked", max_num_seqs=1, host_time=True),
                  BlockManager(100, 4), kv_bytes_per_token=2.0, lock_step=True)
    s.add(seq(4, 1, rid=0))
    assert step(s) == [(0, 4, 0)]
    s.add(seq(4, 1, rid=1))  # arrived while request 0's step ran
    assert step(s) == []  # the dummy step
    assert step(s) == [(1, 4, 0)]
