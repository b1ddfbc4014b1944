"""Paged KV-cache blocks of one client, with vLLM V1's prefix cache: compiled, in cosim's Rust core.

:class:`BlockManager` is ``cosim_core.BlockManager`` (core/src/manager.rs, which documents its
semantics: vLLM V1's block pool, its prefix cache, free queue and LRU eviction). It reads and
writes a :class:`~.sequence.Sequence`'s ``num_computed``, ``num_blocks``, ``prefix_blocks`` and
``cached``, and keys cached blocks by their hash chain (core/src/hasher.rs).
"""

from __future__ import annotations

from cosim_core import BlockManager, blocks_for

__all__ = ["BlockManager", "blocks_for"]
