"""Per-client scheduling: sequences, KV blocks, batching policies."""

from .kv import BlockManager, blocks_for
from .scheduler import Scheduler, Signature, Step
from .sequence import Sequence

__all__ = ["BlockManager", "Scheduler", "Sequence", "Signature", "Step", "blocks_for"]
