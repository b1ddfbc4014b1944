"""``cosim serve KIND --port N``: serves a built-in backend (or any ``module:Class``)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..backends import BUILTIN_BACKENDS


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "serve", help="serve a backend over gRPC",
        description="Serve a built-in backend, or any backend class given as package.module:Class.")
    parser.add_argument("kind", help=f"one of {', '.join(BUILTIN_BACKENDS)}, or package.module:Class")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: pick a free one and print it)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (0.0.0.0 in containers)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so that `cosim --help` does not load the adapters.
    from cosim.adapters.sdk import load_backend, serve

    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    reference = BUILTIN_BACKENDS.get(args.kind, args.kind)
    try:  # a lab's module:Class may live in the working directory, as with `python -m`
        backend = load_backend(reference, search_paths=() if args.kind in BUILTIN_BACKENDS else (Path.cwd(),))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    serve(backend, port=args.port, host=args.host)
    return 0
