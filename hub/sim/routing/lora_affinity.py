"""``lora_affinity``: the clients holding the request's LoRA adapter, then least load.

As adapter-aware routers such as AIBrix's and llm-d's prefer a pod with the adapter loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..records import RequestRecord
from .router import C, Router


@runtime_checkable
class AdapterHolder(Protocol):
    """A client serving LoRA adapters (``LLMClient.has_adapter``)."""

    def has_adapter(self, name: str) -> bool: ...


class LoraAffinity(Router):
    """The candidates holding the request's adapter (in a GPU slot, or named by a sequence queued
    there), else all of them; the least load by ``router.load_metric`` among them."""

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        name = request.lora
        if name is not None:
            holding = [c for c in candidates if isinstance(c, AdapterHolder) and c.has_adapter(name)]
            candidates = holding or candidates
        return min(candidates, key=lambda c: c.load(self.config.load_metric))
