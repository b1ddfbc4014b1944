"""Scenario plumbing shared by the goodput and deployment searches.

Main names: :func:`as_mapping` (any config form -> plain mapping and base
folder), :func:`with_rate` (the same scenario at another request rate),
:func:`single_request` (the scenario reduced to one mean-sized request),
:func:`replicate` (one seeded run -> the SLO statistics it observed).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...config.loading import load_config, parse_config
from ...config.scenario import ScenarioConfig
from ...config.vllm_bench import expand_vllm_bench
from ...errors import CosimError, HubError, ScenarioError
from ...sim.workload import generate_requests
from ...timing.cache import SharedTimings
from ..runner import backend_names, run, started_backends
from ..simulation import Simulation
from .early_stop import SloWatch, StopRun

log = logging.getLogger(__name__)

ConfigLike = ScenarioConfig | Mapping[str, Any] | str | Path
_RATED = ("poisson", "gamma", "uniform")


def as_mapping(config: ConfigLike, *, overrides: tuple[str, ...] | list[str] = (),
               base_dir: str | Path | None = None) -> tuple[dict[str, Any], Path]:
    """A validated scenario as a plain (JSON-ready) mapping, and the folder its relative paths resolve against.

    The output folder is cleared: searches run many scenarios and keep only their statistics.
    """
    if isinstance(config, (str, Path)):
        scenario, folder = load_config(config, overrides=overrides)
    elif isinstance(config, ScenarioConfig):
        scenario = parse_config(config.model_dump(mode="json"), overrides=overrides) if overrides else config
        folder = Path.cwd()
    else:
        scenario, folder = parse_config(config, overrides=overrides), Path.cwd()
    data = scenario.model_dump(mode="json")
    data["output"] = {"dir": None, "plots": False}
    return data, Path(base_dir).resolve() if base_dir is not None else folder


def base_rate(data: Mapping[str, Any], base_dir: Path) -> float:
    """Mean arrival rate of a trace-driven workload at speedup 1 (requests per second)."""
    scenario = parse_config({**data, "workload": {**data["workload"],
                                                  "arrival": {**data["workload"]["arrival"], "speedup": 1.0}}})
    specs = generate_requests(scenario.workload, np.random.default_rng(scenario.seed), base_dir=base_dir)
    arrivals = specs.ints["arrival_ns"]
    span_s = int(arrivals[-1] - arrivals[0]) / 1e9
    if len(specs) < 2 or span_s <= 0:
        raise ScenarioError("workload.arrival", "the trace's arrivals span no time; goodput needs a rate to vary")
    return (len(specs) - 1) / span_s


def with_rate(data: Mapping[str, Any], rate_per_s: float, *, trace_rate: float | None = None) -> dict[str, Any]:
    """The scenario with its arrival process at ``rate_per_s`` (a trace replayed faster or slower).

    Raises:
        ScenarioError: the arrival process has no rate (``constant``).
    """
    data = {**data, "workload": expand_vllm_bench(dict(data["workload"]))}  # vllm bench serve's rate, as ours
    if "arrival" not in data["workload"]:  # an inference-perf profile: its stages fix their own rates
        raise ScenarioError("workload", "goodput varies workload.arrival's rate; this workload has none (an "
                                        "inference-perf profile's stages fix their rates): vary them with cosim sweep")
    arrival = dict(data["workload"]["arrival"])
    if arrival["process"] in _RATED:
        arrival["rate_per_s"] = rate_per_s
    elif arrival["process"] == "trace" and trace_rate:
        arrival["speedup"] = rate_per_s / trace_rate
    else:
        raise ScenarioError("workload.arrival.process", f"goodput varies the request rate, which "
                                                        f"{arrival['process']!r} arrivals do not have; use poisson, "
                                                        f"gamma, uniform or trace")
    return {**data, "workload": {**data["workload"], "arrival": arrival}}


def single_request(data: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
    """The scenario with one request of the workload's mean input and output length, alone."""
    scenario = parse_config(data)
    specs = generate_requests(scenario.workload, np.random.default_rng(scenario.seed), base_dir=base_dir)
    mean_in = max(1, round(float(np.mean(specs.ints["input_tokens"]))))
    mean_out = max(1, round(float(np.mean(specs.ints["output_tokens"]))))
    workload: dict[str, Any] = {"requests": 1, "arrival": {"process": "constant"},
                                "input_tokens": {"dist": "fixed", "value": mean_in},
                                "output_tokens": {"dist": "fixed", "value": mean_out}}
    if data["workload"].get("models"):
        workload["models"] = data["workload"]["models"]
    return {**copy.deepcopy(dict(data)), "workload": workload}


def single_request_s(data: Mapping[str, Any], base_dir: Path) -> float:
    """T_min of BestServe: end-to-end seconds of one mean-sized request served alone."""
    result = run(single_request(data, base_dir), base_dir=base_dir)
    value = result.summary["latency"]["e2e_s"]["mean"]
    if not value or value <= 0:
        raise ScenarioError("workload", "a single request took no simulated time; cannot bound the request rate")
    return float(value)


# The key of a replication's output tokens per joule (summary.json energy.tokens_per_j).
TOKENS_PER_J = "energy.tokens_per_j"


def replicate(data: Mapping[str, Any], base_dir: str, seed: int, stop_on: tuple[str, ...] = ()) -> dict[str, float]:
    """Runs the scenario with ``seed``; returns each SLO statistic it observed (see :class:`Replicator`)."""
    return Replicator(data, base_dir)(seed, stop_on)


# The step timings of this process's replications: the runs of one deployment (its seeds and rates)
# open equal sessions, and at low rates time mostly the same batches (common random numbers).
SHARED_TIMINGS = SharedTimings()


class Replicator:
    """Seeded runs of one scenario, reduced to the SLO statistics a goodput search judges.

    What many runs of one scenario can share is built once: the config is parsed once (each seed is
    a copy with its seed replaced), and the runtime backends a config names by ``kind`` or ``python``
    are called in this process, without a gRPC server per run (the same servicer code answers, so
    every timing is the one a run over gRPC gets; :func:`cosim.hub.studies.runner.started_backends`). Other
    backends (``command``, ``image``, ``address``) are started or attached per run, as ``cosim run``
    does. Step timings are shared with the process's earlier runs of equal sessions
    (:data:`SHARED_TIMINGS`). No run folder is written.

    Args:
        data: the scenario mapping (validated already, e.g. by :func:`as_mapping`).
        base_dir: the folder its relative paths resolve against.
    """

    def __init__(self, data: Mapping[str, Any], base_dir: str | Path) -> None:
        self.data, self.base_dir = data, Path(base_dir)
        self.config = parse_config(data)
        self.names = backend_names(self.config)

    def __call__(self, seed: int, stop_on: tuple[str, ...] = ()) -> dict[str, float]:
        """The run with ``seed``: each SLO statistic it observed, keyed ``metric.statistic``, and its
        output tokens per joule under :data:`TOKENS_PER_J` (NaN when the run has no energy total).

        A statistic with no completed request behind it is inf (the SLO is not
        met); one the workload cannot have (TPOT of one-token answers) is 0. A run
        whose requests never finish counts as inf for every statistic.

        ``stop_on`` (``"fail"``, ``"pass"``): stop the run once its SLO verdict is decided that way
        (:mod:`.early_stop`); each statistic is then the bound that decided it (the lowest value the full
        run could have on a fail, the highest on a pass), so the verdict is the full run's, and there
        is no energy figure (NaN).
        """
        data = self.data
        config = self.config.model_copy(update={"seed": seed})
        watch = SloWatch(data["slo"], int(data["workload"]["requests"]), stop_on) if stop_on else None
        with started_backends(config, self.names, in_process=True) as backends:
            simulation = Simulation(config, self.base_dir, backends, shared_timings=SHARED_TIMINGS)
            error = simulation.run(progress=False, on_request=watch.add if watch else None)
            summary = simulation.judged() if error is None else {}
            simulation.close()
        if isinstance(error, StopRun):
            assert watch is not None
            log.debug("seed %d: %s", seed, error)
            return {f"{m}.{s}": watch.bounds(m, s)[0 if not error.passed else 1] for m, s, _ in watch.targets} | {
                TOKENS_PER_J: math.nan}
        if isinstance(error, HubError):
            log.info("seed %d: run did not finish (%s); counting the SLO as violated", seed, error)
            return {f"{m}.{s}": math.inf for m, stats in data["slo"].items() for s in stats} | {TOKENS_PER_J: math.nan}
        if isinstance(error, CosimError):
            raise error
        completed = summary["requests"]["completed"]
        values: dict[str, float] = {TOKENS_PER_J: float(summary.get("energy", {}).get("tokens_per_j") or math.nan)}
        for metric, stats in summary["slo"].items():
            for stat, entry in stats.items():
                observed = entry["observed"]
                values[f"{metric}.{stat}"] = math.inf if not completed else float(observed or 0.0)
        return values
