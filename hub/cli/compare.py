"""``cosim compare RUN_A RUN_B [...]``: run folders side by side, with overlaid CDFs."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "compare", help="compare run folders side by side and plot their latency CDFs together",
        description="Print a table of the run folders' key metrics (a column per run, later runs with their change "
                    "from the first) and write compare.csv, overlaid TTFT, TPOT and E2E CDFs (with the SLO lines "
                    "of the first run's config) and report.html (all on one page) into the output folder.")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders (as cosim run writes them)")
    parser.add_argument("-o", "--output", default="runs/compare",
                        help="folder for compare.csv, *_cdf.png and report.html (default: %(default)s)")
    parser.add_argument("--no-plots", action="store_true", help="no CDF plots")
    parser.set_defaults(handler=compare_command)


def compare_command(args: argparse.Namespace) -> int:
    from ..studies.compare import compare, format_comparison

    result = compare(args.runs, output_dir=args.output, plots=not args.no_plots)
    print(format_comparison(result))
    plots = "" if args.no_plots else ", CDFs"
    print(f"compare.csv{plots} and report.html: {result.output_dir}")
    return 0
