"""The free block queue against an OrderedDict doing the same operations (vLLM's queue
semantics: take from the head, free to the tail, reuse from the middle), copies included."""

from __future__ import annotations

import random
from collections import OrderedDict

from cosim.hub.sim.scheduling.free_queue import COMPACT_MIN, FreeQueue


def test_the_queue_behaves_as_an_ordered_dict_through_compactions_and_copies() -> None:
    rng = random.Random(7)
    queue, model = FreeQueue(), OrderedDict()
    copies: list[tuple[FreeQueue, list]] = []
    next_run, blocks = 0, [f"b{i}".encode() for i in range(40)]
    for _ in range(20_000):
        op = rng.random()
        if op < 0.3 and model:  # take one block from the head
            key, count = queue.head()
            assert (key, count) == next(iter(model.items()))
            if count > 1:
                queue.shorten_head(1)
                model[key] -= 1
            else:
                queue.pop_head()
                del model[key]
        elif op < 0.55:  # free a cached block to the tail
            block = rng.choice(blocks)
            if block not in model:
                queue.extend([block])
                model[block] = 1
        elif op < 0.7:  # free a run, merged into the tail's run
            count = rng.randint(1, 5)
            tail = queue.tail_run()
            model_tail = next(reversed(model)) if model else None
            assert tail == (model_tail if isinstance(model_tail, int) else None)
            if tail is not None:
                queue.grow_run(tail, count)
                model[tail] += count
            else:
                queue.append_run(next_run, count)
                model[next_run] = count
                next_run += 1
        elif op < 0.95:  # a cached block found again, wherever it is
            cached = [k for k in model if not isinstance(k, int)]
            if cached:
                block = rng.choice(cached)
                assert block in queue
                queue.remove_all([block])
                del model[block]
        else:
            copies.append((queue.copy(), list(model.items())))
        assert len(queue) == len(model) and list(queue.items()) == list(model.items())
        assert len(queue._order) <= len(model) + max(COMPACT_MIN, len(model)) + 1  # stale slots are compacted
    assert len(copies) > 500
    assert all(list(copy.items()) == snapshot for copy, snapshot in copies)  # the queue's later changes left them
