"""``cosim hub --port N``: serves HubService so ``cosim submit`` can run configs here."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

EPILOG = """\
A submitted config is untrusted input. By default the hub refuses, naming the config key:
command:/image: backends (--allow-launch), python: backends (--allow-python), address: backends
(--allow-address), unless the hub's registry (--backends) has an entry for the backend's name;
backend options naming an executable, its arguments or a file (astrasim binary/extra_args,
regression artifact/profile_bundle, roofline profile as a path, any option whose value is an
absolute, ~ or .. path: --allow-backend-files); files outside --data-dir (absolute, ~, .. or a
symbolic link leading out; uploaded files are always fine); more than --max-requests requests a
run; YAML nested deeper than 64 levels or expanding through aliases by more than 100,000 nodes.
Errors quote the contents of uploaded files only, never of the hub's own.

Exposing a hub beyond loopback: give it a token (--token-file, or COSIM_HUB_TOKEN; clients send
it with cosim submit --token-file) and TLS (--tls-cert, --tls-key; clients pass --tls-ca).
Health checks need no token.
"""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "hub", help="serve the hub over gRPC (cosim submit runs configs on it)",
        description="Serve HubService: run submitted configs, stream progress, serve their run folders.\n"
                    "Backends named in submitted configs resolve through --backends and COSIM_BACKEND_<NAME>\n"
                    "variables (name or kind -> host:port); unregistered kinds run in-process.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=50050,
                        help="port to listen on (0: pick a free one); a port in use is an error")
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to bind (0.0.0.0 in containers; beyond loopback, use --token-file)")
    parser.add_argument("--backends", metavar="FILE",
                        help="backend registry YAML: {backends: {NAME_OR_KIND: host:port}}")
    parser.add_argument("--runs-dir", default="runs/hub", help="where run folders are written (default: runs/hub)")
    parser.add_argument("--data-dir", default=".",
                        help="the only folder files named by submitted configs (traces, presets, hf_config) are "
                             "read from, unless uploaded (default: the working directory)")
    parser.add_argument("--max-upload-mb", type=float, default=64,
                        help="most MiB of local files (traces, presets) one cosim submit may upload; incoming "
                             "messages are capped at this plus 5 MiB (default: 64)")
    parser.add_argument("--max-upload-files", type=int, default=64,
                        help="most local files one cosim submit may upload (default: 64)")
    parser.add_argument("--max-requests", type=int, default=1_000_000,
                        help="most requests one run may generate (default: 1000000)")
    parser.add_argument("--max-runs", type=int, default=8,
                        help="runs in progress at once; more are refused with RESOURCE_EXHAUSTED (default: 8)")
    parser.add_argument("--keep-runs", type=int, default=200,
                        help="run folders kept in --runs-dir; a new run deletes the oldest beyond it "
                             "(0: keep all; default: 200)")
    parser.add_argument("--allow-launch", action="store_true",
                        help="let submitted configs start command: and image: backends on this machine")
    parser.add_argument("--allow-python", action="store_true",
                        help="let submitted configs import python: backends into the hub")
    parser.add_argument("--allow-address", action="store_true",
                        help="let submitted configs name address: backends (the hub connects to them)")
    parser.add_argument("--allow-backend-files", action="store_true",
                        help="let submitted configs pass backend options naming executables, arguments or files")
    parser.add_argument("--token-file", metavar="FILE",
                        help="require this bearer token (the file's first line) on every call but health checks; "
                             "default: $COSIM_HUB_TOKEN if set")
    parser.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this PEM certificate (needs --tls-key)")
    parser.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..service.auth import is_loopback, read_token, server_credentials
    from ..service.backend_registry import BackendRegistry
    from ..service.server import HubServer, HubServicer
    from ..service.submitted import SubmitPolicy

    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    if (args.tls_cert is None) != (args.tls_key is None):
        print("error: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    for flag, value in (("--max-requests", args.max_requests), ("--max-runs", args.max_runs),
                        ("--max-upload-mb", args.max_upload_mb), ("--max-upload-files", args.max_upload_files)):
        if not value > 0:
            print(f"error: {flag} must be > 0, got {value}", file=sys.stderr)
            return 2
    registry = BackendRegistry.load(args.backends)
    token = read_token(args.token_file)
    credentials = server_credentials(args.tls_cert, args.tls_key) if args.tls_cert else None
    policy = SubmitPolicy(allow_launch=args.allow_launch, allow_python=args.allow_python,
                          allow_address=args.allow_address, allow_backend_files=args.allow_backend_files,
                          max_requests=args.max_requests)
    servicer = HubServicer(args.runs_dir, registry=registry, data_dir=args.data_dir, policy=policy,
                           max_upload_bytes=int(args.max_upload_mb * 2**20),
                           max_upload_files=args.max_upload_files, max_runs=args.max_runs,
                           keep_runs=max(0, args.keep_runs))
    try:
        server = HubServer(servicer, host=args.host, port=args.port, token=token, credentials=credentials).start()
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for key, address in sorted(registry.addresses.items()):
        logging.getLogger(__name__).info("backend %s -> %s", key, address)
    if token is None and not is_loopback(args.host):
        print(f"warning: the hub listens on {args.host} without a token: anyone who can reach port {server.port} "
              f"can run configs here; give it --token-file (or COSIM_HUB_TOKEN), and TLS with --tls-cert/--tls-key",
              file=sys.stderr, flush=True)
    print(f"cosim hub listening on {server.address}{' (TLS)' if server.tls else ''}", flush=True)
    stopped = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stopped.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    stopped.wait()
    server.stop(5.0)
    return 0
