"""``cosim train regression --data ... --kind operator|step --out FILE``: trains a regression artifact.

Writes the versioned artifact JSON and, next to it (or at ``--report``), a
markdown error report on held-out rows. The adapter code is imported inside
the handler: the hub never imports adapters at module load.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ScenarioError


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("train", help="train a backend's model from measurements",
                                   description="Train a backend's model from measurements.")
    kinds = parser.add_subparsers(title="backends", metavar="BACKEND", required=True)
    reg = kinds.add_parser(
        "regression", help="train a regression artifact (operator-level or whole-step)",
        description="Train the regression backend. --kind operator reads a shared/data-style folder (vidur "
                    "profiles, optionally splitwise/perf_model.csv for the overhead term); --kind step reads "
                    "splitwise perf_model.csv or step CSVs in the format of docs/regression.md.")
    reg.add_argument("--data", type=Path, nargs="+", required=True,
                     help="operator: the data folder; step: one or more step CSV files")
    reg.add_argument("--kind", choices=("operator", "step"), default="operator", help="which predictor to train")
    reg.add_argument("--out", type=Path, required=True, help="artifact JSON to write")
    reg.add_argument("--report", type=Path, default=None, help="markdown error report (default: OUT with .md)")
    reg.set_defaults(handler=run_regression)


def run_regression(args: argparse.Namespace) -> int:
    # Imported here so that `cosim --help` does not load the adapters.
    from cosim.adapters.regression.artifact import Artifact, save_artifact
    from cosim.adapters.regression.report import render_report
    from cosim.adapters.regression.training import train_operator, train_step

    missing = [str(p) for p in args.data if not p.exists()]
    if missing:
        raise ScenarioError("--data", f"{missing} not found")
    artifact: Artifact
    try:
        if args.kind == "operator":
            if len(args.data) != 1 or not args.data[0].is_dir():
                raise ScenarioError("--data", "--kind operator takes one data folder (like shared/data)")
            artifact, evaluation = train_operator(args.data[0])
        else:
            artifact, evaluation = train_step(list(args.data))
    except (ValueError, FileNotFoundError) as err:
        raise ScenarioError("--data", str(err)) from err
    size = save_artifact(artifact, args.out)
    report = args.report or args.out.with_suffix(".md")
    command = f"cosim train regression --kind {args.kind} --data {' '.join(map(str, args.data))} --out {args.out}"
    report.write_text(render_report({args.kind: evaluation}, command=command, speed_us={},
                                    sizes={str(args.out): size}))
    print(f"wrote {args.out} ({size} bytes) and {report}")  # the command's result, not a warning
    return 0
