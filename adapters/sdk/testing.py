"""Conformance suite for backends: ``python -m cosim.adapters.sdk.testing module:Class``.

Runs the checks the hub relies on over a real gRPC channel, for each kind of
backend (:mod:`.conformance` lists them): Describe, health, reflection, the
kind's calls in predict mode (one answer per item, in order, durations >= 0,
deterministic), INVALID_ARGUMENT naming the field for bad input, NOT_FOUND
for an unknown session, CloseSession. The command prints a verdict per check,
``PASS``, ``FAIL`` with the reason, or ``SKIP`` (an optional service not
offered), then a count, and exits 1 if any check failed: a backend that
passes works with the hub.

    $ python -m cosim.adapters.sdk.testing lab_backend:LabBackend
    PASS  describe
    ...
    FAIL  predict_steps: durations must be >= 0, got [-5, 10, 10]

Main names: :func:`run_conformance` (serve a backend object and check it),
:func:`check_backend` (check whatever runs at an address); both return the
names of the passed checks and raise ``AssertionError`` naming each failed
one. :func:`conformance_results` and :func:`check_results` give every verdict.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from .backend import Backend, MemoryBackend, NetworkBackend, RuntimeBackend, Session
from .conformance import (
    FAIL,
    MEMORY_SERVICE,
    NETWORK_SERVICE,
    PASS,
    RUNTIME_SERVICE,
    CheckResult,
    check_results,
    memory_results,
    network_results,
    passed_or_raise,
    runtime_results,
)
from .samples import (
    SAMPLE_ACCESSES,
    SAMPLE_BATCHES,
    SAMPLE_COLLECTIVES,
    SAMPLE_TRANSFERS,
    sample_memory_spec,
    sample_network_spec,
    sample_session_spec,
)
from .server import BackendServer, load_backend

__all__ = [
    "MEMORY_SERVICE", "NETWORK_SERVICE", "RUNTIME_SERVICE", "SAMPLE_ACCESSES", "SAMPLE_BATCHES",
    "SAMPLE_COLLECTIVES", "SAMPLE_TRANSFERS", "CheckResult", "LinearBackend", "Spec", "check_backend",
    "check_memory_backend", "check_network_backend", "check_results", "check_runtime_backend",
    "conformance_results", "main", "run_conformance", "sample_memory_spec", "sample_network_spec",
    "sample_session_spec",
]

Spec = pb.SessionSpec | mem_pb.MemorySessionSpec | net_pb.NetworkSessionSpec
SpecT = TypeVar("SpecT", pb.SessionSpec, mem_pb.MemorySessionSpec, net_pb.NetworkSessionSpec)


def check_runtime_backend(address: str, spec: pb.SessionSpec | None = None) -> list[str]:
    """Runs every check against the runtime backend at ``address``; returns the passed ones' names.

    Raises:
        AssertionError: a check failed (the message names each failed check and why).
    """
    return passed_or_raise(runtime_results(address, spec))


def check_memory_backend(address: str, spec: mem_pb.MemorySessionSpec | None = None) -> list[str]:
    """Runs every check against the memory backend at ``address``; returns the passed ones' names.

    Args:
        address: ``host:port`` of the backend.
        spec: a predict-mode hierarchy the backend serves; default :func:`sample_memory_spec`.

    Raises:
        AssertionError: a check failed (the message names each failed check and why).
    """
    return passed_or_raise(memory_results(address, spec))


def check_network_backend(address: str, spec: net_pb.NetworkSessionSpec | None = None) -> list[str]:
    """Runs every check against the network backend at ``address``; returns the passed ones' names.

    Args:
        address: ``host:port`` of the backend.
        spec: a predict-mode topology with endpoints ``p`` and ``d``; default :func:`sample_network_spec`.

    Raises:
        AssertionError: a check failed (the message names each failed check and why).
    """
    return passed_or_raise(network_results(address, spec))


def check_backend(address: str) -> list[str]:
    """Runs the checks for whichever kind of backend serves at ``address`` (found by reflection).

    Raises:
        AssertionError: a check failed (the message names each failed check and why).
    """
    return passed_or_raise(check_results(address))


def _spec_of(spec: Spec | None, cls: type[SpecT]) -> SpecT | None:
    if spec is not None and not isinstance(spec, cls):
        raise TypeError(f"a {type(spec).__name__} given where the backend takes a {cls.__name__}")
    return spec


def conformance_results(backend: Backend, spec: Spec | None = None) -> list[CheckResult]:
    """Serves ``backend`` on a free loopback port and gives the verdict of every check of its kind.

    Args:
        backend: a runtime, memory or network backend object.
        spec: the session spec to check with; default the kind's sample spec.

    Raises:
        TypeError: ``spec`` is not of the backend's kind.
    """
    with BackendServer(backend) as server:
        if isinstance(backend, RuntimeBackend):
            return runtime_results(server.address, _spec_of(spec, pb.SessionSpec))
        if isinstance(backend, MemoryBackend):
            return memory_results(server.address, _spec_of(spec, mem_pb.MemorySessionSpec))
        assert isinstance(backend, NetworkBackend)  # BackendServer serves no other kind
        return network_results(server.address, _spec_of(spec, net_pb.NetworkSessionSpec))


def run_conformance(backend: Backend, spec: Spec | None = None) -> list[str]:
    """Serves ``backend`` on a free loopback port and runs the checks for its kind.

    Args:
        backend: a runtime, memory or network backend object.
        spec: the session spec to check with; default the kind's sample spec.

    Returns:
        The names of the passed checks (an optional service not offered is left out).

    Raises:
        AssertionError: a check failed (the message names each failed check and why).
        TypeError: ``spec`` is not of the backend's kind.
    """
    return passed_or_raise(conformance_results(backend, spec))


def _results_of(args: argparse.Namespace) -> list[CheckResult]:
    """The verdicts the command line asks for; loading or serving a class that fails is one FAIL."""
    if args.address:
        return check_results(args.address)
    try:  # the class may live in the working directory, as with `python -m`
        backend = load_backend(args.backend, search_paths=(Path.cwd(),))
    except ValueError as err:
        return [CheckResult("load", FAIL, str(err))]
    except Exception as err:  # noqa: BLE001 - the class's constructor failed: a verdict, not a traceback
        return [CheckResult("load", FAIL, f"{args.backend}() raised {type(err).__name__}: {err}")]
    try:
        return conformance_results(backend)
    except Exception as err:  # noqa: BLE001 - e.g. the server cannot start: a verdict, not a traceback
        return [CheckResult("serve", FAIL, f"{type(err).__name__}: {err}")]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cosim.adapters.sdk.testing``: a verdict per check; exit status 1 if any failed."""
    parser = argparse.ArgumentParser(prog="python -m cosim.adapters.sdk.testing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("backend", nargs="?", help="backend class (runtime, memory or network) as "
                                                   "package.module:ClassName")
    parser.add_argument("--address", help="check a backend already running at host:port instead")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also print the backend's log (with the traceback of each failure it logs)")
    args = parser.parse_args(argv)
    if not (args.backend or args.address):
        parser.error("give a backend class or --address")
    # The verdicts name each failure and where it was raised; the served backend's own log (the SDK
    # logs each exception with its traceback) only when asked for.
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL,
                        format="%(levelname)s %(name)s: %(message)s")
    results = _results_of(args)
    for result in results:
        print(result)  # noqa: T201 - the command's output
    counts = {v: sum(r.verdict == v for r in results) for v in (PASS, FAIL, "SKIP")}
    skipped = f", {counts['SKIP']} skipped" if counts["SKIP"] else ""
    print(f"{counts[PASS]} passed, {counts[FAIL]} failed{skipped}")  # noqa: T201
    return 1 if counts[FAIL] else 0


class LinearBackend(RuntimeBackend):
    """A test backend whose step time is linear in the batch, set by session options:

    ``duration_ns = step_ns + per_token_ns x new tokens + per_seq_ns x sequences
    + per_context_ns x context tokens``, each option defaulting to 0 (step_ns to 1000).
    In data-parallel lock-step the new tokens are padded to the most of any rank
    (``StepBatch.dp_rank_tokens``), as vLLM pads. Hand-computed scenarios use it as
    the "constant-time test backend". For energy tests: ``memory_share`` of the
    duration is reported as ``memory_ns`` and the rest as ``compute_ns`` (default 0:
    all compute_ns), and ``energy_j``, when given, is reported as each step's energy.
    ``step_error`` (e.g. 0.25), when given, is declared as the session's step error, ± that
    (for tests of the hub's prediction intervals).
    """

    name = "linear"
    version = "1.0.0"
    fidelity = pb.FIDELITY_ANALYTICAL
    description = "linear test backend (step_ns + per-token terms)"

    def open_session(self, spec: pb.SessionSpec) -> tuple[int, int, int, int, float, float | None]:
        options: dict[str, Any] = dict(spec.options)
        energy = options.get("energy_j")
        return (int(options.get("step_ns", 1000)), int(options.get("per_token_ns", 0)),
                int(options.get("per_seq_ns", 0)), int(options.get("per_context_ns", 0)),
                float(options.get("memory_share", 0.0)), None if energy is None else float(energy))

    def step_error(self, session: Session[pb.SessionSpec]) -> pb.StepError | None:
        options: dict[str, Any] = dict(session.spec.options)
        error = options.get("step_error")
        if error is None:
            return None
        return pb.StepError(low=-float(error), high=float(error), basis="linear test backend: option step_error")

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        step_ns, per_token_ns, per_seq_ns, per_context_ns, memory_share, energy_j = session.state
        tokens = max(sum(batch.new_tokens), max(batch.dp_rank_tokens, default=0))
        duration = step_ns + per_token_ns * tokens + per_seq_ns * len(batch.new_tokens) \
            + per_context_ns * sum(batch.context_tokens)
        memory_ns = round(memory_share * duration)
        timing = pb.StepTiming(duration_ns=duration, compute_ns=duration - memory_ns, memory_ns=memory_ns)
        if energy_j is not None:
            timing.energy_j = energy_j
        return timing


if __name__ == "__main__":
    sys.exit(main())
