"""``python -m cosim.adapters.roofline [--port N]``: serves the roofline backend."""

from __future__ import annotations

import argparse
import logging

from cosim.adapters.sdk import serve

from .backend import RooflineBackend

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    serve(RooflineBackend(), port=args.port, host=args.host)
