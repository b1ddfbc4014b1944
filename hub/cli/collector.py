"""Python's cyclic garbage collector, tuned for a command's simulations.

A run allocates hundreds of thousands of short-lived containers (a step's lists, a request's
records) and makes few reference cycles, while the process holds a large heap of long-lived objects
(the imported libraries, configs, presets, the backends' models). With CPython's default thresholds
the collector scans the young objects every 700 allocations and, now and then, the whole heap, to
find almost nothing: 4-5% of chat-10k's CPU. Within :func:`tuned_collector`:

- the heap as it is when the command starts (the imports) is frozen (``gc.freeze``): full
  collections skip it;
- the young generation is collected every :data:`YOUNG_THRESHOLD` allocations.

Both are undone at the end (``cosim.hub.cli.main`` may be called more than once in a process).
Collection never changes a result: nothing in a run depends on when garbage is freed.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# Allocations between two collections of the young generation (CPython's default: 700). At 10,000 a
# chat-10k run collects it 4 times instead of 70 and its older generations not at all.
YOUNG_THRESHOLD = 10_000


@contextlib.contextmanager
def tuned_collector() -> Iterator[None]:
    """Within the block, the collector is tuned for simulations (module docstring)."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
