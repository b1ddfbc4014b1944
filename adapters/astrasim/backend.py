"""``AstraSimBackend``: a NetworkBackend that drives a real ASTRA-sim binary.

Each transfer or collective not yet in the session's cache is written as
ASTRA-sim inputs (:mod:`.inputs`) into the session's temporary folder, run
by the binary (:mod:`.runner`) and answered with the finish time it logs.
"""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from cosim.adapters.network import validate_system
from cosim.adapters.sdk import InvalidArgument, NetworkBackend, Session
from cosim.adapters.sdk.cache import LRUCache
from cosim.adapters.sdk.validation import validate_network_spec
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from . import runner
from .inputs import RunFiles, write_collective, write_transfer

log = logging.getLogger(__name__)

NetSession = Session[net_pb.NetworkSessionSpec]
CACHE_SIZE = 4096  # results kept per session; ASTRA-sim is deterministic, so a hit is exact


@dataclass
class AstraState:
    """A session's binary, scratch folder and result cache."""

    binary: runner.Binary
    folder: Path | None  # kept runs go here when keep_files; otherwise each run gets its own temp folder
    keep_files: bool
    endpoints: dict[str, list[int]]
    cache: LRUCache[Hashable, int] = field(default_factory=lambda: LRUCache(CACHE_SIZE))
    num_runs: int = 0


def _spec_options(spec: net_pb.NetworkSessionSpec) -> dict[str, Any]:
    """The session's options (``binary``, ``extra_args``, ``timeout_s``, ``keep_files``, ``congestion_aware``)."""
    return MessageToDict(spec.options) if spec.HasField("options") else {}


class AstraSimBackend(NetworkBackend):
    """ASTRA-sim 2.0 (analytical network) run as a subprocess per transfer or collective.

    Args:
        binary: path or command name of the ASTRA-sim binary; default ``$COSIM_ASTRA_SIM`` (or
            ``$ASTRASIM_BIN``), else ``AstraSim_Analytical_Congestion_Unaware`` on PATH. A
            congestion-aware binary (``AstraSim_Analytical_Congestion_Aware``, or the session option
            ``congestion_aware: true``) takes one-dimensional topologies only.
        extra_args: options appended to every run.
        timeout_s: wall-clock limit of one run.
        keep_files: keep each run's inputs and logs (for debugging) until the session closes.
    """

    name = "astrasim"
    version = "0.1.0"
    fidelity = pb.FIDELITY_ANALYTICAL
    description = "ASTRA-sim 2.0 binary (analytical network), one run per transfer or collective"
    capabilities = ("predict", "collectives", "point_to_point", "external_binary")
    file_options = ("binary", "extra_args")

    def __init__(self, *, binary: str | None = None, extra_args: tuple[str, ...] = (), timeout_s: float = 600.0,
                 keep_files: bool = False) -> None:
        self._binary, self._extra_args, self._timeout_s = binary, tuple(extra_args), timeout_s
        self._keep_files = keep_files

    def open_session(self, spec: net_pb.NetworkSessionSpec) -> AstraState:
        validate_network_spec(spec)
        validate_system(spec)
        if spec.mode == pb.SYNC_MODE_TIME_SYNCHRONIZED:
            raise InvalidArgument("spec.mode", "SYNC_MODE_TIME_SYNCHRONIZED",
                                  "is not supported by astrasim: each transfer or collective runs in its own "
                                  "ASTRA-sim process, so work in flight does not share links; use SYNC_MODE_PREDICT, "
                                  "or the network backend for congestion-aware time-synchronized mode")
        options = _spec_options(spec)
        path = runner.resolve_binary(options.get("binary") or self._binary)
        is_aware = bool(options.get("congestion_aware", runner.is_congestion_aware(path)))
        if is_aware and len(spec.dims) > 1:
            raise InvalidArgument("spec.dims", f"{len(spec.dims)} dimensions",
                                  f"ASTRA-sim's congestion-aware analytical backend ({path}) models one dimension "
                                  "only and exits on more; use AstraSim_Analytical_Congestion_Unaware")
        binary = runner.Binary(path=path, extra_args=tuple(options.get("extra_args", self._extra_args)),
                               timeout_s=float(options.get("timeout_s", self._timeout_s)))
        keep_files = bool(options.get("keep_files", self._keep_files))
        folder = Path(tempfile.mkdtemp(prefix="cosim-astrasim-")) if keep_files else None
        log.info("astrasim session for %s: binary %s, kept runs in %s", spec.client or "-", path, folder)
        return AstraState(binary=binary, folder=folder, keep_files=keep_files,
                          endpoints={e.name: list(e.npu_ids) for e in spec.endpoints})

    def close_session(self, session: NetSession) -> None:
        if session.state.folder is not None:
            shutil.rmtree(session.state.folder, ignore_errors=True)

    def transfer(self, session: NetSession, transfers: list[net_pb.PointToPoint]) -> list[net_pb.NetworkResult]:
        state: AstraState = session.state
        results = []
        for t in transfers:
            key = ("p2p", t.src, t.dst, t.size_bytes, max(1, t.layers))
            src, dst = state.endpoints[t.src], state.endpoints[t.dst]
            duration = self._cached(state, key, functools.partial(
                write_transfer, spec=session.spec, src_npus=src, dst_npus=dst, size_bytes=t.size_bytes,
                layers=max(1, t.layers)))
            results.append(net_pb.NetworkResult(id=t.id, duration_ns=duration))
        return results

    def collective(self, session: NetSession, collectives: list[net_pb.CollectiveOp]) -> list[net_pb.NetworkResult]:
        state: AstraState = session.state
        results = []
        for i, c in enumerate(collectives):
            npus = state.endpoints[c.endpoint] if c.endpoint else None
            if npus is not None and len(npus) < 2:
                raise InvalidArgument(f"collectives[{i}].endpoint", c.endpoint,
                                      f"has {len(npus)} NPU; a collective needs at least 2")
            key = ("coll", c.kind, c.size_bytes, c.endpoint)
            duration = self._cached(state, key, functools.partial(
                write_collective, spec=session.spec, kind=c.kind, size_bytes=c.size_bytes, npus=npus))
            results.append(net_pb.NetworkResult(id=c.id, duration_ns=duration))
        return results

    @staticmethod
    def _cached(state: AstraState, key: Hashable, write: Callable[[Path], RunFiles | None]) -> int:
        """The cached answer for ``key``, or one run of the binary on what ``write`` puts in a fresh folder."""
        cached = state.cache.lookup(key)
        if cached is not None:
            return cached
        state.num_runs += 1
        if state.folder is not None:
            folder = state.folder / f"run-{state.num_runs}"
        else:
            folder = Path(tempfile.mkdtemp(prefix="cosim-astrasim-run-"))
        try:
            files = write(folder)
            duration = 0 if files is None else runner.run(state.binary, files, folder)
        finally:
            if not state.keep_files:
                shutil.rmtree(folder, ignore_errors=True)
        state.cache.store(key, duration)
        return duration
