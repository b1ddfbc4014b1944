"""``cosim sweep CONFIG --vary KEY=V1,V2,... [--vary ...]``: a run per point of a grid."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "sweep", help="run a scenario at every point of a grid of config values",
        description="Run CONFIG once per point of the grid the --vary options span (several --vary make a grid); "
                    "write a run folder per point, sweep.csv (the varied values and key metrics per point), "
                    "plots/latency_vs_load.png with the config's SLO lines and report.html (all on one page).")
    parser.add_argument("config", help="scenario YAML file")
    parser.add_argument("--vary", action="append", default=[], required=True, metavar="KEY=V1,V2,...",
                        help="a config field (dotted, as --set) and its values, e.g. "
                             "--vary workload.arrival.rate_per_s=1,2,4,8; values with commas as YAML: KEY=[[1,2],[3]]")
    parser.add_argument("-o", "--output", help="sweep folder (default: runs/sweep/<config file stem>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field at every point, e.g. --set workload.requests=200")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the files of a sweep folder that exists and is not empty (else refused)")
    parser.add_argument("--run-plots", action="store_true", help="also draw each point's own plots (slower)")
    parser.add_argument("--no-plots", action="store_true", help="no latency-vs-load plot")
    parser.add_argument("--in-process", action="store_true",
                        help="call built-in and python: runtime backends without gRPC, as cosim run --in-process")
    parser.add_argument("--workers", type=int, default=1,
                        help="points run at once, each in a local process (default 1); sweep.csv is the same")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run each point as a Ray task: auto, host:port, ray://..., or local (start Ray here)")
    parser.set_defaults(handler=sweep_command)


def sweep_command(args: argparse.Namespace) -> int:
    from ..studies.sweep import sweep

    def on_point(index: int, total: int, row: dict[str, Any]) -> None:
        shown = "failed: " + row["error"] if row["error"] else (
            f"TTFT p90 {_ms(row['ttft_s_p90'])}, TPOT p90 {_ms(row['tpot_s_p90'])}, "
            f"{_num(row['throughput_requests_per_s'])} req/s, goodput {_num(row['goodput_requests_per_s'])} req/s")
        print(f"[{index + 1}/{total}] {row['point']}: {shown}", flush=True)

    result = sweep(args.config, args.vary, output_dir=args.output, overrides=args.overrides,
                   overwrite=args.overwrite, run_plots=args.run_plots, plots=not args.no_plots,
                   command=getattr(args, "command_line", None), in_process=args.in_process, workers=args.workers,
                   ray=args.ray, on_point=on_point)
    plots = "" if args.no_plots else ", plots/latency_vs_load.png"
    print(f"sweep folder: {result.output_dir} ({len(result.rows)} run folders, sweep.csv{plots}, report.html)")
    if result.failed:
        print(f"{len(result.failed)} point(s) failed: {', '.join(result.failed)}")
        return 1
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.4g} ms"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
