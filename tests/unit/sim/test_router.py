"""The router: vLLM's DP load balancer, and how many stages choose() sends elsewhere before a client's next."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from cosim.hub.config.choices import ROUTERS
from cosim.hub.config.sections import RouterConfig
from cosim.hub.sim.routing import Router, make_router
from cosim.hub.sim.routing.router import NEVER


@dataclass
class Client:
    """A client with a number of stages in flight (its load by any metric)."""

    name: str
    stages: int

    def load(self, metric: str) -> int:
        return self.stages


def clients(*stages: int) -> list[Client]:
    return [Client(f"c{i}", n) for i, n in enumerate(stages)]


def choices(router: Router, group: list[Client], count: int) -> list[str]:
    """The names ``choose`` picks for ``count`` stages in turn, none finishing."""
    chosen = []
    for _ in range(count):
        client = router.choose(group, None)
        client.stages += 1  # the stage it was handed
        chosen.append(client.name)
    return chosen


def foreseen(router: Router, group: list[Client]) -> list[int | None]:
    """Each client's :meth:`Router.stages_before`."""
    return [router.stages_before(group, client) for client in group]


@pytest.mark.parametrize("policy", ["round_robin", "least_outstanding"])
def test_stages_before_counts_the_stages_choose_sends_elsewhere_first(policy: str) -> None:
    router = make_router(RouterConfig(policy=policy), np.random.default_rng(0))
    group = clients(2, 0, 1)
    router.choose(group, None)  # a round-robin counter part way round (least_outstanding: no change)
    ahead = foreseen(router, group)
    chosen = choices(router, group, 10)
    assert ahead == [chosen.index(c.name) for c in group]


def test_least_outstanding_fills_the_least_loaded_first_listed_first() -> None:
    router = make_router(RouterConfig(policy="least_outstanding"), np.random.default_rng(0))
    assert foreseen(router, clients(2, 0, 1)) == [3, 0, 2]  # choose() sends c1, c1, c2, c0
    assert foreseen(router, clients(1, 1, 1)) == [0, 1, 2]


@pytest.mark.parametrize("seed", range(20))
def test_least_outstanding_stages_before_equal_choosing_one_by_one_from_any_loads(seed: int) -> None:
    """choose() fills level by level; the count must agree with it, even-loaded or far apart."""
    rng = np.random.default_rng(seed)
    router = make_router(RouterConfig(policy="least_outstanding"), rng)
    group = clients(*rng.integers(0, 12, size=int(rng.integers(2, 6))).tolist())
    ahead = foreseen(router, group)
    chosen = choices(router, group, 12 * len(group) + 1)
    assert ahead == [chosen.index(c.name) for c in group]


@pytest.mark.parametrize("policy", ["round_robin", "least_outstanding"])
def test_no_stage_goes_to_a_client_that_is_no_candidate(policy: str) -> None:
    router = make_router(RouterConfig(policy=policy), np.random.default_rng(0))
    outsider = Client("gone", 0)
    assert router.stages_before(clients(3, 5), outsider) == NEVER
    assert router.stages_before(clients(3), outsider) == NEVER


@pytest.mark.parametrize("policy", sorted(set(ROUTERS) - {"round_robin", "least_outstanding"}))
def test_policies_that_cannot_be_foreseen_tell_nothing_but_of_a_lone_candidate(policy: str) -> None:
    router = make_router(RouterConfig(policy=policy), np.random.default_rng(0))
    assert foreseen(router, clients(0, 0)) == [None, None]
    assert foreseen(router, clients(5)) == [0]


def test_vllm_dp_balances_on_published_counts_raised_locally_between_publications() -> None:
    """vLLM's DPLBAsyncMPClient: the least 4 x waiting + running (here the client's load), from
    counts published every 100 ms; each choice adds a waiting request (4) where it went."""
    now = [0]
    router = make_router(RouterConfig(policy="vllm_dp"), np.random.default_rng(0), clock=lambda: now[0])
    group = clients(9, 0)  # published at the first choice: scores 9 and 0
    picks = []
    for _ in range(4):
        client = router.choose(group, None)
        client.stages += 4  # what the client will report once the request waits there
        picks.append(client.name)
    assert picks == ["c1", "c1", "c1", "c0"]  # 0, 4, 8 beat 9; then 9 beats 12; no publication yet
    group[0].stages, group[1].stages = 30, 2  # the counts move, unseen until the next publication
    now[0] = 99_999_999
    assert router.choose(group, None).name == "c1"  # 13 vs 12 on the old counts
    now[0] = 100_000_000
    assert router.choose(group, None).name == "c1"  # published: 30 vs 2


@dataclass
class CachingClient:
    """A client with a prefix cache: its cached prompt tokens, queued prefill tokens and KV blocks."""

    name: str
    cached: int
    prefill_tokens: int
    kv_blocks: int
    block_size: int = 16

    def load(self, metric: str) -> int:
        return {"prefill_tokens": self.prefill_tokens, "kv_blocks": self.kv_blocks, "stages": 0}[metric]

    def cached_prefix_tokens(self, probe: object) -> int:
        return self.cached


def test_prefix_aware_weighs_prefill_blocks_against_blocks_in_use() -> None:
    """Dynamo's cost, weight w: w x (queued + uncached prompt tokens) / 16 + blocks in use. A 1600-token
    prompt: a (1280 cached, 320 queued, 90 blocks) costs w x 40 + 90; b (nothing cached or queued,
    20 blocks) costs w x 100 + 20."""
    from cosim.hub.sim.records import RequestRecord

    request = RequestRecord(id=0, model="m", arrival_ns=0, input_tokens=1600, output_tokens=1)
    group = [CachingClient("a", cached=1280, prefill_tokens=320, kv_blocks=90),
             CachingClient("b", cached=0, prefill_tokens=0, kv_blocks=20)]
    def chosen(weight: float) -> str:
        config = RouterConfig(policy="prefix_aware", overlap_score_weight=weight)
        return make_router(config, np.random.default_rng(0)).choose(group, request).name

    assert chosen(1.0) == "b"  # 130 against 120
    assert chosen(2.0) == "a"  # 170 against 220: prefill counts more
    group[1].kv_blocks = 30
    assert chosen(1.0) == "a"  # 130 against 130: a tie goes to the first listed
