"""KV memory-hierarchy backend (MIST §IV-A3), served as ``cosim.v1.MemoryBackendService``.

Predict mode applies MIST's recursive formula over per-level hit rates;
time-synchronized mode keeps LRU contents per level and shares a level's
bandwidth among concurrent accesses. ``presets.yaml`` holds the tiers of
MIST Table V and its validation devices; :func:`levels_from_presets` turns
names into ``MemoryLevel`` messages.

    python -m cosim.adapters.memory --port 50051
"""

from .backend import MemoryHierarchyBackend
from .formula import expected_ns, serve_probabilities
from .hierarchy import Hierarchy
from .presets import levels_from_presets, load_presets

__all__ = ["Hierarchy", "MemoryHierarchyBackend", "expected_ns", "levels_from_presets", "load_presets",
           "serve_probabilities"]
