"""``cosim predict step|collective|transfer|kv``: one-off predictions through a backend.

Each subcommand lives in its own module exposing ``register_predict(subparsers)``
and goes through the same gRPC backend a run uses.
"""

from __future__ import annotations

import argparse
import importlib

PREDICT_MODULES = ("predict_step", "predict_network", "predict_kv")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("predict", help="one-off predictions (a step, a collective, a KV retrieval)",
                                   description=__doc__)
    predict_subparsers = parser.add_subparsers(title="what to predict", metavar="WHAT", required=True)
    for name in PREDICT_MODULES:
        importlib.import_module(f"{__package__}.{name}").register_predict(predict_subparsers)
