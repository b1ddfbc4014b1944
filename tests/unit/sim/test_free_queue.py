"""The free block queue against an OrderedDict doing the same operations (vLLM's queue
semantics: take from the head, free to the tail, reuse from the middle), copies included."""

from __future__ import annotations

import random
from collections import OrderedDict

from cosim.hub.sim.scheduling.free_queue import FreeQueue


def test_the_queue_behaves_as_an_ordered_dict_through_copies() -> None:
    rng = random.Random(7)
    queue, model = FreeQueue(), OrderedDict()
    copies: list[tuple[FreeQueue, list]] = []
    next_run, blocks = 0, [f"b{i}".encode() for i in range(40)]
    for _ in range(20_000):
        op = rng.random()
        if op < 0.3 and model:  # take blocks from the head
            want = rng.randint(1, 3)
            expected = []
            for _ in range(min(want, sum(model.values()))):
                key = next(iter(model))
                model[key] -= 1
                if not model[key]:
                    del model[key]
                    expected.append(key)
            assert queue.take(min(want, sum(count for _, count in queue.items()))) == expected
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
        assert len(queue._links) == len(model)  # nothing is kept of entries gone
    assert len(copies) > 500
    assert all(list(copy.items()) == snapshot for copy, snapshot in copies)  # the queue's later changes left them
