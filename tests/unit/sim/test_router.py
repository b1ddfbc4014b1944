"""The router: vLLM's DP load balancer, and the forecast (a lookahead hint) naming the clients choose() then picks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from cosim.hub.config.choices import ROUTERS
from cosim.hub.config.sections import RouterConfig
from cosim.hub.sim.routing import make_router


@dataclass
class Client:
    """A client with a number of stages in flight (its load by any metric)."""

    name: str
    stages: int

    def load(self, metric: str) -> int:
        return self.stages


def clients(*stages: int) -> list[Client]:
    return [Client(f"c{i}", n) for i, n in enumerate(stages)]


@pytest.mark.parametrize("policy", ["round_robin", "least_outstanding"])
def test_forecast_names_the_clients_choose_picks_while_none_finishes(policy: str) -> None:
    router = make_router(RouterConfig(policy=policy), np.random.default_rng(0))
    group = clients(2, 0, 1)
    router.choose(group, None)  # a round-robin counter part way round (least_outstanding: no change)
    forecast = router.forecast(group, 7)
    chosen = []
    for _ in range(7):
        client = router.choose(group, None)
        client.stages += 1  # the stage it was handed
        chosen.append(client.name)
    assert forecast is not None and [c.name for c in forecast] == chosen


def test_least_outstanding_forecast_fills_the_least_loaded_first_listed_first() -> None:
    router = make_router(RouterConfig(policy="least_outstanding"), np.random.default_rng(0))
    forecast = router.forecast(clients(2, 0, 1), 4)
    assert forecast is not None and [c.name for c in forecast] == ["c1", "c1", "c2", "c0"]


def test_least_outstanding_forecast_follows_the_loads_when_asked_again() -> None:
    """Asked again with the loads unchanged it gives the same plan (a miss asks once per client); a
    stage handed out or finished since changes it."""
    router = make_router(RouterConfig(policy="least_outstanding"), np.random.default_rng(0))
    group = clients(2, 0, 1)
    first = router.forecast(group, 3)
    assert first is not None and router.forecast(group, 3) == first
    group[1].stages += 3
    again = router.forecast(group, 3)
    assert again is not None and [c.name for c in again] == ["c2", "c0", "c2"]
    assert [c.name for c in router.forecast(group, 2) or []] == ["c2", "c0"]


@pytest.mark.parametrize("seed", range(20))
def test_least_outstanding_forecast_equals_choosing_one_by_one_from_any_loads(seed: int) -> None:
    """The forecast fills level by level; choosing one stage at a time must agree, even-loaded or far apart."""
    rng = np.random.default_rng(seed)
    router = make_router(RouterConfig(policy="least_outstanding"), rng)
    group = clients(*rng.integers(0, 12, size=int(rng.integers(2, 6))).tolist())
    count = int(rng.integers(0, 20))
    forecast = router.forecast(group, count)
    chosen = []
    for _ in range(count):
        client = router.choose(group, None)
        client.stages += 1
        chosen.append(client.name)
    assert forecast is not None and [c.name for c in forecast] == chosen


@pytest.mark.parametrize("policy", sorted(set(ROUTERS) - {"round_robin", "least_outstanding"}))
def test_policies_that_cannot_be_foreseen_give_no_forecast(policy: str) -> None:
    router = make_router(RouterConfig(policy=policy), np.random.default_rng(0))
    assert router.forecast(clients(0, 0), 3) is None
    assert [c.name for c in router.forecast(clients(5), 2)] == ["c0", "c0"]


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
