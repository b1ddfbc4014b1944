"""``cosim bench [NAME ...] [--json]``: simulation speed on fixed scenarios."""

from __future__ import annotations

import argparse
import json

from ..bench import SCENARIOS, run_bench


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("bench", help="measure simulation speed on fixed scenarios",
                                   description=f"Run benchmark scenarios ({', '.join(SCENARIOS)}) and report speed.")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"scenarios (default: all of {', '.join(SCENARIOS)})")
    parser.add_argument("--json", action="store_true", help="print one JSON object per scenario")
    parser.add_argument("--requests", type=int, help="override the scenario's request count (for quick checks)")
    parser.add_argument("--no-compare", action="store_true", help="skip the in-process comparison run")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="alternate the gRPC and in-process runs N times and keep the fastest of each "
                             "(for noisy machines)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    for name in args.names or SCENARIOS:
        figures = run_bench(name, requests=args.requests, compare_in_process=not args.no_compare,
                            repeat=args.repeat)
        if args.json:
            print(json.dumps(figures))
            continue
        print(f"{name}: {figures['requests']} requests in {figures['wall_s']} s wall "
              f"({figures['requests_per_wall_s']} req/s, {figures['steps_per_wall_s']} steps/s); "
              f"{figures['rpcs_per_step']} RPCs/step, cache hit rate {figures['cache_hit_rate']}, "
              f"peak RSS {figures['peak_rss_mb']} MB, gRPC/in-process {figures['grpc_over_inprocess']}")
    return 0
