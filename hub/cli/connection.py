"""The options of a command that calls a hub (``cosim submit``, ``cosim fetch``)."""

from __future__ import annotations

import argparse


def add_hub_client_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--tls-ca`` and ``--token-file`` (see :func:`cosim.hub.service.auth.hub_channel`)."""
    parser.add_argument("--tls-ca", metavar="FILE",
                        help="connect over TLS, trusting the hub's certificate if this PEM CA (or the certificate "
                             "itself) signed it")
    parser.add_argument("--token-file", metavar="FILE",
                        help="send the bearer token in FILE (its first line) to a hub that needs one "
                             "(default: $COSIM_HUB_TOKEN if set)")
