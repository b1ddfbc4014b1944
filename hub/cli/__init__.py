"""The ``cosim`` command line: one module per command family.

Each command module exposes ``register(subparsers)``, which adds its parser and
sets ``handler`` (a function of the parsed args returning an exit code).
Errors a user must fix (``ScenarioError``) print one line and exit with 2; Ctrl-C and
SIGTERM exit with 130 and 143 once what they interrupted has cleaned up (hub/studies/interrupts.py).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import CosimError, RunFolderTaken, ScenarioError
from ..studies.interrupts import exit_code, signal_name, sigterm_raises
from .collector import tuned_collector

# Command modules, in the order `cosim --help` lists them.
COMMAND_MODULES = (
    "run",
    "sweep",
    "compare",
    "validate",
    "validate_runs",
    "presets",
    "replay",
    "goodput",
    "search",
    "predict",
    "calibrate",
    "train",
    "bench",
    "serve",
    "hub",
    "submit",
    "fetch",
    "health",
)


class _PrintVersion(argparse.Action):
    """``cosim --version``: the installed version, read only when asked (it needs the package metadata)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from ..studies.provenance import cosim_version

        print(f"cosim {cosim_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cosim", description="Co-simulation hub for LLM inference serving.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)")
    parser.add_argument("--version", action=_PrintVersion, nargs=0, help="print cosim's version and exit")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cosim`` console script."""
    args = build_parser().parse_args(argv)
    args.command_line = ["cosim", *(sys.argv[1:] if argv is None else argv)]  # what run.json records
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        # SIGTERM unwinds like Ctrl-C: partial run folders, backends stopped
        with sigterm_raises(), tuned_collector():
            code = int(args.handler(args) or 0)
    except ScenarioError as err:
        print(f"error: {err.on_command_line() if isinstance(err, RunFolderTaken) else err}", file=sys.stderr)
        code = 2
    except CosimError as err:
        print(f"error: {err}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt as stop:
        print(f"interrupted by {signal_name(stop)}", file=sys.stderr)
        code = exit_code(stop)
    if argv is None:
        sys.exit(code)
    return code
