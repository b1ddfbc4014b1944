"""``cosim replay SCENARIO.json [--measured requests.jsonl] [-o DIR]``: replay a measured vLLM run."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "replay", help="replay a measured vLLM run from its scenario file and compare",
        description="Build the cosim config of an LLMServingSim/vLLM scenario file (trace, engine settings and "
                    "profile bundle it names, resolved from the file's folder upwards), run it and write the run "
                    "folder. With --measured, also write comparison.json and plots against the measurement.")
    parser.add_argument("scenario", help="scenario JSON file (e.g. scenarios/rtx4090_llama-3.1-8b_tp1.json)")
    parser.add_argument("--measured", help="vLLM per-request requests.jsonl of the same run "
                                           "(timeseries.csv beside it is plotted too)")
    parser.add_argument("-o", "--output", help="run folder (default: runs/replay/<scenario id>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of the built config, e.g. --set backends.profile.options.skew=false")
    parser.add_argument("--backend", choices=("profile", "aiconfigurator"), default="profile",
                        help="what times the steps: the scenario's profile bundle on the regression backend "
                             "(default), or aiconfigurator's operator tables (docs/aiconfigurator.md)")
    parser.add_argument("--no-plots", action="store_true", help="write no plots")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the files of a run folder that exists and is not empty (else refused)")
    parser.set_defaults(handler=replay_command)


def replay_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..studies.replay import load_scenario, replay

    output = args.output or str(Path("runs") / "replay" / load_scenario(args.scenario).scenario_id)
    result = replay(args.scenario, measured=args.measured, output_dir=output, overrides=tuple(args.overrides),
                    plots=not args.no_plots, overwrite=args.overwrite, backend=args.backend)
    print(f"scenario {result.scenario.scenario_id}: {len(result.simulated.arrival_s)} requests")
    print(result.table())
    print(f"run folder: {output}")
    return 0
