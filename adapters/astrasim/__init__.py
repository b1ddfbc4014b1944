"""ASTRA-sim adapter: a NetworkBackend that runs a real ASTRA-sim 2.0 binary.

``AstraSimBackend`` answers ``cosim.v1.NetworkBackendService`` by writing
ASTRA-sim's own inputs for each transfer or collective (``network.yml``,
``system.json``, ``remote_memory.json``, a communicator group and one Chakra
ET per NPU; :mod:`.inputs`, :mod:`.chakra`), running the binary named by
``AstraSimBackend(binary=...)``, ``$COSIM_ASTRA_SIM`` or PATH in a per-session
temporary folder, and reading the latest ``sys[i] finished, N cycles`` line
it logs (:mod:`.runner`; one cycle is one ns). Answers are cached per
(operation, size, endpoints): ASTRA-sim is deterministic.

Without a binary, OpenSession answers UNAVAILABLE with a message saying how
to provide one. Only SYNC_MODE_PREDICT is served: each operation runs in its
own process, so operations in flight do not contend. ``docs/astrasim.md``
documents the mapping.
"""

from .backend import AstraSimBackend
from .chakra import read_et, write_et
from .inputs import network_yml, system_json, write_collective, write_transfer
from .runner import ENV_BINARY, is_congestion_aware, parse_finish_ns, resolve_binary

__all__ = ["ENV_BINARY", "AstraSimBackend", "is_congestion_aware", "network_yml", "parse_finish_ns", "read_et",
           "resolve_binary", "system_json", "write_collective", "write_transfer", "write_et"]
