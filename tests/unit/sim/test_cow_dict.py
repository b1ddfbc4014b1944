"""CowDict against plain dicts doing the same writes: copies, and copies of copies, stay
independent of each other and of the original, whichever side writes."""

from __future__ import annotations

import random

from cosim.hub.sim.scheduling.cow_dict import CowDict


def test_copies_stay_independent_through_interleaved_writes() -> None:
    rng = random.Random(3)
    dicts: list[tuple[CowDict[bytes | int, int], dict[bytes | int, int]]] = [(CowDict(500), {})]
    keys: list[bytes | int] = [*range(300), *(f"k{i}".encode() for i in range(300))]
    for _ in range(30_000):
        mine, model = rng.choice(dicts)
        key, op = rng.choice(keys), rng.random()
        if op < 0.4:
            mine[key] = model[key] = rng.randrange(5)
        elif op < 0.6:
            assert mine.pop(key, -1) == model.pop(key, -1)
        elif op < 0.7 and key in model:
            del mine[key]
            del model[key]
        elif op < 0.8:
            pairs = [(rng.choice(keys), rng.randrange(5)) for _ in range(4)]
            mine.update(pairs)
            model.update(pairs)
        elif op < 0.81 and len(dicts) < 40:
            dicts.append((mine.copy(), dict(model)))
        assert (key in mine) == (key in model) and mine.get(key, -1) == model.get(key, -1)
    assert len(dicts) > 20
    for mine, model in dicts:
        assert len(mine) == len(model) and sorted(mine.values()) == sorted(model.values())
        assert all(mine[key] == value for key, value in model.items())
