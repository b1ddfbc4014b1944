"""``cosim run CONFIG``."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("run", help="run a scenario and write its run folder",
                                   description="Run a scenario config; print key metrics; write the run folder.")
    parser.add_argument("config", help="scenario YAML file")
    parser.add_argument("-o", "--output", help="run folder (default: output.dir of the config)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set clients[0].scheduler.max_num_seqs=64")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the files of a run folder that exists and is not empty (else refused)")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as JSON on stdout (and nothing else there)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--log-events", type=int, default=0, metavar="N",
                        help="print the first N simulation events (time, what happened; to stderr with --json)")
    parser.add_argument("--in-process", action="store_true",
                        help="call built-in and python: runtime backends in the hub's thread instead of over gRPC "
                             "on loopback: the same results, faster (docs/performance.md)")
    parser.add_argument("--intervals", action="store_true",
                        help="prediction intervals: rerun at the edges of each backend's declared step error "
                             "and give each headline metric's [low, high] (output.intervals; docs/intervals.md)")
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    from ..metrics import format_table, summary_json
    from ..studies.runner import run

    overrides = [*args.overrides, "output.intervals=true"] if args.intervals else args.overrides
    result = run(args.config, overrides=overrides, output_dir=args.output,
                 progress=False if args.no_progress else None, log_events=args.log_events,
                 overwrite=args.overwrite, command=getattr(args, "command_line", None), in_process=args.in_process)
    events = sys.stderr if args.json else sys.stdout
    for time_ns, event in result.events:
        print(f"{time_ns / 1e9:14.9f} s  {event}", file=events)
    if args.json:
        sys.stdout.write(summary_json(result.summary))
        return 0
    print(format_table(result.summary))
    if result.output_dir is not None:
        print(f"run folder: {result.output_dir}")
    return 0
