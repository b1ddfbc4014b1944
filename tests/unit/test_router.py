"""The router's forecast (a lookahead hint) names the clients choose() then picks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from cosim.hub.config import RouterConfig
from cosim.hub.router import Router


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
    router = Router(RouterConfig(policy=policy), np.random.default_rng(0))
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
    router = Router(RouterConfig(policy="least_outstanding"), np.random.default_rng(0))
    forecast = router.forecast(clients(2, 0, 1), 4)
    assert forecast is not None and [c.name for c in forecast] == ["c1", "c1", "c2", "c0"]


@pytest.mark.parametrize("policy", ["random", "load_based", "heavy_light"])
def test_policies_that_cannot_be_foreseen_give_no_forecast(policy: str) -> None:
    router = Router(RouterConfig(policy=policy), np.random.default_rng(0))
    assert router.forecast(clients(0, 0), 3) is None
    assert [c.name for c in router.forecast(clients(5), 2)] == ["c0", "c0"]
