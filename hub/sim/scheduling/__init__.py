"""Per-client scheduling: sequences, KV blocks, batching policies, the scheduler."""

from .batch import ScheduledBatch, Signature, SteadyDecodes, StepOutcome
from .kv import BlockManager, blocks_for
from .policies import BatchingPolicy
from .scheduler import Scheduler
from .sequence import Sequence

__all__ = ["BatchingPolicy", "BlockManager", "ScheduledBatch", "Scheduler", "Sequence",
           "Signature", "SteadyDecodes", "StepOutcome", "blocks_for"]
