"""Admission over columns: the screen that picks which requests to check one by one."""

from __future__ import annotations

import numpy as np
import pytest

from cosim.hub.config.scheduler import SchedulerConfig
from cosim.hub.config.sections import RouterConfig
from cosim.hub.errors import ScenarioError
from cosim.hub.sim.admission import ClientLimits, check_requests
from cosim.hub.sim.pipelines import Pipeline
from cosim.hub.sim.routing import routes
from cosim.hub.sim.workload import RequestSpec, RequestSpecs

CHAT = Pipeline(template="chat", stages=("prefill", "decode"), model="m")


@pytest.mark.parametrize("limits", [
    ClientLimits(name="c", model="m", prefill=True, decode=True, kv_blocks=9, block_size=16, max_model_len=150,
                 prompt_budget=120, batching="static"),
    ClientLimits(name="c", model="m", prefill=True, decode=False, kv_blocks=20, block_size=8, max_model_len=0,
                 prompt_budget=None, batching="chunked"),
])
def test_fails_over_columns_finds_what_problem_finds(limits: ClientLimits) -> None:
    prompts, generated = (a.ravel() for a in np.meshgrid(np.arange(0, 200, 3), np.arange(0, 200, 7)))
    expected = [limits.problem(p, g) is not None for p, g in zip(prompts.tolist(), generated.tolist(), strict=True)]
    assert limits.fails(prompts, generated).tolist() == expected


def test_a_request_the_screen_flags_is_refused_only_where_a_route_cannot_serve_it() -> None:
    small = ClientLimits.of("small", "m", ("prefill", "decode"), SchedulerConfig(), kv_blocks=10)
    large = ClientLimits.of("large", "m", ("prefill", "decode"), SchedulerConfig(), kv_blocks=10_000)
    route = routes(RouterConfig(policy="heavy_light", heavy_clients=["large"], heavy_threshold_tokens=500))
    lengths = [(1000, 100), (100, 50), (100, 100), (2000, 10), (120, 90)]  # heavy, light fits, light too long, ...
    specs = RequestSpecs.of([RequestSpec(id=i, arrival_ns=i, input_tokens=p, output_tokens=o, source=f"t.csv:{i + 2}")
                             for i, (p, o) in enumerate(lengths)])
    check_requests([large, small], RequestSpecs.of([specs[0], specs[1], specs[3]]), [CHAT] * 3, route=route)
    with pytest.raises(ScenarioError) as caught:
        check_requests([large, small], specs, [CHAT] * len(lengths), route=route)
    assert caught.value.where == "t.csv:4"
    assert caught.value.message.startswith("request 2 (prompt 100 tokens, output 100 tokens) can never be served")
    assert caught.value.message.endswith("(1 more requests cannot either)")
