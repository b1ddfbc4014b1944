"""``cosim search SPACE.yaml``: rank deployments by goodput and goodput per dollar."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "search", help="rank deployments (SKU, TP/PP, xm vs ypzd, batching) by goodput per dollar",
        description="Evaluate every deployment of a search space by goodput and write results.csv, "
                    "results.md, pareto.png and a results.jsonl checkpoint (an interrupted search resumes).")
    parser.add_argument("space", help="search space YAML (base scenario + dimensions)")
    parser.add_argument("-o", "--output", help="output folder (default: output.dir of the space)")
    parser.add_argument("--workers", type=int, default=1, help="local processes (default 1)")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run as Ray tasks: auto, host:port, ray://..., or local (start Ray here)")
    parser.add_argument("--no-resume", action="store_true", help="ignore the folder's checkpoint")
    parser.add_argument("--exhaustive", action="store_true",
                        help="finish every deployment's goodput search (default: branch and bound, which leaves "
                             "unfinished those that cannot reach the space's keep_top best; the top rows are the same)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--top", type=int, default=10, help="rows to print (default 10)")
    parser.add_argument("--json", action="store_true", help="print every row as JSON")
    parser.set_defaults(handler=search_command)


def search_command(args: argparse.Namespace) -> int:
    from ..studies.search import search
    from ..studies.search.report import markdown

    result = search(args.space, output_dir=args.output, workers=args.workers, ray=args.ray,
                    progress=False if args.no_progress else None, resume=not args.no_resume,
                    exhaustive=args.exhaustive)
    if args.json:
        print(json.dumps(result.rows, indent=2))
        return 0
    feasible = sum(1 for r in result.rows if r["status"] == "ok")
    print(markdown(result.rows[:args.top]), end="")
    pruned = sum(1 for r in result.rows if r.get("pruned"))
    print(f"{len(result.rows)} deployments: {feasible} evaluated ({pruned} pruned), "
          f"{len(result.infeasible)} infeasible ({result.num_evaluated} simulated now)")
    if result.output_dir is not None:
        print(f"results: {result.output_dir}")
    return 0
