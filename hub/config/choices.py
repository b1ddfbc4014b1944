"""The named choices of a scenario, one table each: routers, batching policies, packing orders, load metrics.

The routers' table maps the name a config gives to the class that implements it (``package.module:Class``);
the scheduler's policies and orders, compiled in cosim's core, and the load metrics are made from the name,
and their tables say what each name means. The simulator makes a router's class from its table
(:func:`cosim.hub.sim.registry.chosen`); the config
models take their ``Literal`` types from the table's names, in its order (docs/config.md lists them so);
the tests that compare results run over every name. A table names its classes rather than importing
them because config is a layer below the simulator (docs/architecture.md): adding a router is its
module plus one line here (docs/contributing.md).

Built-in backend kinds are a table of the same shape in :mod:`cosim.hub.backends.kinds`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

_ROUTING = "cosim.hub.sim.routing"

# router.policy: how the coordinator picks a client for a stage (hub/sim/routing/).
ROUTERS: dict[str, str] = {
    "round_robin": f"{_ROUTING}.simple:RoundRobin",
    "random": f"{_ROUTING}.simple:Random",
    "least_outstanding": f"{_ROUTING}.simple:LeastOutstanding",
    "load_based": f"{_ROUTING}.simple:LoadBased",
    "heavy_light": f"{_ROUTING}.heavy_light:HeavyLight",
    "vllm_dp": f"{_ROUTING}.vllm_dp:VllmDp",
    "lora_affinity": f"{_ROUTING}.lora_affinity:LoraAffinity",
    "prefix_aware": f"{_ROUTING}.prefix_aware:PrefixAware",
    "sticky": f"{_ROUTING}.sticky:Sticky",
}
# Routers that defer to another (router.sticky_base), and so cannot be another's base.
WRAPPING_ROUTERS = ("sticky",)

# clients[].scheduler.batching: how a scheduler forms each step (core/src/policies.rs, compiled: the
# scheduler makes its policy from the name).
BATCHING: dict[str, str] = {
    "static": "a batch runs until every sequence in it finishes; nothing joins meanwhile",
    "continuous": "waiting prompts whole when they fit, else every running decode (Orca / vLLM V0)",
    "chunked": "running sequences first, then waiting prompts, split to one token budget (vLLM V1)",
    "mixed": "every running decode plus the whole waiting prompts that fit the rest",
}

# clients[].scheduler.packing: the order of the waiting queue and who is preempted (core/src/packing.rs,
# compiled: the scheduler makes its order from the name).
PACKING: dict[str, str] = {
    "fcfs": "arrival order; the newest running is preempted",
    "least_work_left": "the fewest prefill and decode tokens left first",
    "priority": "the request class's priority, lower first; the least important is preempted",
    "edf": "earliest deadline first; the latest deadline is preempted",
}

# router.load_metric: the load load_based and heavy_light compare (LLMClient.load computes each).
LOAD_METRICS: dict[str, str] = {
    "input_tokens": "prompt tokens of the requests a client holds",
    "kv_tokens": "tokens held in KV blocks",
    "remaining_tokens": "prefill and decode tokens still to compute",
}

if TYPE_CHECKING:  # a Literal made from a table is the models' business at run time; mypy reads str
    RouterName = str
    BaseRouterName = str
    BatchingName = str
    PackingName = str
    LoadMetricName = str
else:
    RouterName = Literal[tuple(ROUTERS)]
    BaseRouterName = Literal[tuple(name for name in ROUTERS if name not in WRAPPING_ROUTERS)]
    BatchingName = Literal[tuple(BATCHING)]
    PackingName = Literal[tuple(PACKING)]
    LoadMetricName = Literal[tuple(LOAD_METRICS)]
