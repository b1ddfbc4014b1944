"""``python -m cosim.adapters.genz [--port N]``: serves the genz backend."""

from __future__ import annotations

import argparse
import logging

from cosim.adapters.sdk import serve

from .backend import GenzBackend

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    serve(GenzBackend(), port=args.port, host=args.host)
