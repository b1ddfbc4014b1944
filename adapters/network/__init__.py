"""ASTRA-sim-style network backend: topologies, collectives, transfers, congestion.

``AnalyticalNetworkBackend`` implements ``cosim.v1.NetworkBackendService``
after ASTRA-sim 2.0's analytical network backend and system layer
(specification: ASTRA-sim's own source, summarized in the project's
astrasim-analytical reference). Main names:

- :class:`AnalyticalNetworkBackend` (:mod:`.backend`): the served class.
- :class:`NetworkModel` (:mod:`.model`): congestion-unaware times, usable
  in-process (the NCCL report calls it directly).
- :func:`load_network_yml`, :func:`load_system_json`, :func:`session_spec_from_files`
  (:mod:`.astra_inputs`): ASTRA-sim's input files to a ``NetworkSessionSpec``.

Modes (``NetworkSessionSpec.mode``):

- **SYNC_MODE_PREDICT** (congestion-unaware): ``Transfer`` and ``Collective``
  return final durations; ``now_ns`` is ignored; every send gets the full
  bandwidth of its dimension. Same inputs, same integer ns as ASTRA-sim.
- **SYNC_MODE_TIME_SYNCHRONIZED** (congestion-aware): store-and-forward links
  with FIFO queues (:mod:`.congestion`). The protocol:

  1. Each transfer or collective carries ``now_ns`` (its start) and a hub id,
     unique among the session's work in flight. Calls, and items within a
     call, arrive in nondecreasing ``now_ns``; one earlier than the session
     clock is FAILED_PRECONDITION.
  2. ``Transfer``/``Collective`` answer a *provisional* ``duration_ns``: the
     completion if nothing else were submitted. Later work can delay it
     (never hasten it), because it shares links queued after it.
  3. ``Advance(until_ns)`` commits the clock to ``until_ns`` (it must not go
     back) and returns every completion at or before it, by time then id,
     each once; ``next_event_ns`` is the earliest provisional completion
     still pending, or -1 when nothing is in flight. The hub schedules that
     time as an event and calls ``Advance`` there (conservative
     synchronization); a completion reported is final.
  4. ``Advance`` in predict mode is FAILED_PRECONDITION.
"""

from .astra_inputs import load_network_yml, load_system_json, session_spec_from_files
from .backend import AnalyticalNetworkBackend, validate_system
from .model import NetworkModel

__all__ = ["AnalyticalNetworkBackend", "NetworkModel", "load_network_yml", "load_system_json",
           "session_spec_from_files", "validate_system"]
