"""Routing a stage to one of the clients that can serve it (MIST §III).

Policies: ``round_robin``, ``random``, ``least_outstanding`` (fewest stages
in flight), ``load_based`` (least load) and ``heavy_light`` (long prompts to
the heavy group, short ones to the rest, least load within a group) and
``prefix_aware`` (Dynamo's KV router: the least weighted prefill blocks, those its
prefix cache lacks of the prompt plus those queued, plus KV blocks in use) and
``vllm_dp`` (vLLM's internal data-parallel load balancer, ``DPLBAsyncMPClient``
in ``vllm/v1/engine/core_client.py``: the fewest 4 x waiting + running
requests, by counts its DP coordinator publishes at most every 100 ms; between
publications each choice counts one more waiting request where it went), and
``lora_affinity`` (the clients holding the request's LoRA adapter, in a GPU slot
or wanted by a request queued there, then least load, as adapter-aware routers
such as AIBrix's and llm-d's prefer a pod with the adapter loaded), and ``sticky``
(session affinity: a session's turns go to the client its first turn went to,
unless it is gone or over ``sticky_max_load``; then ``sticky_base`` decides). Load is
each client's own figure (``LLMClient.load``): ``input_tokens`` (prompt tokens
of the requests it holds), ``kv_tokens`` (tokens held in KV blocks) or
``remaining_tokens`` (prefill and decode tokens still to compute); stage
clients count the stages they hold, whatever the metric.
Ties go to the client listed first in the config, so routing is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from ..config.sections import RouterConfig
from .clients.llm import DP_WAITING_WEIGHT
from .records import RequestRecord, StageRecord
from .scheduling import Sequence as Sequence_


class Routable(Protocol):
    """A client the router can choose: its name and its load by a metric (``LLMClient.load``)."""

    name: str

    def load(self, metric: str) -> int: ...


@runtime_checkable
class AdapterHolder(Protocol):
    """A client serving LoRA adapters (``LLMClient.has_adapter``), for ``lora_affinity``."""

    def has_adapter(self, name: str) -> bool: ...


C = TypeVar("C", bound=Routable)


@runtime_checkable
class CachingClient(Protocol):
    """A client with a prefix cache (``LLMClient``), for ``prefix_aware`` routing."""

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

# vLLM's DPCoordinator publishes the engines' request counts every stats_update_interval_ms (100).
DP_STATS_INTERVAL_NS = 100_000_000


class Router:
    """Chooses a client for each stage.

    Args:
        config: the router section of the scenario.
        rng: the run's generator (for ``random``).
        clock: the simulation's time, ns (for ``vllm_dp``'s count publications).
    """

    def __init__(self, config: RouterConfig, rng: np.random.Generator,
                 clock: Callable[[], int] = lambda: 0) -> None:
        self.config, self.rng, self.clock = config, rng, clock
        self._next: dict[tuple[str, ...], int] = {}
        self._published: dict[tuple[str, ...], tuple[int, list[int]]] = {}  # vllm_dp: when, and the scores
        self._pins: dict[int, list[str]] = {}  # sticky: session -> the clients its turns go to

    def choose(self, candidates: Sequence[C], request: RequestRecord) -> C:
        """Picks one of ``candidates`` (non-empty, in config order) for ``request``."""
        if self.config.policy == "sticky":
            return self._sticky(candidates, request)
        return self._choose(self.config.policy, candidates, request)

    def _choose(self, policy: str, candidates: Sequence[C], request: RequestRecord) -> C:
        if len(candidates) == 1:
            return candidates[0]
        if policy == "round_robin":
            key = tuple(c.name for c in candidates)
            i = self._next.get(key, 0)
            self._next[key] = (i + 1) % len(candidates)
            return candidates[i]
        if policy == "random":
            return candidates[int(self.rng.integers(len(candidates)))]
        if policy == "least_outstanding":
            return min(candidates, key=lambda c: c.load("stages"))
        if policy == "vllm_dp":
            return self._vllm_dp(candidates)
        if policy == "prefix_aware":
            return self._prefix_aware(candidates, request)
        if policy == "lora_affinity":
            candidates = self._holding_adapter(candidates, request)
        if policy == "heavy_light":
            candidates = self._group(candidates, request)
        return min(candidates, key=lambda c: c.load(self.config.load_metric))

    def _sticky(self, candidates: Sequence[C], request: RequestRecord) -> C:
        """``sticky``: a session's turn goes where its session's last turn went (among the candidates,
        a client it is pinned to), unless that client holds more than ``sticky_max_load`` x (the least
        loaded candidate's sequences + 1); otherwise, and for its first turn, ``sticky_base`` decides,
        and the session is pinned to that client in place of the one it leaves."""
        pinned = self._pins.get(request.session) if request.session >= 0 else None
        if pinned:
            here = [c for c in candidates if c.name in pinned]
            if here:
                bound = self.config.sticky_max_load * (min(c.load("stages") for c in candidates) + 1)
                if here[0].load("stages") <= bound:
                    return here[0]
                pinned.remove(here[0].name)
        choice = self._choose(self.config.sticky_base, candidates, request)
        if request.session >= 0:
            self._pins.setdefault(request.session, []).append(choice.name)
        return choice

    def end_session(self, session: int) -> None:
        """A session ended: ``sticky`` forgets its clients."""
        self._pins.pop(session, None)

    def forecast(self, candidates: Sequence[C], count: int) -> list[C] | None:
        """Where the next ``count`` stages among ``candidates`` would go if none finished
        meanwhile, or None where the policy cannot tell (random, load-based). A lookahead hint;
        routing itself is :meth:`choose`."""
        if len(candidates) == 1:
            return [candidates[0]] * count
        if self.config.policy == "round_robin":
            i = self._next.get(tuple(c.name for c in candidates), 0)
            return [candidates[(i + k) % len(candidates)] for k in range(count)]
        if self.config.policy == "least_outstanding":
            load = [c.load("stages") for c in candidates]
            chosen = []
            for _ in range(count):
                j = load.index(min(load))  # the first listed among the least loaded, as choose() picks
                load[j] += 1
                chosen.append(candidates[j])
            return chosen
        return None

    def _vllm_dp(self, candidates: Sequence[C]) -> C:
        """vLLM's DP load balancer: the least score among the published counts, which the choice
        then raises by one waiting request until the next publication. Publications are taken
        lazily: the first choice 100 ms or more after the last one reads the clients' counts."""
        key = tuple(c.name for c in candidates)
        now = self.clock()
        published = self._published.get(key)
        if published is None or now - published[0] >= DP_STATS_INTERVAL_NS:
            published = self._published[key] = (now, [c.load("dp_score") for c in candidates])
        scores = published[1]
        i = scores.index(min(scores))  # ties to the first listed, as vLLM starts from engine 0
        scores[i] += DP_WAITING_WEIGHT
        return candidates[i]

    def _holding_adapter(self, candidates: Sequence[C], request: RequestRecord) -> Sequence[C]:
        """``lora_affinity``: the candidates holding the request's LoRA adapter (in a GPU slot, or
        named by a sequence queued there), else all of them; least load decides among them."""
        name = request.lora
        if name is None:
            return candidates
        holding = [c for c in candidates if isinstance(c, AdapterHolder) and c.has_adapter(name)]
        return holding or candidates

    def _prefix_aware(self, candidates: Sequence[C], request: RequestRecord) -> C:
        """Dynamo's KV router at temperature 0: the least ``overlap_score_weight`` x prefill blocks
        (the prompt tokens queued there plus this prompt's tokens its prefix cache lacks, over the
        block size) + KV blocks in use; ties to the first listed. Clients without a prefix cache
        (stage services) are chosen by fewest stages."""
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

    def _group(self, candidates: Sequence[C], request: RequestRecord) -> Sequence[C]:
        named = set(self.config.heavy_clients)
        heavy = [c for c in candidates if c.name in named] if named else \
            list(candidates[:(len(candidates) + 1) // 2])
        light = [c for c in candidates if c not in heavy]
        is_heavy = request.input_tokens >= self.config.heavy_threshold_tokens
        group = heavy if is_heavy else light
        return group or candidates
