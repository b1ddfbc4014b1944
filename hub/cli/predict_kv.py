"""``cosim predict kv``: one KV retrieval timed by the memory backend (MIST §IV-A3).

    cosim predict kv --levels lpddr,rack-shared --hit-rates 0.5,0.9 --bytes 1e9 [--json]

Goes through the same gRPC memory backend a run uses (served in-process on
loopback), in predict mode: the answer is MIST's expected retrieval time.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from ..backends import BUILTIN_BACKENDS, MemoryClient, launch_python
from ..errors import ScenarioError


def register_predict(predict_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds ``kv`` to the ``cosim predict`` subcommands."""
    parser = predict_subparsers.add_parser(
        "kv", help="time one KV-cache retrieval in a memory hierarchy",
        description="Expected time to retrieve a KV cache from a memory hierarchy (MIST's recursive formula); "
                    "what misses every level is reported as tokens to recompute.")
    parser.add_argument("--levels", required=True,
                        help="comma-separated memory presets, nearest first, e.g. lpddr,rack-shared "
                             "(known: lpddr, platform-shared, rack-shared, dcn, ddr4, nvme)")
    parser.add_argument("--hit-rates", help="comma-separated hit rate of each level in [0, 1] (default: 1 each)")
    parser.add_argument("--bytes", required=True, type=_size, dest="size_bytes", help="KV cache size, bytes")
    parser.add_argument("--kv-bytes-per-token", type=_size, default=0,
                        help="KV bytes per token, to report tokens to recompute (default: not reported)")
    parser.add_argument("--json", action="store_true", help="print a JSON object with duration_ns")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Times the retrieval through a memory backend and prints the answer."""
    from cosim.adapters.memory.presets import levels_from_presets  # data only; keeps --help light
    from cosim.v1 import memory_service_pb2 as mem_pb
    from cosim.v1 import types_pb2 as pb

    names = [name.strip() for name in args.levels.split(",") if name.strip()]
    if not names:
        raise ScenarioError("--levels", f"{args.levels!r} names no level")
    rates = _hit_rates(args.hit_rates, len(names)) if args.hit_rates else None
    if args.size_bytes <= 0:
        raise ScenarioError("--bytes", f"must be > 0, got {args.size_bytes}")
    try:
        levels = levels_from_presets(names, hit_rates=rates)
    except ValueError as err:
        raise ScenarioError("--levels", str(err)) from err
    spec = mem_pb.MemorySessionSpec(client="cli", levels=levels, mode=pb.SYNC_MODE_PREDICT,
                                    kv_bytes_per_token=args.kv_bytes_per_token)
    lookup = mem_pb.MemoryAccess(id=1, op=mem_pb.ACCESS_OP_LOOKUP, key="cli", size_bytes=args.size_bytes)
    launched = launch_python("memory", BUILTIN_BACKENDS["memory"])
    client = MemoryClient("memory", launched.address)
    try:
        session_id = client.open_session(spec).session_id
        (result,) = client.access(session_id, [lookup], stateful=False)
        client.close_session(session_id)
    finally:
        client.close()
        launched.stop()
    _report(args, names, result)
    return 0


def _report(args: argparse.Namespace, names: list[str], result: Any) -> None:
    level = names[result.level] if result.level >= 0 else None
    if args.json:
        out = {"duration_ns": result.duration_ns, "level": level, "hit": result.hit,
               "recompute_tokens": result.recompute_tokens, "levels": names, "size_bytes": args.size_bytes}
        sys.stdout.write(json.dumps(out) + "\n")
        return
    lines = [f"retrieval time: {result.duration_ns} ns ({result.duration_ns / 1e6:.3f} ms) for "
             f"{args.size_bytes} bytes over {' -> '.join(names)}",
             f"most likely served by: {level or 'none (recompute)'}"]
    if args.kv_bytes_per_token:
        lines.append(f"expected tokens to recompute: {result.recompute_tokens}")
    sys.stdout.write("\n".join(lines) + "\n")


def _size(text: str) -> int:
    """Parses a byte count, allowing 1e9 and 1_000_000."""
    try:
        return int(text.replace("_", ""))
    except ValueError:
        pass
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes") from None
    if not math.isfinite(value) or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes")
    return int(value)


def _hit_rates(text: str, num_levels: int) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",")]
    except ValueError:
        raise ScenarioError("--hit-rates", f"{text!r} must be comma-separated numbers") from None
    if len(rates) != num_levels:
        raise ScenarioError("--hit-rates", f"got {len(rates)} rates for {num_levels} levels")
    bad = [rate for rate in rates if not 0.0 <= rate <= 1.0]
    if bad:
        raise ScenarioError("--hit-rates", f"{bad[0]} is not in [0, 1]")
    return rates
