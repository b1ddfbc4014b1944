"""``python -m cosim.adapters.memory --port N``: serves the memory-hierarchy backend."""

import sys

from cosim.adapters.sdk.server import main

if __name__ == "__main__":
    main(["cosim.adapters.memory:MemoryHierarchyBackend", *sys.argv[1:]])
