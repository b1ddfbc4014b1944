"""``python -m cosim.adapters.astrasim [--port N] [--binary PATH]``: serves the astrasim backend."""

from __future__ import annotations

import argparse
import logging

from cosim.adapters.sdk import serve

from .backend import AstraSimBackend

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--binary", help="ASTRA-sim binary (default: $COSIM_ASTRA_SIM, then PATH)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    serve(AstraSimBackend(binary=args.binary), port=args.port, host=args.host)
