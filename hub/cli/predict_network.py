"""``cosim predict collective|transfer``: one-off network predictions.

Both read ASTRA-sim's own inputs (network.yml, system.json) and go through
the same gRPC backend a run uses: the built-in network backend is served
in-process on loopback (``launch_python``) and asked through ``NetworkClient``.

    cosim predict collective --network network.yml --system system.json \\
        --collective all_reduce --size-bytes 1048576 [--json]
    cosim predict transfer --network network.yml --src-npus 0,1 --dst-npus 8,9 \\
        --size-bytes 1073741824 [--layers 32] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from ..backends import BUILTIN_BACKENDS, NetworkClient, launch_python
from ..errors import BackendError, ScenarioError

COLLECTIVES = {"all_reduce": net_pb.COLLECTIVE_KIND_ALL_REDUCE, "all_gather": net_pb.COLLECTIVE_KIND_ALL_GATHER,
               "reduce_scatter": net_pb.COLLECTIVE_KIND_REDUCE_SCATTER,
               "all_to_all": net_pb.COLLECTIVE_KIND_ALL_TO_ALL}


def register_predict(predict_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds ``collective`` and ``transfer`` to the ``cosim predict`` subcommands."""
    parser = predict_subparsers.add_parser(
        "collective", help="time one collective on an ASTRA-sim network",
        description="Prints a collective's time in ns (congestion-unaware, as ASTRA-sim's analytical backend).")
    _common(parser)
    parser.add_argument("--collective", required=True, choices=sorted(COLLECTIVES), help="operation")
    parser.add_argument("--npus", default="", help="comma-separated NPU ids taking part (default: all)")
    parser.set_defaults(handler=run_collective)

    parser = predict_subparsers.add_parser(
        "transfer", help="time a point-to-point transfer on an ASTRA-sim network",
        description="Prints the time in ns to move --size-bytes from --src-npus to --dst-npus "
                    "(each NPU's shard in parallel).")
    _common(parser)
    parser.add_argument("--src-npus", required=True, help="comma-separated NPU ids of the sender")
    parser.add_argument("--dst-npus", required=True, help="comma-separated NPU ids of the receiver")
    parser.add_argument("--layers", type=int, default=1, help="messages sent back to back (KV layer by layer)")
    parser.set_defaults(handler=run_transfer)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--network", required=True, help="ASTRA-sim network.yml")
    parser.add_argument("--system", help="ASTRA-sim system.json (default: ring, no delays)")
    parser.add_argument("--size-bytes", required=True, type=int, help="bytes (per-NPU buffer for collectives)")
    parser.add_argument("--json", action="store_true", help="print a JSON object with duration_ns")


def _npus(option: str, text: str) -> list[int]:
    try:
        npus = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise ScenarioError(option, f"must be comma-separated NPU ids, got {text!r}") from err
    if not npus or min(npus) < 0:
        raise ScenarioError(option, f"must list NPU ids >= 0, got {text!r}")
    return npus


def _spec(args: argparse.Namespace, endpoints: list[tuple[str, list[int]]]) -> net_pb.NetworkSessionSpec:
    from cosim.adapters.network.astra_inputs import AstraInputError, session_spec_from_files

    if args.size_bytes <= 0:
        raise ScenarioError("--size-bytes", f"must be > 0, got {args.size_bytes}")
    try:
        return session_spec_from_files(args.network, args.system, endpoints=endpoints, mode=pb.SYNC_MODE_PREDICT,
                                       client="cosim predict")
    except AstraInputError as err:
        raise ScenarioError(err.where, err.message) from err


def _ask(spec: net_pb.NetworkSessionSpec, call: Callable[[NetworkClient, str], int],
         options: dict[str, str]) -> int:
    """Serves the network backend, opens a session on ``spec`` and runs ``call``.

    ``options`` maps a spec field prefix (``spec.endpoints[0]``) to the CLI
    option it came from, so a rejected value is reported where the user typed it.
    """
    launched = launch_python("network", BUILTIN_BACKENDS["network"])
    client = NetworkClient("network", launched.address)
    try:
        session_id = client.open_session(spec).session_id
        return call(client, session_id)
    except BackendError as err:
        if err.message.startswith("INVALID_ARGUMENT"):  # the input was bad, not the backend
            message = err.message.removeprefix("INVALID_ARGUMENT: ")
            where = next((o for prefix, o in options.items() if message.startswith(prefix)), "--network/--system")
            raise ScenarioError(where, message) from err
        raise
    finally:
        client.close()
        launched.stop()


def _emit(args: argparse.Namespace, duration_ns: int) -> int:
    if args.json:
        sys.stdout.write(json.dumps({"duration_ns": duration_ns}) + "\n")
    else:
        sys.stdout.write(f"{duration_ns} ns\n")
    return 0


def run_collective(args: argparse.Namespace) -> int:
    endpoints = [("group", _npus("--npus", args.npus))] if args.npus else []
    spec = _spec(args, endpoints)
    op = net_pb.CollectiveOp(id=1, kind=COLLECTIVES[args.collective], size_bytes=args.size_bytes,
                             endpoint="group" if args.npus else "")
    return _emit(args, _ask(spec, lambda c, sid: c.collective(sid, [op], stateful=False)[0].duration_ns,
                            {"spec.endpoints[0]": "--npus", "collectives[0]": "--npus"}))


def run_transfer(args: argparse.Namespace) -> int:
    if args.layers < 1:
        raise ScenarioError("--layers", f"must be >= 1, got {args.layers}")
    spec = _spec(args, [("src", _npus("--src-npus", args.src_npus)), ("dst", _npus("--dst-npus", args.dst_npus))])
    transfer = net_pb.PointToPoint(id=1, src="src", dst="dst", size_bytes=args.size_bytes, layers=args.layers)
    return _emit(args, _ask(spec, lambda c, sid: c.transfer(sid, [transfer], stateful=False)[0].duration_ns,
                            {"spec.endpoints[0]": "--src-npus", "spec.endpoints[1]": "--dst-npus"}))
