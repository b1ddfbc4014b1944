"""``cosim hub --port N``: serves HubService so ``cosim submit`` can run configs here."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "hub", help="serve the hub over gRPC (cosim submit runs configs on it)",
        description="Serve HubService: run submitted configs, stream progress, serve their run folders. "
                    "Backends named in submitted configs resolve through --backends and COSIM_BACKEND_<NAME> "
                    "variables (name or kind -> host:port); unregistered kinds run in-process.")
    parser.add_argument("--port", type=int, default=50050, help="port to listen on (0: pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (0.0.0.0 in containers)")
    parser.add_argument("--backends", metavar="FILE",
                        help="backend registry YAML: {backends: {NAME_OR_KIND: host:port}}")
    parser.add_argument("--runs-dir", default="runs/hub", help="where run folders are written (default: runs/hub)")
    parser.add_argument("--data-dir", default=".", help="folder relative paths in submitted configs resolve against")
    parser.add_argument("--max-upload-mb", type=float, default=256,
                        help="most MiB of local files (traces, presets) one cosim submit may upload (default: 256)")
    parser.add_argument("--allow-launch", action="store_true",
                        help="let submitted configs start command: and image: backends on this machine")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..registry import BackendRegistry
    from ..server import HubServer, HubServicer

    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    registry = BackendRegistry.load(args.backends)
    servicer = HubServicer(args.runs_dir, registry=registry, data_dir=args.data_dir,
                           allow_launch=args.allow_launch, max_upload_bytes=int(args.max_upload_mb * 2**20))
    server = HubServer(servicer, host=args.host, port=args.port).start()
    for key, address in sorted(registry.addresses.items()):
        logging.getLogger(__name__).info("backend %s -> %s", key, address)
    print(f"cosim hub listening on {server.address}", flush=True)
    stopped = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stopped.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    stopped.wait()
    server.stop(5.0)
    return 0
