"""``cosim bench scale-1m``: a million requests, and how speed and memory hold up as they pass.

:func:`run_scale` runs a scale scenario (examples/bench/scale-*.yaml) once, with its backends
in-process, and takes a reading at each mark (100k, 500k and 1M finished requests for
``scale-1m``; marks scale with ``requests`` when it is overridden): requests and steps per wall
second so far, resident memory now (RSS) and its peak so far. Memory bounded by the requests in
flight shows as RSS at the last mark within a few percent of RSS at the first. Each reading also
gives the process's CPU seconds per request since the previous mark (``prefix-100k``: the cost of a
request must not grow with the requests run before it; :func:`cpu_growth` compares the last mark's
with the second's, past the first's warm-up).
"""

from __future__ import annotations

import gc
import os
import resource
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..config.loading import load_config
from .bench import BENCH_DIR
from .runner import backend_names, started_backends
from .simulation import Simulation

# Scale scenarios and the finished-request counts at which they are read.
SCALE_SCENARIOS: dict[str, tuple[int, ...]] = {"scale-1m": (100_000, 500_000, 1_000_000),
                                               "prefix-100k": (1_000, 10_000, 100_000)}


def rss_mb() -> float:
    """This process's resident memory now, in MB (Linux; else its peak so far)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_growth(readings: Sequence[dict[str, Any]]) -> float | None:
    """The last mark's CPU seconds per request over the second's (the first holds the warm-up:
    start-up and an empty cache); None with fewer than three marks."""
    if len(readings) < 3 or not readings[1]["cpu_s_per_request"]:
        return None
    return round(float(readings[-1]["cpu_s_per_request"]) / float(readings[1]["cpu_s_per_request"]), 3)


def scaled_marks(marks: Sequence[int], total: int) -> list[int]:
    """The marks of a scenario of ``marks[-1]`` requests, for a run of ``total`` requests."""
    return sorted({max(1, round(mark * total / marks[-1])) for mark in marks})


def run_scale(name: str, *, requests: int | None = None, marks: Sequence[int] | None = None,
              on_mark: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Runs a scale scenario and returns its figures (``cosim bench --json``).

    Args:
        name: a key of :data:`SCALE_SCENARIOS`.
        requests: run this many requests instead (the marks scale with it).
        marks: read at these finished-request counts instead.
        on_mark: called with each reading as it is taken.

    Returns:
        ``scenario``, ``requests``, ``wall_s``, ``requests_per_wall_s``, ``steps_per_wall_s``,
        ``peak_rss_mb``, ``cpu_growth`` (:func:`cpu_growth`) and ``marks`` (one reading per mark:
        ``requests``, ``wall_s``, ``requests_per_wall_s``, ``steps_per_wall_s``, ``rss_mb``,
        ``peak_rss_mb``, ``cpu_s`` and ``cpu_s_per_request``, the CPU seconds per request since the
        previous mark).
    """
    overrides = [f"workload.requests={requests}"] if requests else []
    config, folder = load_config(BENCH_DIR / f"{name}.yaml", overrides=overrides)
    total = int(config.workload.requests or 0)
    pending = list(marks) if marks is not None else scaled_marks(SCALE_SCENARIOS[name], total)
    readings: list[dict[str, Any]] = []
    gc.collect()
    started, cpu_started = time.perf_counter(), time.process_time()
    last = [0, cpu_started]  # requests and CPU seconds at the previous mark
    with started_backends(config, backend_names(config), in_process=True) as clients:
        simulation = Simulation(config, folder, clients)

        def steps() -> int:
            return sum(len(c.timeline) for c in simulation.clients)

        def read(done: int, _total: int, _now_ns: int) -> None:
            if not pending or done < pending[0]:
                return
            while pending and done >= pending[0]:
                pending.pop(0)
            wall_s, cpu = time.perf_counter() - started, time.process_time()
            reading = {"requests": done, "wall_s": round(wall_s, 3),
                       "requests_per_wall_s": round(done / wall_s, 1),
                       "steps_per_wall_s": round(steps() / wall_s, 1),
                       "rss_mb": round(rss_mb(), 1), "peak_rss_mb": round(peak_rss_mb(), 1),
                       "cpu_s": round(cpu - cpu_started, 3),
                       "cpu_s_per_request": round((cpu - last[1]) / max(1, done - last[0]), 6)}
            last[:] = [done, cpu]
            readings.append(reading)
            if on_mark is not None:
                on_mark(reading)

        error = simulation.run(progress=False, on_progress=read)
        if error is not None:
            raise error
        wall_s = time.perf_counter() - started
        summary = simulation.summarize(wall_s)
        num_steps = steps()
    completed = summary["requests"]["completed"]
    return {"scenario": name, "requests": completed, "wall_s": round(wall_s, 3),
            "requests_per_wall_s": round(completed / wall_s, 1), "steps_per_wall_s": round(num_steps / wall_s, 1),
            "steps": num_steps, "sim_time_s": summary["sim_time_s"], "peak_rss_mb": round(peak_rss_mb(), 1),
            "cpu_growth": cpu_growth(readings), "marks": readings}
