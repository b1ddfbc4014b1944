"""Workload generation: synthetic and trace-driven request streams.

Configure with :class:`WorkloadConfig` (or :func:`parse_workload` for a
plain mapping with scenario-style errors) and draw requests with
:func:`generate_requests`::

    config = parse_workload({"requests": 1000,
                             "arrival": {"process": "poisson", "rate_per_s": 5},
                             "input_tokens": {"dist": "lognormal", "mean": 1024, "sigma": 0.5},
                             "output_tokens": {"dist": "fixed", "value": 128}})
    requests = generate_requests(config, np.random.default_rng(7), base_dir=Path("."))

Small real traces ship in ``examples/traces/`` (Azure LLM inference 2023).
"""

from cosim.hub.config.workload import (
    ArrivalProcess,
    ConstantArrival,
    FixedLength,
    GammaArrival,
    LengthDist,
    LognormalLength,
    NormalLength,
    PoissonArrival,
    PrefixConfig,
    TraceArrival,
    TraceLength,
    TraceSource,
    UniformArrival,
    UniformLength,
    WorkloadConfig,
    parse_workload,
)
from cosim.hub.sim.workload.generator import RequestSpec, RequestSpecs, generate_requests
from cosim.hub.sim.workload.traces import TraceTable, load_trace

__all__ = [
    "ArrivalProcess", "ConstantArrival", "FixedLength", "GammaArrival", "LengthDist", "LognormalLength",
    "NormalLength", "PoissonArrival", "PrefixConfig", "RequestSpec", "RequestSpecs", "TraceArrival", "TraceLength",
    "TraceSource", "TraceTable", "UniformArrival", "UniformLength", "WorkloadConfig", "generate_requests",
    "load_trace", "parse_workload",
]
