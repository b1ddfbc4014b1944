"""The set-up keys of ``vllm bench serve``'s result JSON, as a cosim run can truthfully fill them.

``vllm bench serve --save-result`` (vLLM's ``benchmarks/serve.py``, ``main_async``) opens its JSON
with what it was asked to do: ``date``, ``endpoint_type``, ``backend``, ``label``, ``model_id``,
``tokenizer_id``, ``num_prompts``, ``request_rate``, ``burstiness``, ``max_concurrency``.
:class:`BenchmarkSetup` holds them for a run, with the ``--metric-percentiles`` and
``--percentile-metrics`` its statistics follow and whether it writes ``--save-detailed``'s
per-request arrays (``output.benchmark_details``); :func:`benchmark_setup` reads them off a scenario:

- ``model_id``/``tokenizer_id``: the model preset of the first LLM client (vLLM's tokenizer defaults
  to the model); the scenario's model key where the model comes from a config.json.
- ``request_rate``/``burstiness``: the workload's arrivals as vLLM's options (``workload.vllm_bench``
  writes them so): ``constant`` is ``"inf"``, ``poisson`` its rate and 1, ``gamma`` its rate and
  ``1 / cv**2``; other processes (uniform, a trace, inference-perf's stages) have no such options: null.
- ``date``: null, not the time of the run, so that a scenario and seed give byte-identical files.
- ``endpoint_type``/``backend``: ``"cosim"``: no HTTP endpoint was called. ``label``: null (vLLM's default).
- ``max_concurrency``: null: cosim sends requests open-loop, as vLLM without ``--max-concurrency``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.bench_report import percentile_metrics, percentiles
from ..config.scenario import ScenarioConfig


@dataclass(frozen=True)
class BenchmarkSetup:
    """What a run's ``benchmark`` block says of its set-up (see the module docstring)."""

    model_id: str | None = None
    request_rate: float | str | None = "inf"
    burstiness: float | None = 1.0
    max_concurrency: int | None = None
    percentiles: tuple[float, ...] = (99.0,)
    metrics: tuple[str, ...] = ("ttft", "tpot", "itl")
    details: bool = False  # --save-detailed: the per-request arrays too

    def keys(self, num_prompts: int) -> dict[str, Any]:
        """The set-up keys, in vLLM's order, for a run of ``num_prompts`` requests."""
        return {"date": None, "endpoint_type": "cosim", "backend": "cosim", "label": None,
                "model_id": self.model_id, "tokenizer_id": self.model_id, "num_prompts": num_prompts,
                "request_rate": self.request_rate, "burstiness": self.burstiness,
                "max_concurrency": self.max_concurrency}


def _model_id(config: ScenarioConfig) -> str | None:
    for client in config.clients:
        if client.kind == "llm" and client.model is not None:
            preset = config.models[client.model].preset
            return preset if preset is not None else client.model
    return None


def benchmark_setup(config: ScenarioConfig) -> BenchmarkSetup:
    """The :class:`BenchmarkSetup` of a scenario (see the module docstring)."""
    arrival = config.workload.arrival
    rate: float | str | None = None
    burstiness: float | None = None
    if arrival is not None and arrival.process == "constant":
        rate, burstiness = "inf", 1.0
    elif arrival is not None and arrival.process == "poisson":
        rate, burstiness = arrival.rate_per_s, 1.0
    elif arrival is not None and arrival.process == "gamma":
        rate, burstiness = arrival.rate_per_s, 1.0 / arrival.cv ** 2
    return BenchmarkSetup(model_id=_model_id(config), request_rate=rate, burstiness=burstiness,
                          percentiles=percentiles(config.output.metric_percentiles),
                          metrics=percentile_metrics(config.output.percentile_metrics),
                          details=config.output.benchmark_details)
