"""``cosim validate CONFIG``: resolve a scenario without running it; list every problem.

Prints ``error: <path>: <message>`` for each problem (pydantic's, then the
resolution's: presets, overrides, parallelism, KV capacity; then what built-in backends
say of the sessions a run opens on them; then the workload's,
drawn as a run draws it: a request no client can ever serve) and exits 2; or
prints what it resolved, with each LLM client's weights per device and computed
KV capacity, and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..studies.validation import ClientCapacity


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "validate", help="check a scenario config without running it",
        description="Resolve presets, overrides, parallelism and KV capacity as a run would, without "
                    "starting a backend; list every problem (exit 2) or what was resolved (exit 0).")
    parser.add_argument("config", help="scenario YAML file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set clients[0].hardware.tensor_parallel=2")
    parser.set_defaults(handler=validate_command)


def describe(client: ClientCapacity) -> str:
    """Per LLM client: model, cluster, parallelism, weights per device and KV capacity; then one
    device's memory as vLLM's profiling splits it (``cosim.hub.config.memory``)."""
    source = " (scheduler.num_gpu_blocks)" if client.from_num_gpu_blocks else ""
    split = ""
    if client.kv_memory is not None:
        computed = ", computed; scheduler.num_gpu_blocks sets the run's" if client.from_num_gpu_blocks else ""
        split = f"\n    per device{computed}: {client.kv_memory.describe()}"
    return (f"  {client.name} ({client.role}): {client.model} {client.dtype} on {client.device} x {client.count}, "
            f"TP {client.tensor_parallel} PP {client.pipeline_parallel} EP {client.expert_parallel}, "
            f"weights {client.weight_bytes_per_device / 1e9:.2f} GB per device, "
            f"KV cache {client.kv_capacity_blocks:,} blocks x {client.block_size_tokens} = "
            f"{client.kv_capacity_tokens:,} tokens{source}{split}")


def validate_command(args: argparse.Namespace) -> int:
    from ..config.loading import ScenarioProblems, load_config
    from ..errors import ScenarioError
    from ..studies.validation import resolve_scenario, session_problems, workload_problems

    try:
        config, folder = load_config(args.config, overrides=args.overrides)
    except ScenarioProblems as err:
        errors = err.problems
    except ScenarioError as err:
        errors = [err]
    else:
        resolution = resolve_scenario(config)
        errors = resolution.errors or session_problems(config) or workload_problems(config, resolution, folder)
    if errors:
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        return 2
    clients = f"{len(config.clients)} client{'s' * (len(config.clients) != 1)}"
    print(f"{args.config}: ok ({clients}, {config.workload.num_requests} requests)")
    for client in resolution.clients:
        print(describe(client))
    return 0
