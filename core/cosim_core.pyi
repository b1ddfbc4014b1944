"""cosim's compiled simulation core (Rust, PyO3): the types mypy sees (core/src has the docs)."""

from collections.abc import Callable, Hashable
from collections.abc import Sequence as Seq

from cosim.hub.sim.scheduling.sequence import Sequence

def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens."""

def set_block_hasher(hasher: Callable[[Sequence, int, int], list[bytes]]) -> None:
    """Registers the block hash chain (``block_hash.block_hashes``) the prefix cache keys blocks by."""

class BlockManager:
    """Paged KV blocks of one client, with vLLM V1's prefix cache (core/src/manager.rs)."""

    @property
    def num_blocks(self) -> int:
        """Capacity in blocks."""
    @property
    def block_size(self) -> int:
        """Tokens per block."""
    @property
    def num_free(self) -> int:
        """Blocks no sequence holds (cached ones nobody uses included)."""
    @property
    def num_used(self) -> int:
        """Blocks held by sequences."""
    @property
    def enable_prefix_caching(self) -> bool:
        """Whether blocks are cached by content."""
    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False) -> None: ...
    def copy(self) -> BlockManager:
        """An independent copy (lookahead schedules on it)."""
    def __copy__(self) -> BlockManager: ...
    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Extra blocks ``seq`` needs to compute ``num_new_tokens`` more tokens."""
    def cache_hit(self, seq: Sequence) -> list[Hashable]:
        """The cached blocks holding the longest run of ``seq``'s leading tokens."""
    def fits(self, seq: Sequence, num_new_tokens: int, hit: Seq[Hashable] | None = None) -> bool:
        """Whether :meth:`allocate` can give ``seq`` the blocks ``hit`` and those of ``num_new_tokens``."""
    def allocate(self, seq: Sequence, num_new_tokens: int, hit: Seq[Hashable] | None = None) -> bool:
        """Gives ``seq`` the cached blocks ``hit`` and the blocks of ``num_new_tokens``; False if it cannot."""
    def grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Allocates the blocks ``seq`` needs for ``num_new_tokens`` more tokens; False if it cannot."""
    def grow_by(self, seq: Sequence, num_blocks: int) -> bool:
        """Gives ``seq`` ``num_blocks`` more blocks (swap-in); False if it cannot."""
    def take(self, num_blocks: int) -> None:
        """Takes ``num_blocks`` free blocks from the free queue's head, evicting cached ones."""
    def release(self, seq: Sequence) -> None:
        """Frees a sequence's blocks; with prefix caching its full blocks stay cached."""
    def fork(self, parent: Sequence, children: list[Sequence], *, prompt_tokens: int) -> None:
        """Lets ``children`` share the parent's full prompt blocks."""
    def cache_full_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Turns ``seq``'s own full blocks within its first ``num_tokens`` tokens into cached blocks."""
    def holder_counts(self) -> list[int]:
        """Holder counts of the cached (or fork-shared) blocks, in no particular order (for checks)."""
    def free_queue_blocks(self) -> list[int]:
        """Blocks of each free queue entry, head first; empty without prefix caching (for checks)."""
    def check(self) -> None:
        """Raises RuntimeError if the pool's invariants do not hold."""
