"""``prefix_aware``: Dynamo's KV router (docs/routing.md).

The least weighted prefill blocks (those its prefix cache lacks of the prompt, plus those queued)
plus KV blocks in use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..records import RequestRecord, StageRecord
from ..scheduling import Sequence as Sequence_
from .router import C, Router


@runtime_checkable
class CachingClient(Protocol):
    """A client with a prefix cache (``LLMClient``)."""

    name: str
    block_size: int

    def load(self, metric: str) -> int: ...

    def cached_prefix_tokens(self, probe: Sequence_) -> int: ...


class PromptProbe:
    """A request's prompt as a sequence no client holds, to look up in prefix caches."""

    def __init__(self, request: RequestRecord) -> None:
        stage = StageRecord(kind="prefill", client="", enqueue_ns=-1)
        self.seq = Sequence_(request, stage, num_tokens=request.input_tokens, num_computed=0, target_generated=1,
                             prefix_id=request.prefix_id)


class PrefixAware(Router):
    """Dynamo's KV router at temperature 0: the least ``overlap_score_weight`` x prefill blocks (the
    prompt tokens queued there plus this prompt's tokens its prefix cache lacks, over the block
    size) + KV blocks in use; ties to the first listed. Clients without a prefix cache (stage
    services) are chosen by fewest stages."""

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        if not all(isinstance(c, CachingClient) for c in candidates):
            return min(candidates, key=lambda c: c.load("stages"))
        weight = self.config.overlap_score_weight
        probes: dict[int, PromptProbe] = {}  # by block size: one hash chain for every candidate

        def cost(client: C) -> float:
            assert isinstance(client, CachingClient)
            probe = probes.setdefault(client.block_size, PromptProbe(request))
            new = request.input_tokens - client.cached_prefix_tokens(probe.seq)
            prefill_blocks = (client.load("prefill_tokens") + new) / client.block_size
            return weight * prefill_blocks + client.load("kv_blocks")

        return min(candidates, key=cost)
