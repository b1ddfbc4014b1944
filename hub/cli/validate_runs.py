"""``cosim validate-runs``: rerun every real serving run cosim ships and print its errors.

Prints, per run, scope and metric, the measured figure, cosim's, cosim's error and the published
errors of the other simulators that report them; then the median errors and each run's wall time.
``--fast`` runs the index's fast subset (seconds); ``--markdown FILE`` also writes the table as
markdown (into docs/validation.md between its markers), ``--json FILE`` the rows.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..studies.suite import BACKEND_CHOICES

    parser = subparsers.add_parser(
        "validate-runs", help="rerun the shipped real serving runs and print cosim's errors beside published ones",
        description="Run every real serving run of hub/studies/validation_runs/index.yaml (the H100 experiments of "
                    "the llm-d benchmark, LLMServingSim's vLLM runs) in-process on one backend and print, per run "
                    "and metric, the measured figure, cosim's, its error, and the published errors of other "
                    "simulators.")
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="auto",
                        help="what times the steps: auto (each run's own: the profile bundle of an LLMServingSim "
                             "run, the bare roofline of an H100 experiment), roofline, aiconfigurator or profile")
    parser.add_argument("--fast", action="store_true",
                        help="only the index's fast subset, H100 experiments with shortened stages (seconds)")
    parser.add_argument("--multi-turn", action="store_true",
                        help="send the H100 experiments' chats as inference-perf v0.4.0 does (each round resending "
                             "its history); default: each request its user's system prompt and question, what the "
                             "measured runs served (docs/validation.md)")
    parser.add_argument("--run", dest="runs", action="append", default=[], metavar="ID",
                        help="run only this run of the index (repeatable)")
    parser.add_argument("--markdown", metavar="FILE",
                        help="also write the table as markdown: into FILE between its '<!-- validate-runs:begin -->' "
                             "and '<!-- validate-runs:end -->' lines where it has them (docs/validation.md), else as "
                             "FILE; '-' prints it")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.set_defaults(handler=validate_runs_command)


def validate_runs_command(args: argparse.Namespace) -> int:
    import dataclasses
    import json
    import sys
    from pathlib import Path

    from ..studies.suite import format_markdown, run_suite
    from ..studies.suite.table import splice

    def progress(run_id: str, seconds: float) -> None:
        print(f"  {run_id}: {seconds:.1f} s", file=sys.stderr, flush=True)

    result = run_suite(backend=args.backend, fast=args.fast, only=tuple(args.runs), multi_turn=args.multi_turn,
                       on_run=progress)
    print(result.text())
    if args.markdown:
        table = format_markdown(result.rows, backend=args.backend)
        if args.markdown == "-":
            print(table)
        else:
            path = Path(args.markdown)
            path.write_text(splice(path.read_text() if path.is_file() else "", table))
    if args.json:
        Path(args.json).write_text(json.dumps({"backend": args.backend, "fast": args.fast, "wall_s": result.wall_s,
                                               "cpu_s": result.cpu_s, "skipped": result.skipped,
                                               "rows": [dataclasses.asdict(r) for r in result.rows]}, indent=1))
    return 0
