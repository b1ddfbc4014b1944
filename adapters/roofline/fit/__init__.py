"""Fits the roofline's default parameters per device family, and cross-validates them.

``python -m cosim.adapters.roofline.fit --data ../shared/data`` (or ``cosim
calibrate roofline --data ../shared/data``) reads the public kernel and step
measurements (:mod:`.datasets`, :mod:`.steps`), fits every family
(:mod:`.pipeline`), scores the fit at step level in sample, leaving one model
out and leaving one GPU out (:mod:`.cv`), and writes ``profiles/fitted.yaml``
and the markdown table of errors (:mod:`.report`). Only the fitted parameters
ship; the data is read here, at fit time. Nothing is fitted to serving-level
outcomes (``blis-h100`` measured runs, LLMServingSim's ground truth).

Main names: :func:`calibrate`, :func:`main`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from ..fitted import FITTED_PATH
from . import cv
from . import pipeline as P
from .report import Outcome, profile_yaml, render_table

log = logging.getLogger(__name__)

__all__ = ["Outcome", "calibrate", "main", "render_table"]


def aiconfigurator_version() -> str:
    try:
        from importlib.metadata import version
        return version("aiconfigurator-core")
    except Exception:  # noqa: BLE001 - any failure means "not installed"
        return "(not installed)"


def calibrate(data: Path, *, with_cv: bool = True, with_aiconfigurator: bool = True) -> Outcome:
    """Fits every family on the data folder and cross-validates (``with_cv``) at step level."""
    loaded = P.load_data(data, with_aiconfigurator=with_aiconfigurator)
    log.info("read %d kernel rows and %d steps", len(loaded.rows), len(loaded.steps))
    fit = P.fit_all(loaded)
    kernels = {d: cv.kernel_score(loaded, fit, d) for d in sorted(set(loaded.rows.device))}
    outcome = Outcome(fit, loaded, cv.in_sample(loaded, fit), {}, {}, {}, kernels)
    if with_cv:
        outcome.lomo = cv.pooled(cv.lomo(loaded, fit))
        logo_steps, outcome.logo_kernels = cv.logo(loaded, fit)
        outcome.logo = cv.pooled(logo_steps)
    return outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the fit (shared with ``cosim calibrate roofline``)."""
    parser.add_argument("--data", type=Path, default=Path("../shared/data"),
                        help="the public measurement folder (default ../shared/data)")
    parser.add_argument("--out", type=Path, help=f"profile to write (e.g. {FITTED_PATH.name} in the package)")
    parser.add_argument("--report", type=Path, help="markdown table of step-level errors to write (default: print)")
    parser.add_argument("--no-cv", action="store_true", help="skip leave-one-model/GPU-out (one fit, ~1 min)")
    parser.add_argument("--no-aiconfigurator", action="store_true", help="leave out aiconfigurator-core's tables")


def run(args: argparse.Namespace, command: str) -> int:
    """Fits, writes the profile and the report; returns the exit status."""
    outcome = calibrate(args.data, with_cv=not args.no_cv, with_aiconfigurator=not args.no_aiconfigurator)
    if args.out:
        args.out.write_text(profile_yaml(outcome, command=command, aic_version=aiconfigurator_version()))
        log.info("wrote %s", args.out)
    table = render_table(outcome)
    if args.report:
        args.report.write_text(table)
    else:
        sys.stdout.write(table)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cosim.adapters.roofline.fit", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return run(args, "python -m cosim.adapters.roofline.fit " + " ".join(argv or sys.argv[1:]))
