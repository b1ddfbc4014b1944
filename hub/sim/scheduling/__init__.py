"""Per-client scheduling: sequences, KV blocks, batching policies, the scheduler.

The scheduler and its sequences are compiled, in cosim's Rust core (``cosim_core``; core/src/
``scheduler.rs``, ``sequence.rs``, ``batch.rs``, ``policies.rs``, ``packing.rs``, ``manager.rs``,
and ``hasher.rs``, the block hash chain, whose doc comments give their semantics); LoRA slots
(:mod:`.lora`), the KV offload tier (:mod:`.offload`) and speculative decoding (:mod:`.speculative`)
are Python, called by the core where a config enables them.
"""

from typing import Any

from cosim_core import BatchingPolicy, PackingOrder, ScheduledBatch, Scheduler, Sequence, SteadyDecodes, StepOutcome

from .kv import BlockManager, blocks_for

# A batch's (new_tokens, context_tokens), then (StepBatch field, values) pairs where it has more (LoRA
# adapters, a lock-step group's ranks): what times it.
Signature = tuple[Any, ...]

__all__ = ["BatchingPolicy", "BlockManager", "PackingOrder", "ScheduledBatch", "Scheduler", "Sequence",
           "Signature", "SteadyDecodes", "StepOutcome", "blocks_for"]
