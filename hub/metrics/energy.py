"""The energy blocks of summary.json: the run's (``energy``) and each client's (``clients.<name>.energy``).

Main names: :func:`client_energy`, :func:`run_energy`. Conventions (docs/energy.md):

- ``busy_j``: the steps' energy (:mod:`cosim.hub.sim.power`: the backend's figure where it reports
  one, else the hub's power model); ``idle_j``: each device's idle power over the part of the
  run its steps did not keep it busy (device-seconds), so an idle replica still counts (an
  autoscaled replica: over its life, hub/sim/autoscale);
  ``total_j`` = busy + idle, and the ratios divide it: ``per_request_j`` (completed requests),
  ``per_output_token_j`` and ``tokens_per_j`` (output tokens generated), ``mean_power_w``
  (simulated time). A client's ratios count the requests attributed to it (see
  :func:`cosim.hub.metrics.summary.attributed_client`); a prefill client's are null.
- A client whose device has no power figure is ``{"missing": why}``; the run then reports
  ``{"missing": [clients]}`` and no total rather than a sum that leaves them out.
- Clients whose energy is not modelled (pre/post-processing, RAG and KV-retrieval stages) are
  named under ``not_modelled``; the totals are the LLM clients'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..sim.records import ClientInfo, ClientTimeline
from .stats import NS_PER_S


def _ratios(total_j: float, completed: int, output_tokens: int, sim_time_s: float) -> dict[str, float | None]:
    return {"mean_power_w": total_j / sim_time_s if sim_time_s > 0 else None,
            "per_request_j": total_j / completed if completed else None,
            "per_output_token_j": total_j / output_tokens if output_tokens else None,
            "tokens_per_j": output_tokens / total_j if output_tokens and total_j > 0 else None}


def client_energy(info: ClientInfo, timeline: ClientTimeline | None, *, completed: int, output_tokens: int,
                  sim_time_ns: int) -> dict[str, Any] | None:
    """One client's energy block; None for a client whose energy is not modelled.

    Args:
        info: the client (its devices and their power).
        timeline: its steps' energy counters, if it ran any.
        completed: requests attributed to it that finished.
        output_tokens: tokens those requests generated.
        sim_time_ns: simulated time of the run.
    """
    if not info.meters_energy:
        return None
    if info.power is None:
        return {"missing": f"device {info.device} has no power figure (tdp_w in its preset or "
                           f"hardware.<device>.overrides)"}
    busy = timeline.energy_j if timeline is not None else 0.0
    busy_device_s = timeline.device_s if timeline is not None else 0.0
    sim_time_s = sim_time_ns / NS_PER_S
    existed_s = info.existed_ns / NS_PER_S if info.existed_ns is not None else sim_time_s  # a replica's life
    idle = info.power.idle_w * max(0.0, info.num_devices * existed_s - busy_device_s)
    return {"busy_j": busy, "idle_j": idle, "total_j": busy + idle,
            **_ratios(busy + idle, completed, output_tokens, sim_time_s),
            "reported_steps": timeline.reported_energy_steps if timeline is not None else 0,
            "power_w": info.power.as_dict()}


def run_energy(clients: Sequence[ClientInfo], blocks: Mapping[str, Mapping[str, Any]], *, completed: int,
               output_tokens: int, sim_time_ns: int) -> dict[str, Any] | None:
    """The run's energy block from the clients' (:func:`client_energy`, by name); None when no
    client's energy is modelled."""
    metered = [c.name for c in clients if c.name in blocks]
    if not metered:
        return None
    missing = [name for name in metered if "missing" in blocks[name]]
    if missing:
        return {"missing": missing}
    busy = sum(blocks[name]["busy_j"] for name in metered)
    idle = sum(blocks[name]["idle_j"] for name in metered)
    block: dict[str, Any] = {"busy_j": busy, "idle_j": idle, "total_j": busy + idle,
                             **_ratios(busy + idle, completed, output_tokens, sim_time_ns / NS_PER_S)}
    others = [c.name for c in clients if c.name not in blocks]
    if others:
        block["not_modelled"] = others
    return block
