"""Per-client scheduling: sequences, KV blocks, batching policies, the scheduler."""

from .batch import DecodeRun, ScheduledBatch, Signature, StepOutcome
from .kv import BlockManager, blocks_for
from .policies import BatchingPolicy
from .scheduler import Scheduler
from .sequence import Sequence

__all__ = ["BatchingPolicy", "BlockManager", "DecodeRun", "ScheduledBatch", "Scheduler", "Sequence",
           "Signature", "StepOutcome", "blocks_for"]
