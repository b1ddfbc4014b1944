"""``cosim bench [NAME ...] [--json]``: simulation speed on fixed scenarios.

``scale-1m`` and ``prefix-100k`` (:mod:`cosim.hub.studies.bench_scale`) are run only when named: they take
many minutes; each prints a line at each mark as it passes. So are the peer comparisons' workloads:
``aisimulate-matched``, which needs the aiconfigurator extra, and ``vidur-matched``.
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any

from ..studies.bench import NAMED_ONLY, SCENARIOS, run_bench
from ..studies.bench_scale import SCALE_SCENARIOS, run_scale


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    known = ", ".join((*SCENARIOS, *NAMED_ONLY, *SCALE_SCENARIOS))
    parser = subparsers.add_parser("bench", help="measure simulation speed on fixed scenarios",
                                   description=f"Run benchmark scenarios ({known}) and report speed.")
    also = ", ".join((*NAMED_ONLY, *SCALE_SCENARIOS))
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"scenarios (default: {', '.join(SCENARIOS)}; also {also})")
    parser.add_argument("--json", action="store_true", help="print one JSON object per scenario")
    parser.add_argument("--requests", type=int, help="override the scenario's request count (for quick checks)")
    parser.add_argument("--no-compare", action="store_true", help="skip the in-process comparison run")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="alternate the gRPC and in-process runs N times and keep the fastest of each "
                             "(for noisy machines)")
    parser.set_defaults(handler=run)


def _print_mark(name: str, reading: dict[str, Any]) -> None:
    print(f"{name}: {reading['requests']} requests at {reading['wall_s']} s wall "
          f"({reading['requests_per_wall_s']} req/s, {reading['steps_per_wall_s']} steps/s); "
          f"RSS {reading['rss_mb']} MB, peak {reading['peak_rss_mb']} MB; "
          f"{reading['cpu_s_per_request'] * 1e3:.3f} CPU ms a request since the last mark", flush=True)


def run(args: argparse.Namespace) -> int:
    for name in args.names or SCENARIOS:
        if name in SCALE_SCENARIOS:
            figures = run_scale(name, requests=args.requests,
                                on_mark=None if args.json else functools.partial(_print_mark, name))
            print(json.dumps(figures) if args.json else
                  f"{name}: {figures['requests']} requests in {figures['wall_s']} s wall "
                  f"({figures['requests_per_wall_s']} req/s, {figures['steps_per_wall_s']} steps/s); "
                  f"peak RSS {figures['peak_rss_mb']} MB; CPU per request, last mark over second: "
                  f"{figures['cpu_growth']}")
            continue
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
