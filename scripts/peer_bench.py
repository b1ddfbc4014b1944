"""Times cosim and its peers, NVIDIA's AISimulate and Microsoft's Vidur, on the same requests, alternately (issue 37).

    python scripts/peer_bench.py                                   # both peers, 1,000 and 10,000 requests, 3 rounds
    python scripts/peer_bench.py --peer vidur --sizes 200,1000 --rounds 1   # one peer, a quick look
    python scripts/peer_bench.py --aisimulate VENV --vidur VENV    # the peers' virtual environments

Each peer has its workload, examples/bench/aisimulate-matched.yaml and examples/bench/vidur-matched.yaml. Each
round runs, for each size, cosim with its backends in-process, cosim over gRPC (unless ``--no-grpc``) and the
peer, one after the other, each as a child process whose CPU seconds (user + system, its own children
included) and wall seconds are taken; the best of the rounds counts, so a shared machine's slow moments skew
the figures less. The peer gets the very requests cosim ran: the first cosim run of each size writes them as
a trace in the peer's format, a Mooncake trace (arrival time, lengths, and the shared prefix as equal block
hashes) that AISimulate replays at its timestamps, or the CSV of arrivals and lengths Vidur's
``trace_replay`` reads.

A peer runs from its own virtual environment, never cosim's (docs/performance.md, "Against the peers", says
how to make them); a peer whose environment is missing is skipped, saying so, and so is Vidur without its
profiles (``--vidur-data``, a copy of Vidur's data folder: ../shared/data/vidur). Vidur fetches its profiles
as Hugging Face datasets; the script places them in Vidur's cache as two local datasets and runs it offline.
Vidur trains its predictors on first use and keeps them in that cache, so its first run is repeated,
untimed, first. The output is, per peer, a markdown table: the runs' figures, the CPU milliseconds
each additional request costs between the first and last size, and the simulated outcomes side by side
(mean TTFT and TPOT, prefix cache hits), so a reader can see that the simulators timed the same thing.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import lzma
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, Protocol

import yaml

REPO = Path(__file__).resolve().parents[1]
AISIMULATE_CONFIG = REPO / "examples" / "bench" / "aisimulate-matched.yaml"
AISIMULATE_VENV = Path("/work/oracles/aisimulate")
TRACE_BLOCK_TOKENS = 16  # hash granularity of the trace: vLLM's KV block, as in both simulators
# cosim's presets as AISimulate names them (its model library and its aiconfigurator system).
AISIMULATE_MODELS = {"meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B"}
AISIMULATE_SYSTEMS = {"H100-SXM": "h100_sxm"}
AISIMULATE_VLLM = "0.24.0"  # the vLLM collection cosim's aiconfigurator backend takes on h100_sxm (current)

VIDUR_CONFIG = REPO / "examples" / "bench" / "vidur-matched.yaml"
VIDUR_VENV = Path("/work/oracles/vidur")
VIDUR_DATA = REPO.parent / "shared" / "data" / "vidur"
# cosim's model presets as Vidur names them (the same name is the folder of their profiles in its data).
VIDUR_MODELS = {"meta-llama/Llama-2-7b-hf": "meta-llama/Llama-2-7b-hf",
                "meta-llama/Llama-2-70b-hf": "meta-llama/Llama-2-70b-hf"}
# cosim's device presets as Vidur's device and the node (NVSwitch DGX) whose collectives it was profiled on.
VIDUR_DEVICES = {"A100-80GB": ("a100", "a100_dgx"), "H100-SXM": ("h100", "h100_dgx")}
VIDUR_DATASET_ORG = "cosim-local"  # the local datasets' owner: a name no one publishes on the Hub
VIDUR_REVISION = "0" * 40  # the one snapshot of each local dataset
VIDUR_TRACE_DATE = "cosim"  # trace_replay keeps the rows of one date; the trace has one
# Vidur's trace replay shortens a prompt so that prompt + output fits this (Llama-2's context), and its
# predictors are tabulated up to it (its default, 2 Mi tokens, would tabulate for hours on this machine).
VIDUR_MAX_TOKENS = 4096
VIDUR_COMPUTE_FILES = ("mlp.csv.xz", "attention.csv.xz")  # the rest of the profiles are the network's
VIDUR_PREDICTOR = "--random_forrest_execution_time_predictor_config_"  # Vidur's default predictor's options


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
    prefix_hit_rate: float | None  # None: the peer has no prefix cache in this run (Vidur)


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Runs a command to its end (``env`` added to the environment); returns its CPU seconds (children
    included) and wall seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})})
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


def _measures_attention(path: Path, shape: tuple[int, int, int], tp: int) -> bool:
    """Whether an attention profile holds rows of this (hidden size, query heads, KV heads) at this TP."""
    if not path.exists():
        return False
    with path.open(newline="") as rows:
        return any((int(float(row["n_embd"])), int(float(row["n_q_head"])), int(float(row["n_kv_head"]))) == shape
                   and int(float(row["num_tensor_parallel_workers"])) == tp for row in csv.DictReader(rows))


def vidur_profiles(data: Path, device: str, node: str, model: str, tp: int) -> dict[str, Path]:
    """The profiles Vidur trains on for one (device, model, TP), by the file names its datasets hold.

    ``data`` is a copy of Vidur's data folder. The attention profile is the model's own (upstream's layout)
    or else the older A100 one (legacy/) where that measured this model's attention shape at this TP: the
    MLP profile gives the shape. Raises FileNotFoundError saying what is missing.
    """
    compute = data / "profiling" / "compute" / device / model
    mlp, network = compute / "mlp.csv", data / "profiling" / "network" / node
    if not mlp.exists():
        raise FileNotFoundError(f"no MLP profile of {model} on {device}: {mlp}")
    with mlp.open(newline="") as rows:
        first = next(csv.DictReader(rows))
    shape = (int(first["n_embd"]), int(first["n_head"]), int(first["n_kv_head"]))
    attention = next((path for path in (compute / "attention.csv", data / "legacy" / "profiling" / device /
                                        "attention.csv") if _measures_attention(path, shape, tp)), None)
    if attention is None:
        raise FileNotFoundError(f"no attention profile of {model} (hidden {shape[0]}, {shape[1]} query and "
                                f"{shape[2]} KV heads) at TP {tp} on {device} under {data}")
    files = {"mlp.csv.xz": mlp, "attention.csv.xz": attention, "all_reduce.csv.xz": network / "all_reduce.csv",
             "send_recv.csv.xz": network / "send_recv.csv"}
    if missing := [str(path) for path in files.values() if not path.exists()]:
        raise FileNotFoundError(f"no {', '.join(missing)}")
    return files


def vidur_datasets(device: str, node: str, model: str) -> tuple[str, str]:
    """The names of the local compute and network datasets of a (device, model) in Vidur's cache."""
    short = model.rsplit("/", 1)[-1].lower().removesuffix("-hf")  # the Hub's suffix for converted weights
    return (f"{VIDUR_DATASET_ORG}/vidur-{device}-{short}",
            f"{VIDUR_DATASET_ORG}/vidur-{node.replace('_', '-')}")


def place_dataset(cache: Path, kind: str, name: str, files: dict[str, Path], info: dict[str, str]) -> None:
    """Writes one dataset where ``snapshot_download(name, cache_dir=<cache>/profiling_data/<kind>/)`` finds it
    offline: the Hugging Face cache's layout (``refs/main`` naming a snapshot), the files xz-compressed as
    Vidur's datasets hold them, and the ``config.json`` Vidur checks against its replica."""
    folder = cache / "profiling_data" / kind / f"datasets--{name.replace('/', '--')}"
    snapshot = folder / "snapshots" / VIDUR_REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(VIDUR_REVISION)
    (snapshot / "config.json").write_text(json.dumps(info))
    for target, source in files.items():
        with source.open("rb") as raw, lzma.open(snapshot / target, "wb") as packed:
            shutil.copyfileobj(raw, packed)


def write_vidur_trace(run_folder: Path, path: Path) -> None:
    """Writes a cosim run's requests as the CSV Vidur's ``trace_replay`` reads: arrival (s), prompt and output.

    Vidur would silently shorten a prompt whose request exceeds ``VIDUR_MAX_TOKENS``; such a request is
    refused here instead, so both simulators get the same tokens.
    """
    with (run_folder / "requests.csv").open(newline="") as rows, path.open("w") as trace:
        trace.write("Date,Time,PromptTokenCount,CompletionTokenCount\n")
        for row in csv.DictReader(rows):
            prompt, output = int(row["input_tokens"]), int(row["output_tokens"])
            if prompt + output > VIDUR_MAX_TOKENS:
                raise ValueError(f"{run_folder}: request {row['id']} has {prompt} + {output} tokens; Vidur's trace "
                                 f"replay fits a request in {VIDUR_MAX_TOKENS} by shortening its prompt")
            # cosim's arrival_s, exact to the nanosecond, as written: Vidur's times are seconds too.
            trace.write(f"{VIDUR_TRACE_DATE},{row['arrival_s']},{prompt},{output}\n")


def vidur_args(run_folder: Path, trace: Path, cache: Path, output: Path) -> list[str]:
    """Vidur's command line for the deployment cosim ran: one tensor-parallel replica, Sarathi's chunked
    prefill with cosim's token budget and sequence cap, no prefix caching, the trace replayed as it is."""
    ran = yaml.safe_load((run_folder / "config.yaml").read_text())
    (client,) = ran["clients"]
    scheduler, hardware = client["scheduler"], client["hardware"]
    budget = scheduler["max_num_batched_tokens"]
    if scheduler["batching"] != "chunked" or scheduler.get("chunk_size") not in (None, budget) \
            or scheduler["enable_prefix_caching"] or hardware.get("pipeline_parallel", 1) != 1 \
            or hardware["count"] != hardware["tensor_parallel"]:
        raise ValueError(f"{run_folder}: Vidur is run as one tensor-parallel replica (count = tensor_parallel, "
                         "no pipeline) with Sarathi's chunked prefill (batching: chunked, one token budget) and "
                         f"no prefix caching; the client has {hardware} and {scheduler}")
    model = VIDUR_MODELS[ran["models"][client["model"]]["preset"]]
    device, node = VIDUR_DEVICES[ran["hardware"][hardware["device"]]["preset"]]
    compute, network = vidur_datasets(device, node, model)
    option = {
        "--seed": ran["seed"], "--cluster_config_num_replicas": 1,
        "--replica_config_model_name": model, "--replica_config_device": device,
        "--replica_config_network_device": node, "--replica_config_tensor_parallel_size": hardware["tensor_parallel"],
        "--replica_config_num_pipeline_stages": 1,
        # Vidur's KV cache is what its memory margin leaves of the device after the weights (it reads no
        # gpu_memory_utilization), in whole 4,096-token request slots.
        "--cache_config_memory_margin_fraction": round(1.0 - scheduler["gpu_memory_utilization"], 9),
        "--cache_config_block_size": scheduler["block_size"],
        "--replica_scheduler_config_type": "sarathi", "--sarathi_scheduler_config_chunk_size": budget,
        "--sarathi_scheduler_config_batch_size_cap": scheduler["max_num_seqs"],
        "--request_generator_config_type": "trace_replay", "--trace_request_generator_config_trace_file": trace,
        "--trace_request_generator_config_date": VIDUR_TRACE_DATE,
        "--trace_request_generator_config_max_tokens": VIDUR_MAX_TOKENS,
        # Its defaults scale a trace (prompts by 0.3, time by 0.04); this one is replayed as cosim ran it.
        "--trace_request_generator_config_prefill_scale_factor": 1,
        "--trace_request_generator_config_decode_scale_factor": 1,
        "--trace_request_generator_config_time_scale_factor": 1,
        f"{VIDUR_PREDICTOR}model_profiling_dataset": compute, f"{VIDUR_PREDICTOR}network_profiling_dataset": network,
        f"{VIDUR_PREDICTOR}cache_dir": cache, f"{VIDUR_PREDICTOR}prediction_max_tokens_per_request": VIDUR_MAX_TOKENS,
        "--metrics_config_output_dir": output,
    }
    # No prefix caching, as cosim's run; no plots, as cosim's scenario writes none.
    return [item for key, value in option.items() for item in (key, str(value))] + [
        "--no-cache_config_enable_prefix_caching", "--no-metrics_config_store_plots"]


def vidur_outcome(output: Path, requests: int, cpu_s: float, wall_s: float) -> Outcome:
    """A Vidur run's figures from its request_metrics.csv (in the timestamped folder it makes in ``output``).

    TTFT is Vidur's ``prefill_e2e_time`` (arrival to the first token, which the prefill gives); TPOT is taken
    as cosim's is, the time after the first token over the tokens after it, (e2e - TTFT) / (output - 1).
    """
    (folder,) = [path for path in output.iterdir() if path.is_dir()]
    with (folder / "request_metrics.csv").open(newline="") as rows:
        done = [row for row in csv.DictReader(rows) if row["request_e2e_time"]]
    ttft = [float(row["prefill_e2e_time"]) for row in done]
    tpot = [(float(row["request_e2e_time"]) - float(row["prefill_e2e_time"]))
            / (int(float(row["request_num_decode_tokens"])) - 1)
            for row in done if int(float(row["request_num_decode_tokens"])) > 1]
    return Outcome("Vidur", requests, cpu_s, wall_s, len(done),
                   sum(int(float(row["request_num_decode_tokens"])) for row in done),
                   sum(ttft) / len(ttft) * 1e3, sum(tpot) / len(tpot) * 1e3, None)


class Peer(Protocol):
    """A simulator cosim is timed against, on the workload matched to it."""

    name: ClassVar[str]
    config: Path

    def missing(self) -> str | None:
        """Why the peer cannot run here (its environment or data is missing), or None."""

    def run(self, cosim_folder: Path, requests: int, folder: Path) -> Outcome:
        """The peer on the requests of a cosim run, timed; ``folder`` holds its inputs and outputs."""

    def versions(self) -> list[str]:
        """What ran: the peer's version, and what cosim ran beside it worth naming."""


def _installed(venv: Path, distribution: str) -> str:
    """A distribution's version in a virtual environment."""
    done = subprocess.run([str(venv / "bin" / "python"), "-c",
                           f"import importlib.metadata as m; print(m.version({distribution!r}))"],
                          capture_output=True, text=True)
    return done.stdout.strip()


@dataclass
class AISimulate:
    """NVIDIA's AISimulate (``aisimulate predict``) replaying cosim's requests as a Mooncake trace."""

    venv: Path
    config: Path = AISIMULATE_CONFIG
    name: ClassVar[str] = "AISimulate"

    def missing(self) -> str | None:
        program = self.venv / "bin" / "aisimulate"
        return None if program.exists() else \
            f"no {program} (make the environment as docs/performance.md says, or name it with --aisimulate)"

    def run(self, cosim_folder: Path, requests: int, folder: Path) -> Outcome:
        return run_aisimulate(self.venv, cosim_folder, requests, folder)

    def versions(self) -> list[str]:
        return [f"aiconfigurator-core {metadata.version('aiconfigurator-core')} (cosim's aiconfigurator backend)",
                f"AISimulate {_installed(self.venv, 'aisimulate')} ({self.venv})"]


@dataclass
class Vidur:
    """Microsoft's Vidur (``python -m vidur.main``) replaying cosim's requests as a trace, offline.

    Its profiles are laid out once per bench in ``<venv>/cosim-cache``, where Vidur also keeps the
    predictors it trains on first use (37 minutes on the 2-core development machine); its first run is
    repeated, untimed, first.
    """

    venv: Path
    data: Path
    config: Path = VIDUR_CONFIG
    name: ClassVar[str] = "Vidur"
    _ready: bool = field(default=False, init=False)  # the profiles placed and the predictors trained

    @property
    def cache(self) -> Path:
        return self.venv / "cosim-cache"

    def _deployment(self) -> tuple[str, str, str, int]:
        """The (device, node, model, TP) of the workload, as Vidur names them."""
        ran = yaml.safe_load(self.config.read_text())
        (client,) = ran["clients"]
        device, node = VIDUR_DEVICES[ran["hardware"][client["hardware"]["device"]]["preset"]]
        model = VIDUR_MODELS[ran["models"][client["model"]]["preset"]]
        return device, node, model, client["hardware"]["tensor_parallel"]

    def missing(self) -> str | None:
        if not (self.venv / "bin" / "python").exists() or not _installed(self.venv, "vidur"):
            return f"no vidur in {self.venv} (make it as docs/performance.md says, or name it with --vidur)"
        try:
            vidur_profiles(self.data, *self._deployment())
        except FileNotFoundError as error:
            return f"{error} (name a copy of Vidur's data folder with --vidur-data)"
        return None

    def _prepare(self) -> None:
        device, node, model, tp = self._deployment()
        files = vidur_profiles(self.data, device, node, model, tp)
        compute, network = vidur_datasets(device, node, model)
        compute_files = {name: path for name, path in files.items() if name in VIDUR_COMPUTE_FILES}
        network_files = {name: path for name, path in files.items() if name not in VIDUR_COMPUTE_FILES}
        place_dataset(self.cache, "compute", compute, compute_files, {"model": model, "device_sku": device})
        place_dataset(self.cache, "network", network, network_files, {"sku": node})
        self._ready = True

    def run(self, cosim_folder: Path, requests: int, folder: Path) -> Outcome:
        folder.mkdir(parents=True, exist_ok=True)
        trace, output = folder / "trace.csv", folder / "out"
        cmd = [str(self.venv / "bin" / "python"), "-m", "vidur.main",
               *vidur_args(cosim_folder, trace, self.cache, output)]
        if not trace.exists():
            write_vidur_trace(cosim_folder, trace)
        if not self._ready:
            self._prepare()
            timed(cmd, env={"HF_HUB_OFFLINE": "1"})  # untimed: trains the predictors if the cache has none
        shutil.rmtree(output, ignore_errors=True)
        cpu_s, wall_s = timed(cmd, env={"HF_HUB_OFFLINE": "1"})
        return vidur_outcome(output, requests, cpu_s, wall_s)

    def versions(self) -> list[str]:
        return [f"Vidur {_installed(self.venv, 'vidur')} ({self.venv}), profiles from {self.data}"]


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
            hits = "n/a" if o.prefix_hit_rate is None else f"{o.prefix_hit_rate:.3f}"
            lines.append(f"| {name} | {size:,} | {o.completed:,} | {o.output_tokens:,} | {o.mean_ttft_ms:.2f} | "
                         f"{o.mean_tpot_ms:.3f} | {hits} |")
    return "\n".join(lines)


def machine() -> list[str]:
    """What ran for every peer: the machine and cosim (and its commit)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return [f"machine: {cpu}, {len(os.sched_getaffinity(0))} CPUs usable, Python {platform.python_version()}",
            f"cosim {metadata.version('cosim')} ({commit.stdout.strip() or 'no git'})"]


def compare(peer: Peer, sizes: list[int], rounds: int, scratch: Path, *, grpc: bool,
            skipped: bool) -> dict[tuple[str, int], Outcome]:
    """The alternating rounds of one peer's workload: cosim in-process, cosim over gRPC, the peer (unless
    ``skipped``), for each size in turn; the best of the rounds of each."""
    results: dict[tuple[str, int], list[Outcome]] = {}
    for round_ in range(rounds):
        for size in sizes:
            cosim_folder = scratch / f"cosim-{size}"
            runs: list[Callable[[], Outcome]] = [
                functools.partial(run_cosim, peer.config, size, cosim_folder, in_process=True)]
            if grpc:
                runs.append(functools.partial(run_cosim, peer.config, size, scratch / f"grpc-{size}", in_process=False))
            if not skipped:  # after cosim in-process, whose run folder gives it its requests
                runs.append(functools.partial(peer.run, cosim_folder, size, scratch / f"peer-{size}"))
            for run in runs:
                outcome = run()
                results.setdefault((outcome.name, size), []).append(outcome)
                print(f"round {round_ + 1}: {outcome.name}, {size} requests: {outcome.cpu_s:.2f} CPU s, "  # noqa: T201
                      f"{outcome.wall_s:.2f} wall s", file=sys.stderr, flush=True)
    return {key: best(outcomes) for key, outcomes in results.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", action="append", choices=("aisimulate", "vidur"),
                        help="a peer to compare with, repeatable (default: both)")
    parser.add_argument("--config", type=Path, help="the scenario, with one --peer (default: the peer's matched one)")
    parser.add_argument("--sizes", default="1000,10000", help="request counts, comma-separated (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best counts (default: 3)")
    parser.add_argument("--aisimulate", type=Path, default=AISIMULATE_VENV,
                        help="AISimulate's virtual environment (default: %(default)s)")
    parser.add_argument("--vidur", type=Path, default=VIDUR_VENV,
                        help="Vidur's virtual environment (default: %(default)s)")
    parser.add_argument("--vidur-data", type=Path, default=VIDUR_DATA,
                        help="a copy of Vidur's data folder, its profiles (default: %(default)s)")
    parser.add_argument("--no-grpc", action="store_true", help="leave out cosim over gRPC")
    args = parser.parse_args(argv)
    chosen = list(dict.fromkeys(args.peer or ["aisimulate", "vidur"]))
    if args.config is not None and len(chosen) != 1:
        parser.error("--config needs exactly one --peer: each peer has its own matched workload")
    sizes = sorted(int(size) for size in args.sizes.split(","))
    peers: list[Peer] = [AISimulate(args.aisimulate) if name == "aisimulate" else Vidur(args.vidur, args.vidur_data)
                         for name in chosen]
    for peer in peers:
        if args.config is not None:
            peer.config = args.config.resolve()
    with tempfile.TemporaryDirectory(prefix="peer-bench-") as scratch:
        for peer in peers:
            why = peer.missing()
            if why:
                print(f"{peer.name} skipped: {why}", file=sys.stderr)  # noqa: T201
            folder = Path(scratch) / peer.name.lower()
            results = compare(peer, sizes, args.rounds, folder, grpc=not args.no_grpc, skipped=why is not None)
            config = peer.config.relative_to(REPO) if peer.config.is_relative_to(REPO) else peer.config
            lines = [*machine(), *([] if why else peer.versions()),
                     f"{config}, best of {args.rounds} alternating rounds"]
            print(f"### cosim against {peer.name}\n")  # noqa: T201
            print("\n".join(f"- {line}" for line in lines) + "\n")  # noqa: T201
            print(table(results, sizes) + "\n", flush=True)  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
