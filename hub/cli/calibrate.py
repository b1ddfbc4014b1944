"""``cosim calibrate roofline --data CSV [--out PROFILE.yaml] [--report MD]``.

Fits the roofline backend's efficiencies and host costs to measured step
times and writes a device profile the backend loads (session option
``profile``). The fitting code lives with the backend
(``cosim.adapters.roofline.calibrate``) and is imported only when the command
runs, so the hub's own code never depends on an adapter.
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
        description="Fit a backend's parameters to measured step times.")
    kinds = parser.add_subparsers(title="backends", metavar="KIND", required=True)
    roofline = kinds.add_parser(
        "roofline", help="fit MFU, MBU, communication efficiency and host costs per device and phase",
        description="Least-squares fit of the roofline backend to whole-step measurements "
                    "(splitwise perf_model.csv columns); reports MAPE on held-out rows before and after.")
    roofline.add_argument("--data", required=True, type=Path, help="CSV of measured steps (splitwise perf_model.csv)")
    roofline.add_argument("--out", type=Path, help="profile YAML to write (default: print nothing but the report)")
    roofline.add_argument("--report", type=Path, help="markdown report to write (default: print it)")
    roofline.add_argument("--seed", type=int, default=0, help="seed of the train/held-out split (default 0)")
    roofline.set_defaults(handler=run_roofline)


def run_roofline(args: argparse.Namespace) -> int:
    """Runs the calibration; writes the profile and the report."""
    from cosim.adapters.roofline import calibrate  # lazy: the hub does not import adapters at load time

    if not args.data.is_file():
        raise ScenarioError("--data", f"{args.data} is not a file")
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
    command = "cosim " + shlex.join(["calibrate", "roofline", "--data", str(args.data)]
                                     + (["--out", str(args.out)] if args.out else [])
                                     + (["--report", str(args.report)] if args.report else []))
    report = calibrate.render_report(results, data=str(args.data), command=command)
    if args.report:
        args.report.write_text(report)
    else:
        sys.stdout.write(report)
    for r in results:
        sys.stdout.write(f"{r.hardware}: held-out MAPE {r.before['all']:.1f}% -> {r.after['all']:.1f}%\n")
    return 0
