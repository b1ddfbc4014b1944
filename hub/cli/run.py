"""``cosim run CONFIG``, or ``cosim run --model M --device D ...``: a run from flags alone."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import ScenarioError

# The flags of a run without a config: each is a field of the config it makes, which the run validates as any.
FLAGS = ("model", "device", "tp", "rate", "requests", "input_tokens", "output_tokens")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("run", help="run a scenario and write its run folder",
                                   description="Run a scenario config; print key metrics; write the run folder. "
                                               "Without a config, the flags of 'a run from flags alone' make one.")
    parser.add_argument("config", nargs="?", help="scenario YAML file (or none, and --model, --device, ...)")
    parser.add_argument("-o", "--output", help="run folder (default: output.dir of the config; none from flags alone)")
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
    flags = parser.add_argument_group(
        "a run from flags alone", "one client on the roofline backend with chunked batching and the scheduler's "
        "vLLM defaults; requests of fixed lengths, as vllm bench serve's random dataset (its defaults where a "
        "flag is left out); --set changes any field of the config they make")
    flags.add_argument("--model", help="a model preset, e.g. meta-llama/Llama-3.1-8B (cosim presets models)")
    flags.add_argument("--device", help="a device preset, e.g. H100-SXM (cosim presets devices)")
    flags.add_argument("--tp", type=int, help="tensor-parallel degree, as many devices (default 1)")
    flags.add_argument("--rate", type=_rate, help="requests per second, Poisson, or inf: all at once (default inf)")
    flags.add_argument("--requests", type=int, help="requests to send (default 1000)")
    flags.add_argument("--input-tokens", type=int, help="every prompt's length, tokens (default 1024)")
    flags.add_argument("--output-tokens", type=int, help="every output's length, tokens (default 128)")
    parser.set_defaults(handler=run_command)


def _rate(text: str) -> float | str:
    return "inf" if text.strip().lower() in ("inf", "infinity") else float(text)


def scenario_source(args: argparse.Namespace) -> str | dict[str, Any]:
    """The config file, or the config of a run from flags alone (a mapping, validated by the run as any).

    Raises:
        ScenarioError: a config file and flags both, or flags without --model and --device, or neither.
    """
    given = [f"--{name.replace('_', '-')}" for name in FLAGS if getattr(args, name) is not None]
    if args.config is not None and given:
        raise ScenarioError(" ".join(given), f"a run takes a config file ({args.config}) or flags alone, not "
                                             "both; change a config's fields with --set KEY=VALUE")
    if args.config is not None:
        return str(args.config)
    missing = [flag for flag in ("--model", "--device") if flag not in given]
    if missing:
        raise ScenarioError(" ".join(missing), "give a scenario YAML file, or run from flags alone with at least "
                                               "--model and --device (e.g. --model meta-llama/Llama-3.1-8B "
                                               "--device H100-SXM)")
    from ..config.vllm_bench import VllmBenchConfig  # late: pydantic, for this command only

    bench = VllmBenchConfig()  # vllm bench serve's defaults: 1000 prompts of 1024 tokens, 128 out, all at once

    def flag(name: str, default: Any) -> Any:
        value = getattr(args, name)
        return default if value is None else value

    tp, rate = flag("tp", 1), flag("rate", bench.request_rate)
    return {
        "models": {"model": {"preset": args.model}},
        "hardware": {"device": {"preset": args.device}},
        "backends": {"roofline": {"kind": "roofline"}},
        "clients": [{"name": "c0", "model": "model", "backend": "roofline",
                     "hardware": {"device": "device", "count": tp, "tensor_parallel": tp},
                     "scheduler": {"batching": "chunked"}}],
        "workload": {
            "requests": flag("requests", bench.num_prompts),
            "arrival": {"process": "constant"} if rate == "inf" else {"process": "poisson", "rate_per_s": rate},
            "input_tokens": {"dist": "fixed", "value": flag("input_tokens", bench.random_input_len)},
            "output_tokens": {"dist": "fixed", "value": flag("output_tokens", bench.random_output_len)}},
    }


def run_command(args: argparse.Namespace) -> int:
    from ..metrics import format_table, summary_json
    from ..studies.runner import run

    overrides = [*args.overrides, "output.intervals=true"] if args.intervals else args.overrides
    result = run(scenario_source(args), overrides=overrides, output_dir=args.output,
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
