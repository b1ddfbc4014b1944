"""The built-in backend kinds (``backends.<name>.kind``): one table, read by the config, the launchers and the hub.

Each kind names the class that implements it (``package.module:Class``, imported only when the
backend starts: the hub imports no adapter at load time), the sessions it serves, and the session
options that name an executable or a file (what a hub confines for submitted configs; each backend
declares them too, as ``Backend.file_options``). A new built-in kind is its adapter plus one entry here
(docs/contributing.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Service = Literal["runtime", "memory", "network"]


@dataclass(frozen=True)
class BuiltinKind:
    """A built-in backend kind.

    Attributes:
        backend: its class, ``package.module:Class``.
        service: the sessions it serves (a client's runtime, the KV memory, the network).
        file_options: session options naming an executable, its arguments or a file.
    """

    backend: str
    service: Service
    file_options: tuple[str, ...] = ()


BUILTIN_KINDS: dict[str, BuiltinKind] = {
    "roofline": BuiltinKind("cosim.adapters.roofline:RooflineBackend", "runtime", ("profile",)),
    "regression": BuiltinKind("cosim.adapters.regression:RegressionBackend", "runtime",
                              ("artifact", "profile_bundle")),
    "memory": BuiltinKind("cosim.adapters.memory:MemoryHierarchyBackend", "memory"),
    "network": BuiltinKind("cosim.adapters.network:AnalyticalNetworkBackend", "network"),
    "genz": BuiltinKind("cosim.adapters.genz:GenzBackend", "runtime"),
    "scalesim": BuiltinKind("cosim.adapters.scalesim:ScaleSimBackend", "runtime"),
    "astrasim": BuiltinKind("cosim.adapters.astrasim:AstraSimBackend", "network", ("binary", "extra_args")),
    "aiconfigurator": BuiltinKind("cosim.adapters.aiconfigurator:AiconfiguratorBackend", "runtime"),
}

# Each kind's class, as launch_python and load_backend take it.
BUILTIN_BACKENDS: dict[str, str] = {kind: spec.backend for kind, spec in BUILTIN_KINDS.items()}
