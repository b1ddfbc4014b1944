"""``cosim goodput CONFIG``: the highest request rate at which the config's SLOs hold."""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..studies.search import GoodputResult


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "goodput", help="find the highest request rate meeting the SLOs (bisection with confidence bounds)",
        description="Bisection on the request rate (BestServe Algorithm 8); a rate is feasible when the upper "
                    "confidence bound of every SLO statistic across seeded replications meets its target.")
    parser.add_argument("config", help="scenario YAML file with an slo: section")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set workload.requests=500")
    parser.add_argument("--confidence", type=float, default=0.9, help="joint confidence level (default 0.9)")
    parser.add_argument("--replications", type=int, default=5, help="seeded runs per rate (default 5)")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="relative width of the goodput bracket (default 0.05)")
    parser.add_argument("--requests", type=int, help="requests per run (default: the workload's)")
    parser.add_argument("--seed", type=int, help="first seed (default: the config's)")
    parser.add_argument("--lower-rate", type=float, help="pessimistic rate, requests/s (default 0.1 / T_min)")
    parser.add_argument("--upper-rate", type=float, help="first upper bound, requests/s (default 1.2 / T_min)")
    parser.add_argument("--workers", type=int, default=1, help="processes running the replications (default 1)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.set_defaults(handler=goodput_command)


def _text(result: GoodputResult) -> str:
    upper = result.interval_rps[1]
    lines = [f"goodput: {result.goodput_rps:.4g} requests/s (SLOs hold with {result.confidence:.0%} confidence)",
             f"interval: [{result.goodput_rps:.4g}, {upper:.4g}] requests/s"
             + ("" if math.isfinite(upper) else " (no violating rate found)"),
             f"estimate: {result.estimate_rps:.4g} requests/s (mean statistic crosses the SLO)",
             f"runs: {result.num_runs} ({result.replications} seeds {result.seeds} per rate, "
             f"{len(result.points)} rates; T_min {result.single_request_s:.4g} s)",
             "", f"{'rate/s':>10}  {'verdict':<10}  statistic: mean [lower, upper] vs target"]
    for point in result.points:
        stats = "; ".join(f"{b.metric}.{b.statistic} {b.mean:.4g} [{b.lower:.4g}, {b.upper:.4g}] vs {b.target:g}"
                          for b in point.bounds)
        lines.append(f"{point.rate_per_s:>10.4g}  {point.verdict.value:<10}  {stats}")
    if result.note:
        lines.append(f"note: {result.note}")
    return "\n".join(lines)


def goodput_command(args: argparse.Namespace) -> int:
    from ..studies.search import goodput
    from ..studies.search.pool import worker_pool

    options = dict(overrides=args.overrides, confidence=args.confidence, replications=args.replications,
                   tolerance=args.tolerance, requests=args.requests, seed=args.seed, lower_rate=args.lower_rate,
                   upper_rate=args.upper_rate)
    if args.workers > 1:
        with worker_pool(args.workers) as pool:
            result = goodput(args.config, executor=pool, **options)
    else:
        result = goodput(args.config, **options)
    print(json.dumps(result.to_dict(), indent=2) if args.json else _text(result))
    return 0
