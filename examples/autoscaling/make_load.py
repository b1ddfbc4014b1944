"""Writes load.csv: arrival times (seconds) of a Poisson load whose rate steps up, then down.

A synthetic arrival pattern for examples/autoscaling.yaml (the prompt and output lengths come from the
real Azure conversation trace, examples/traces/). Deterministic: the same seed gives the same file.

    python examples/autoscaling/make_load.py   # rewrites examples/autoscaling/load.csv
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# (requests per second, seconds): quiet, a burst, quiet again.
PHASES = ((2.0, 120.0), (16.0, 240.0), (2.0, 240.0))
SEED = 19


def arrivals(phases: tuple[tuple[float, float], ...], seed: int) -> list[float]:
    """Arrival times of a Poisson process whose rate is constant within each phase."""
    rng = np.random.default_rng(seed)
    times, start = [], 0.0
    for rate, duration in phases:
        t = start
        while (t := t + rng.exponential(1 / rate)) < start + duration:
            times.append(t)
        start += duration
    return times


if __name__ == "__main__":
    out = Path(__file__).with_name("load.csv")
    out.write_text("arrival_s\n" + "".join(f"{t:.6f}\n" for t in arrivals(PHASES, SEED)))
