"""Routing a stage to one of the clients that can serve it (MIST §III).

Each policy is a :class:`Router` of its own module, registered by name in
:data:`cosim.hub.config.choices.ROUTERS` (``router.policy``):

- ``round_robin``, ``random``, ``least_outstanding`` (fewest stages in flight) and ``load_based``
  (least load): :mod:`.simple`;
- ``heavy_light``: long prompts to the heavy group, short ones to the rest, least load within a group;
- ``vllm_dp``: vLLM's internal data-parallel load balancer;
- ``lora_affinity``: the clients holding the request's LoRA adapter, then least load;
- ``prefix_aware``: Dynamo's KV router;
- ``sticky``: session affinity, deferring to ``sticky_base``.

Load is each client's own figure (``LLMClient.load``), by ``router.load_metric``
(:data:`cosim.hub.config.choices.LOAD_METRICS`); stage clients count the stages they hold, whatever
the metric. Ties go to the client listed first in the config, so routing is deterministic.
"""

from .router import Routable, Router, make_router, routes

__all__ = ["Routable", "Router", "make_router", "routes"]
