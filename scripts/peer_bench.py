"""Times cosim and NVIDIA's AISimulate on the same requests, alternately, in one run (issue 37).

    python scripts/peer_bench.py                                   # 1,000 and 10,000 requests, 3 rounds
    python scripts/peer_bench.py --sizes 200,1000 --rounds 1       # a quick look
    python scripts/peer_bench.py --aisimulate /path/to/venv        # the peer's virtual environment

The workload is examples/bench/aisimulate-matched.yaml. Each round runs, for each size, cosim with its
backends in-process, cosim over gRPC (unless ``--no-grpc``) and the peer, one after the other, each as a
child process whose CPU seconds (user + system, its own children included) and wall seconds are taken;
the best of the rounds counts, so a shared machine's slow moments skew the figures less. The peer gets the
very requests cosim ran: the first cosim run of each size writes them (arrival time, lengths, and the
shared prefix as equal block hashes) as a Mooncake trace that AISimulate replays at its timestamps.

The peer runs from its own virtual environment, never cosim's (docs/performance.md, "Against the peers",
says how to make it); a peer whose environment is missing is skipped, saying so. The output is a markdown
table: the runs' figures, the CPU milliseconds each additional request costs between the first and last
size, and the simulated outcomes side by side (mean TTFT and TPOT, prefix cache hits), so a reader can
see that the simulators timed the same thing.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "examples" / "bench" / "aisimulate-matched.yaml"
AISIMULATE_VENV = Path("/work/oracles/aisimulate")
TRACE_BLOCK_TOKENS = 16  # hash granularity of the trace: vLLM's KV block, as in both simulators
# cosim's presets as AISimulate names them (its model library and its aiconfigurator system).
AISIMULATE_MODELS = {"meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B"}
AISIMULATE_SYSTEMS = {"H100-SXM": "h100_sxm"}
AISIMULATE_VLLM = "0.24.0"  # the vLLM collection cosim's aiconfigurator backend takes on h100_sxm (current)


@dataclass(frozen=True)
class Outcome:
    """One simulator's run: what it cost and what it simulated."""

    name: str
    requests: int
    cpu_s: float
    wall_s: float
    completed: int
    output_tokens: int
    mean_ttft_ms: float
    mean_tpot_ms: float
    prefix_hit_rate: float


def timed(cmd: list[str]) -> tuple[float, float]:
    """Runs a command to its end; returns its CPU seconds (children included) and wall seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {done.returncode}:\n{tail}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu_s, wall_s


def run_cosim(config: Path, requests: int, folder: Path, *, in_process: bool) -> Outcome:
    """``cosim run`` of the scenario cut to ``requests``, its backends in-process or over gRPC."""
    cmd = [sys.executable, "-m", "cosim", "run", str(config), "--no-progress", "--overwrite", "-o", str(folder),
           "--set", f"workload.requests={requests}", *(["--in-process"] if in_process else [])]
    cpu_s, wall_s = timed(cmd)
    summary = json.loads((folder / "summary.json").read_text())
    latency = summary["latency"]
    return Outcome("cosim, in-process" if in_process else "cosim, gRPC", requests, cpu_s, wall_s,
                   summary["requests"]["completed"], summary["output_tokens"], latency["ttft_s"]["mean"] * 1e3,
                   latency["tpot_s"]["mean"] * 1e3, summary["prefix_cache_hit_rate"])


def write_trace(run_folder: Path, path: Path) -> None:
    """Writes a cosim run's requests as a Mooncake trace: its arrivals, lengths and shared prefix.

    A request's blocks of ``TRACE_BLOCK_TOKENS`` get hash ids: the shared prefix's the same in every
    request, the rest its own, so the peer's prefix cache can hit exactly what cosim's could.
    """
    ran = yaml.safe_load((run_folder / "config.yaml").read_text())
    prefix = ran["workload"].get("prefix") or {"num_prefixes": 0, "tokens": 0, "share": 0.0}
    shared = prefix["tokens"] // TRACE_BLOCK_TOKENS if prefix["num_prefixes"] else 0
    if prefix["num_prefixes"] > 1 or (shared and prefix.get("share", 1.0) != 1.0) \
            or prefix["tokens"] % TRACE_BLOCK_TOKENS:
        raise ValueError(f"{run_folder}: the peer's trace carries one prefix every request shares, of whole "
                         f"{TRACE_BLOCK_TOKENS}-token blocks; workload.prefix is {prefix}")
    next_id = shared
    with (run_folder / "requests.csv").open(newline="") as rows, path.open("w") as trace:
        for row in csv.DictReader(rows):
            own = -(-(int(row["input_tokens"]) - shared * TRACE_BLOCK_TOKENS) // TRACE_BLOCK_TOKENS)
            hash_ids = [*range(shared), *range(next_id, next_id + own)]
            next_id += own
            # cosim's arrival_s is exact to the nanosecond; the trace's timestamp is in milliseconds.
            trace.write(json.dumps({"timestamp": round(float(row["arrival_s"]) * 1e3, 6),
                                    "input_length": int(row["input_tokens"]),
                                    "output_length": int(row["output_tokens"]), "hash_ids": hash_ids}) + "\n")


def aisimulate_config(run_folder: Path, trace: Path) -> dict[str, Any]:
    """AISimulate's prediction config of the deployment cosim ran (one aggregated vLLM worker)."""
    ran = yaml.safe_load((run_folder / "config.yaml").read_text())
    (client,) = ran["clients"]
    scheduler, hardware = client["scheduler"], client["hardware"]
    model = ran["models"][client["model"]]["preset"]
    device = ran["hardware"][hardware["device"]]["preset"]
    return {
        "engine": {
            "model": AISIMULATE_MODELS[model], "hardware": AISIMULATE_SYSTEMS[device], "backend": "vllm",
            "backend_version": AISIMULATE_VLLM, "enable_chunked_prefill": scheduler["batching"] == "chunked",
            "workers": {"aggregated": {
                "parallelism": {"tensor": hardware["tensor_parallel"]},
                "scheduler": {"max_batched_tokens": scheduler["max_num_batched_tokens"],
                              "max_sequences": scheduler["max_num_seqs"]},
                "kv_cache": {"block_size": scheduler["block_size"],
                             "prefix_caching": scheduler["enable_prefix_caching"]}}}},
        "traffic": {"source": {"type": "trace", "paths": [str(trace)], "format": "mooncake",
                               "block_size": TRACE_BLOCK_TOKENS},
                    "load": {"type": "trace_timestamps"}},
    }


def run_aisimulate(venv: Path, cosim_folder: Path, requests: int, folder: Path) -> Outcome:
    """``aisimulate predict`` on the requests of a cosim run (:func:`write_trace`)."""
    folder.mkdir(parents=True, exist_ok=True)
    trace, config = folder / "trace.jsonl", folder / "config.yaml"
    if not trace.exists():
        write_trace(cosim_folder, trace)
        config.write_text(json.dumps(aisimulate_config(cosim_folder, trace), indent=1))
    out = folder / "out"
    cpu_s, wall_s = timed([str(venv / "bin" / "aisimulate"), "predict", "-c", str(config), "--output-dir", str(out),
                           "--overwrite"])
    report = json.loads((out / "prediction.json").read_text())
    return Outcome("AISimulate", requests, cpu_s, wall_s, report["completed_requests"], report["total_output_tokens"],
                   report["mean_ttft_ms"], report["mean_tpot_ms"], report["prefix_cache_reused_ratio"])


def best(outcomes: list[Outcome]) -> Outcome:
    """The rounds of one run as one: least CPU and least wall (the simulated figures are the same)."""
    return replace(outcomes[0], cpu_s=min(o.cpu_s for o in outcomes), wall_s=min(o.wall_s for o in outcomes))


def table(results: dict[tuple[str, int], Outcome], sizes: list[int]) -> str:
    """The markdown tables of the runs: cost, then the simulated outcomes."""
    names = list(dict.fromkeys(name for name, _ in results))
    first, last = sizes[0], sizes[-1]
    lines = [f"| simulator | requests | CPU s | wall s | requests / wall s | CPU ms / request | "
             f"CPU ms / added request ({first:,} → {last:,}) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in names:
        for size in sizes:
            o = results[name, size]
            marginal = "" if size != last or first == last else \
                f"{(o.cpu_s - results[name, first].cpu_s) / (last - first) * 1e3:.3f}"
            lines.append(f"| {name} | {size:,} | {o.cpu_s:.2f} | {o.wall_s:.2f} | {size / o.wall_s:,.0f} | "
                         f"{o.cpu_s / size * 1e3:.3f} | {marginal} |")
    lines += ["", "| simulator | requests | completed | output tokens | mean TTFT ms | mean TPOT ms | "
              "prefix hit rate |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in names:
        for size in sizes:
            o = results[name, size]
            lines.append(f"| {name} | {size:,} | {o.completed:,} | {o.output_tokens:,} | {o.mean_ttft_ms:.2f} | "
                         f"{o.mean_tpot_ms:.3f} | {o.prefix_hit_rate:.3f} |")
    return "\n".join(lines)


def versions(venv: Path | None) -> list[str]:
    """What ran: the machine, cosim (and its commit), aiconfigurator-core, the peer."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    lines = [f"machine: {cpu}, {len(os.sched_getaffinity(0))} CPUs usable, Python {platform.python_version()}",
             f"cosim {metadata.version('cosim')} ({commit.stdout.strip() or 'no git'}), "
             f"aiconfigurator-core {metadata.version('aiconfigurator-core')}"]
    if venv is not None:
        peer = subprocess.run([str(venv / "bin" / "python"), "-c",
                               "import importlib.metadata as m; print(m.version('aisimulate'))"],
                              capture_output=True, text=True)
        lines.append(f"AISimulate {peer.stdout.strip()} ({venv})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="the scenario (default: %(default)s)")
    parser.add_argument("--sizes", default="1000,10000", help="request counts, comma-separated (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best counts (default: 3)")
    parser.add_argument("--aisimulate", type=Path, default=AISIMULATE_VENV,
                        help="AISimulate's virtual environment (default: %(default)s)")
    parser.add_argument("--no-grpc", action="store_true", help="leave out cosim over gRPC")
    args = parser.parse_args(argv)
    sizes = sorted(int(size) for size in args.sizes.split(","))
    venv: Path | None = args.aisimulate
    if not (args.aisimulate / "bin" / "aisimulate").exists():
        print(f"AISimulate skipped: no {args.aisimulate / 'bin' / 'aisimulate'} (make the environment as "  # noqa: T201
              "docs/performance.md says, or name it with --aisimulate)", file=sys.stderr)
        venv = None
    results: dict[tuple[str, int], list[Outcome]] = {}
    with tempfile.TemporaryDirectory(prefix="peer-bench-") as scratch:
        for round_ in range(args.rounds):
            for size in sizes:
                cosim_folder = Path(scratch) / f"cosim-{size}"
                runs: list[Callable[[], Outcome]] = [
                    functools.partial(run_cosim, args.config, size, cosim_folder, in_process=True)]
                if not args.no_grpc:
                    runs.append(functools.partial(run_cosim, args.config, size, Path(scratch) / f"grpc-{size}",
                                                  in_process=False))
                if venv is not None:  # after cosim in-process, whose run folder gives it its requests
                    runs.append(functools.partial(run_aisimulate, venv, cosim_folder, size,
                                                  Path(scratch) / f"ais-{size}"))
                for run in runs:
                    outcome = run()
                    results.setdefault((outcome.name, size), []).append(outcome)
                    print(f"round {round_ + 1}: {outcome.name}, {size} requests: {outcome.cpu_s:.2f} CPU s, "  # noqa: T201
                          f"{outcome.wall_s:.2f} wall s", file=sys.stderr, flush=True)
    print("\n".join(f"- {line}" for line in versions(venv)))  # noqa: T201
    print(f"- {args.config.relative_to(REPO) if args.config.is_relative_to(REPO) else args.config}, "  # noqa: T201
          f"best of {args.rounds} alternating rounds\n")
    print(table({key: best(outcomes) for key, outcomes in results.items()}, sizes))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
