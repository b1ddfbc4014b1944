"""``cosim bench``: fixed scenarios that measure how fast the hub simulates.

Each scenario (examples/bench/*.yaml) runs twice in one process: once with
its backends over gRPC on loopback (as every run does) and once with the
same backends called in-process, so ``grpc_over_inprocess`` is the price of
the process boundary. Reported per scenario: simulated requests and steps
per wall second, backend RPCs per step, timing-cache hit rate, peak RSS.
``cosim bench`` runs :data:`SCENARIOS` by default and :data:`NAMED_ONLY` when named.
"""

from __future__ import annotations

import gc
import resource
import time
from pathlib import Path
from typing import Any

from .. import native
from ..config.loading import load_config
from ..errors import ScenarioError
from .runner import backend_names, started_backends
from .simulation import Simulation

BENCH_DIR = Path(__file__).resolve().parents[2] / "examples" / "bench"
SCENARIOS = ("chat-10k", "disagg-long", "mixed")
# Run only when named: the workloads of the comparisons with NVIDIA's AISimulate and Microsoft's Vidur
# (scripts/peer_bench.py); aisimulate-matched times its steps with the optional aiconfigurator extra.
NAMED_ONLY = ("aisimulate-matched", "vidur-matched")


def _timed_run(name: str, overrides: list[str], *, in_process: bool) -> tuple[float, Simulation]:
    path = BENCH_DIR / f"{name}.yaml"
    if not path.exists():
        known = ", ".join((*SCENARIOS, *NAMED_ONLY))
        raise ScenarioError(str(path), f"benchmark scenario {name!r} not found; known: {known}")
    config, folder = load_config(path, overrides=overrides)
    gc.collect()  # what earlier runs left behind is not this run's cost
    started = time.perf_counter()
    with started_backends(config, backend_names(config), in_process=in_process) as clients:
        simulation = Simulation(config, folder, clients)
        error = simulation.run(progress=False)
    if error is not None:
        raise error
    return time.perf_counter() - started, simulation


def run_bench(name: str, *, requests: int | None = None, compare_in_process: bool = True,
              repeat: int = 1) -> dict[str, Any]:
    """Runs one benchmark scenario and returns its figures (the keys of ``cosim bench --json``).

    With ``repeat`` > 1 the gRPC and in-process runs alternate that many times and the fastest of
    each counts, so a machine whose speed drifts during the benchmark skews the ratio less.
    """
    overrides = [f"workload.requests={requests}"] if requests else []
    wall_s, sim = _timed_run(name, overrides, in_process=False)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    summary = sim.summarize(wall_s)
    steps = sum(len(c.timeline) for c in sim.clients)
    del sim  # a finished run left alive would slow the next ones' garbage collection
    inproc_walls: list[float] = []
    for i in range(repeat):
        if i:  # the same run again (a run is deterministic: only its wall time differs)
            wall_s = min(wall_s, _timed_run(name, overrides, in_process=False)[0])
        if compare_in_process:
            inproc_walls.append(_timed_run(name, overrides, in_process=True)[0])
    completed = summary["requests"]["completed"]
    figures: dict[str, Any] = {
        "scenario": name,
        "requests": completed,
        "wall_s": round(wall_s, 3),
        "requests_per_wall_s": round(completed / wall_s, 1),
        "steps_per_wall_s": round(steps / wall_s, 1),
        "rpcs_per_step": round(summary["backends"]["rpcs"] / steps, 4) if steps else 0.0,
        "cache_hit_rate": summary["backends"]["cache_hit_rate"],
        "peak_rss_mb": round(peak_rss_mb, 1),
        "grpc_over_inprocess": None,
        "steps": steps,
        "sim_time_s": summary["sim_time_s"],
        "native": bool(native.compiled()),  # the hot path compiled (make native) or pure Python
    }
    if inproc_walls:
        figures["inprocess_wall_s"] = round(min(inproc_walls), 3)
        figures["grpc_over_inprocess"] = round(wall_s / min(inproc_walls), 3)
    return figures
