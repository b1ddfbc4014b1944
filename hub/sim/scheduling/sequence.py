"""A request's state on one LLM client, in vLLM's unified token view.

A sequence knows ``num_tokens`` tokens (prompt plus tokens generated so far)
and holds ``num_computed`` of them in its KV cache. Every step schedules some
of the missing ``num_tokens - num_computed`` tokens: a whole prompt, a chunk of
it, or the one token a decode adds. When a step brings ``num_computed`` up to
``num_tokens`` the model samples a new token. After a preemption by recompute
``num_computed`` drops to 0 and the prompt plus the generated tokens are
prefilled again.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Self

import numpy as np

from ..records import RequestRecord, StageRecord

WAITING, RUNNING, SWAPPED, FINISHED = "waiting", "running", "swapped", "finished"
LOADING = "loading"  # waiting while its KV blocks are copied back from an offload tier (see .offload)


class Sequence:
    """One request's stage on one client.

    Args:
        request: the request's record (updated as tokens are produced).
        stage: the stage record of this client's part of the request.
        num_tokens: tokens known when the stage starts.
        num_computed: tokens already in KV (transferred or cached).
        target_generated: the stage ends when ``generated`` (this sequence's tokens) reaches it.
        generated: tokens this sequence (one branch of the request) has produced so far.
        forks: sibling branches to spawn once it has sampled on its client (multi-path reasoning).
    """

    __slots__ = ("request", "stage", "num_tokens", "num_computed", "target_generated", "num_blocks",
                 "prefix_id", "prefix_blocks", "cached", "state", "order", "generated", "forks", "swapped_blocks",
                 "swapped_bytes", "prompt_tokens", "block_hashes", "drafts", "spec_draws", "spec_step")

    def __new__(cls, *args: object, **kwargs: object) -> Self:
        # clone() makes blank instances with Sequence.__new__; compiled by mypyc (setup.py), that needs
        # a __new__ of the class's own
        return object.__new__(cls)

    def __init__(self, request: RequestRecord, stage: StageRecord, *, num_tokens: int, num_computed: int,
                 target_generated: int, order: int = 0, prefix_id: str | None = None, generated: int = 0,
                 forks: int = 0) -> None:
        self.request, self.stage = request, stage
        self.num_tokens, self.num_computed = num_tokens, num_computed
        self.target_generated = target_generated
        self.generated, self.forks = generated, forks
        self.num_blocks = 0  # blocks of its own, after the cached ones
        self.prefix_id = prefix_id  # the declared shared prefix its first prompt tokens are (no token ids)
        self.cached: list[Hashable] = []  # its leading blocks, shared through the cache (see .kv)
        self.prefix_blocks = 0  # len(cached), kept for the hot loops
        self.prompt_tokens = num_tokens - generated  # tokens it did not generate itself
        self.block_hashes: list[bytes] = []  # its full blocks' content hashes, as far as asked (see .block_hash)
        self.state = WAITING
        self.order = order  # admission order on this client (FCFS and preemption victim choice)
        self.swapped_blocks = 0  # blocks held in host memory while SWAPPED
        self.swapped_bytes = 0
        self.drafts = 0  # speculative draft tokens to verify at its next step (see .speculative)
        self.spec_draws: np.ndarray | None = None  # speculative: one uniform draw per verification
        self.spec_step = 0  # speculative: verifications so far (the next draw's index)

    def clone(self) -> Sequence:
        """A copy to schedule hypothetically (lookahead); it shares the request and stage records,
        which only the client writes."""
        copy = Sequence.__new__(Sequence)
        copy.request, copy.stage, copy.state, copy.order = self.request, self.stage, self.state, self.order
        copy.num_tokens, copy.num_computed, copy.target_generated = self.num_tokens, self.num_computed, \
            self.target_generated
        copy.generated, copy.forks, copy.num_blocks = self.generated, self.forks, self.num_blocks
        copy.prefix_id, copy.prefix_blocks, copy.cached = self.prefix_id, self.prefix_blocks, self.cached[:]
        copy.prompt_tokens, copy.block_hashes = self.prompt_tokens, self.block_hashes
        copy.swapped_blocks, copy.swapped_bytes = self.swapped_blocks, self.swapped_bytes
        copy.drafts, copy.spec_draws, copy.spec_step = self.drafts, self.spec_draws, self.spec_step
        return copy

    @property
    def remaining_tokens(self) -> int:
        """Tokens still to schedule before the next sample (speculative drafts included)."""
        return self.num_tokens + self.drafts - self.num_computed

    @property
    def remaining_work(self) -> int:
        """Tokens left to process before the stage ends (prefill plus decodes), for packing and routing."""
        return self.remaining_tokens + self.target_generated - self.generated

    def __repr__(self) -> str:
        return (f"Sequence(r{self.request.id}, {self.state}, computed={self.num_computed}/{self.num_tokens}, "
                f"generated={self.generated}/{self.target_generated})")
