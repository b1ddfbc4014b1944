"""``cosim calibrate roofline [--data DIR] [--out PROFILE.yaml] [--report MD] [--no-cv]``.

Refits the roofline backend's default: per GPU family, the kernel
parameters on the public kernel measurements in ``--data`` (and
aiconfigurator-core's tables), the eager engine's host costs on Splitwise's
DGX iterations; reports step-level errors in sample, leaving one model out
and leaving one GPU out, and writes the profile the backend loads
(``profiles/fitted.yaml``). Given a Splitwise ``perf_model.csv`` instead of
a folder, it fits the earlier per-phase ``calibrated`` profile. The fitting
code lives with the backend (``cosim.adapters.roofline.fit`` and
``.calibrate``) and is imported only when the command runs, so the hub's own
code never depends on an adapter.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from ..errors import ScenarioError

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "calibrate", help="fit a backend's parameters to measurements",
        description="Fit a backend's parameters to measured kernels and steps.")
    kinds = parser.add_subparsers(title="backends", metavar="KIND", required=True)
    roofline = kinds.add_parser(
        "roofline", help="refit the roofline's per-family default and cross-validate it",
        description="Fit the roofline's kernel efficiencies per GPU family on the public measurements in --data "
                    "(Vidur, LLMServingSim, Splitwise; aiconfigurator-core's tables when installed) and report "
                    "step-level errors in sample, leave-one-model-out and leave-one-GPU-out. With a Splitwise "
                    "perf_model.csv as --data: the earlier per-phase `calibrated` profile.")
    roofline.add_argument("--data", type=Path, default=Path("../shared/data"),
                          help="the measurement folder (default ../shared/data), or a perf_model.csv")
    roofline.add_argument("--out", type=Path, help="profile YAML to write (default: write none)")
    roofline.add_argument("--report", type=Path, help="markdown report to write (default: print it)")
    roofline.add_argument("--no-cv", action="store_true", help="fit once, without leave-one-out refits")
    roofline.add_argument("--no-aiconfigurator", action="store_true", help="leave out aiconfigurator-core's tables")
    roofline.add_argument("--seed", type=int, default=0, help="perf_model.csv only: seed of the held-out split")
    roofline.set_defaults(handler=run_roofline)


def _command(args: argparse.Namespace) -> str:
    argv = ["calibrate", "roofline", "--data", str(args.data)]
    argv += ["--out", str(args.out)] if args.out else []
    argv += ["--report", str(args.report)] if args.report else []
    argv += ["--no-cv"] if getattr(args, "no_cv", False) else []
    return "cosim " + shlex.join(argv)


def run_roofline(args: argparse.Namespace) -> int:
    """Runs the fit; writes the profile and the report."""
    if args.data.is_dir():
        from cosim.adapters.roofline import fit  # lazy: the hub does not import adapters at load time

        return fit.run(args, _command(args))
    if not args.data.is_file():
        raise ScenarioError("--data", f"{args.data} is neither the measurement folder nor a perf_model.csv")
    return _run_calibrated(args)


def _run_calibrated(args: argparse.Namespace) -> int:
    """The earlier per-phase fit to one perf_model.csv (the ``calibrated`` profile)."""
    from cosim.adapters.roofline import calibrate  # lazy, as above

    try:
        results = calibrate.calibrate(args.data, seed=args.seed)
    except (KeyError, ValueError) as err:
        raise ScenarioError("--data", f"{args.data}: not a perf_model.csv-style file ({err})") from err
    if not results:
        raise ScenarioError("--data", f"{args.data} has no Llama-2-70B rows for {sorted(calibrate.DEVICES)}")
    source = f"{args.data.name} (Llama-2-70B, TP 2/4/8)"
    if args.out:
        calibrate.write_profile(results, args.out, source=source)
        log.info("wrote profile %s", args.out)
    report = calibrate.render_report(results, data=str(args.data), command=_command(args))
    if args.report:
        args.report.write_text(report)
    else:
        sys.stdout.write(report)
    for r in results:
        sys.stdout.write(f"{r.hardware}: held-out MAPE {r.before['all']:.1f}% -> {r.after['all']:.1f}%\n")
    return 0
