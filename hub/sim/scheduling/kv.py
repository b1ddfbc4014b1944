"""Paged KV-cache blocks of one client, with vLLM V1's prefix cache: compiled, in cosim's Rust core.

:class:`BlockManager` is ``cosim_core.BlockManager`` (core/src/manager.rs, which documents its
semantics: vLLM V1's block pool, its prefix cache, free queue and LRU eviction). It reads and
writes a :class:`~.sequence.Sequence`'s ``num_computed``, ``num_blocks``, ``prefix_blocks`` and
``cached``, and keys cached blocks by the hash chain of :mod:`.block_hash`, computed here in
Python and registered with the core when this module is imported.
"""

from __future__ import annotations

from cosim_core import BlockManager, blocks_for, set_block_hasher

from .block_hash import block_hashes

set_block_hasher(block_hashes)

__all__ = ["BlockManager", "blocks_for"]
