"""Pydantic models for the ``workload:`` section of a scenario.

:class:`WorkloadConfig` holds the request count, an optional shared
:class:`TraceSource`, an arrival process (:data:`ArrivalProcess`), input and
output length distributions (:data:`LengthDist`), optional shared prefixes
(:class:`PrefixConfig`) and an optional model mix. :func:`parse_workload`
validates a plain mapping and turns every problem into one
:class:`~cosim.hub.errors.ScenarioError` naming ``workload.<path>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from cosim.hub.errors import ScenarioError

from .bounds import MAX_RATE_PER_S, MAX_REQUESTS, MAX_TIME_S, MAX_TOKENS, MAX_WEIGHT
from .frozen import FrozenModel
from .inference_perf import InferencePerfConfig
from .lengths import (
    FORMAT_DEFAULTS,
    MOONCAKE_BLOCK_TOKENS,
    FixedLength,
    LengthDist,
    LognormalLength,
    NormalLength,
    TimeUnit,
    TraceFormat,
    TraceLength,
    TraceSource,
    UniformLength,
)
from .sessions import (
    ExponentialTime,
    FixedTime,
    LognormalTime,
    SessionsConfig,
    SessionTraceSource,
    TimeDist,
    UniformTime,
)
from .vllm_bench import VllmBenchConfig, expand_vllm_bench

# Re-exported: the models split into .lengths and .sessions keep their old import path.
__all__ = ["FORMAT_DEFAULTS", "MOONCAKE_BLOCK_TOKENS", "FixedLength", "LengthDist", "LognormalLength",
           "NormalLength", "TimeUnit", "TraceFormat", "TraceLength", "TraceSource", "UniformLength",
           "ExponentialTime", "FixedTime", "LognormalTime", "SessionsConfig", "SessionTraceSource", "TimeDist",
           "UniformTime", "ArrivalProcess", "InferencePerfConfig", "PrefixConfig", "VllmBenchConfig",
           "WorkloadConfig", "parse_workload"]


# --- arrivals --------------------------------------------------------------


class PoissonArrival(FrozenModel):
    """Exponential inter-arrival times with mean ``1 / rate_per_s``; the
    first request arrives one gap after ``start_s``."""

    process: Literal["poisson"] = Field(description="Arrival process kind.")
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S,
                              description="Mean arrival rate, requests per second.")
    start_s: float = Field(default=0.0, ge=0, le=MAX_TIME_S, description="Time the process starts, seconds.")


class GammaArrival(FrozenModel):
    """Gamma inter-arrival times with mean ``1 / rate_per_s`` and coefficient
    of variation ``cv`` (shape ``1/cv**2``): cv > 1 is burstier than Poisson,
    cv = 1 is Poisson, cv < 1 is more regular."""

    process: Literal["gamma"] = Field(description="Arrival process kind.")
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S,
                              description="Mean arrival rate, requests per second.")
    cv: float = Field(ge=1e-3, le=1e3, description="Coefficient of variation of inter-arrival times (burstiness).")
    start_s: float = Field(default=0.0, ge=0, le=MAX_TIME_S, description="Time the process starts, seconds.")


class UniformArrival(FrozenModel):
    """Evenly spaced arrivals: request i at ``start_s + (i + jitter * u_i) / rate_per_s``
    with ``u_i`` uniform in [0, 1); jitter 0 is a metronome, and any jitter
    <= 1 keeps the order and the mean rate."""

    process: Literal["uniform"] = Field(description="Arrival process kind.")
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S,
                              description="Arrival rate, requests per second.")
    jitter: float = Field(default=0.0, ge=0, le=1, description="Random offset within each slot, fraction of 1/rate.")
    start_s: float = Field(default=0.0, ge=0, le=MAX_TIME_S, description="Time of the first slot, seconds.")


class ConstantArrival(FrozenModel):
    """Every request arrives at once, at ``at_s`` (a closed batch)."""

    process: Literal["constant"] = Field(description="Arrival process kind.")
    at_s: float = Field(default=0.0, ge=0, le=MAX_TIME_S, description="Arrival time of all requests, seconds.")


class TraceArrival(FrozenModel):
    """Arrival times from a trace, shifted so the first selected row arrives
    at 0 and divided by ``speedup`` (2 replays twice as fast; Vidur's
    time_scale_factor is 1/speedup). The source must sample sequentially."""

    process: Literal["trace"] = Field(description="Arrival process kind.")
    trace: TraceSource | None = Field(default=None, description="Trace to read; default workload.trace.")
    speedup: float = Field(default=1.0, ge=1e-6, le=1e9, description="Replay speed factor (> 1 compresses time).")


ArrivalProcess = Annotated[
    PoissonArrival | GammaArrival | UniformArrival | ConstantArrival | TraceArrival,
    Field(discriminator="process")]


# --- the section -----------------------------------------------------------

_PARTS = ("arrival", "input_tokens", "output_tokens")  # the fields that may read a trace


class PrefixConfig(FrozenModel):
    """Shared prompt prefixes (system prompts, documents) for prefix caching.

    A fraction ``share`` of requests carries one of ``num_prefixes`` prefixes
    of ``tokens`` tokens each. The prefix comes on top of the sampled input
    length (which then describes the request's own suffix), so
    ``input_tokens = prefix_tokens + sampled``.
    """

    num_prefixes: int = Field(ge=1, le=1_000_000, description="Distinct prefixes.")
    tokens: int = Field(ge=1, le=MAX_TOKENS, description="Length of each prefix (tokens).")
    share: float = Field(default=1.0, ge=0, le=1, description="Fraction of requests that carry a prefix.")
    popularity: Literal["uniform", "zipf"] = Field(
        default="uniform",
        description="How requests pick a prefix: uniformly, or Zipf (prefix k with weight 1/k**zipf_s).")
    zipf_s: float = Field(default=1.0, gt=0, le=100, description="Zipf exponent when popularity is zipf.")


# vLLM's default --max-lora-rank: the rank of adapters no rank is given for.
DEFAULT_LORA_RANK = 16


class LoraAdapterConfig(FrozenModel):
    """One named LoRA adapter."""

    name: str = Field(min_length=1, max_length=256, description="Adapter name (vLLM's lora_name).")
    rank: int = Field(default=DEFAULT_LORA_RANK, ge=1, le=4096, description="Its rank r.")


class LoraWorkloadConfig(FrozenModel):
    """Requests naming LoRA adapters (multi-tenant LoRA serving).

    A fraction ``share`` of requests names an adapter; the rest run the base
    model. ``adapters`` is a count (``lora-0`` .. ``lora-{N-1}``, each of
    ``rank``) or a list of named adapters with ranks. Requests pick one
    uniformly, or by Zipf popularity: the k-th adapter (1-based, in list order)
    with weight ``1 / k**zipf_s``, as S-LoRA's and Punica's workloads draw
    adapters by a power law. A trace's ``lora_column`` names the adapters instead
    (unlisted names get ``rank``).
    """

    adapters: int | list[LoraAdapterConfig] = Field(
        description="How many adapters (named lora-0, lora-1, ...), or the adapters by name and rank.")
    rank: int = Field(default=DEFAULT_LORA_RANK, ge=1, le=4096,
                      description="Rank of the counted (or unlisted trace) adapters.")
    distribution: Literal["uniform", "zipf"] = Field(default="uniform",
                                                     description="How a request picks its adapter.")
    zipf_s: float = Field(default=1.0, gt=0, le=100, description="Zipf exponent (distribution: zipf).")
    share: float = Field(default=1.0, ge=0, le=1, description="Fraction of requests that name an adapter.")

    @model_validator(mode="after")
    def _check_adapters(self) -> LoraWorkloadConfig:
        if isinstance(self.adapters, int) and not 1 <= self.adapters <= 1_000_000:
            raise ValueError(f"adapters must be a count in [1, 1000000] or a list, got {self.adapters}")
        if isinstance(self.adapters, list):
            names = [a.name for a in self.adapters]
            if not names or len(set(names)) != len(names):
                raise ValueError(f"adapters needs at least one adapter and unique names, got {names}")
        return self

    def ranks(self) -> dict[str, int]:
        """Every adapter by name, with its rank, in popularity order."""
        if isinstance(self.adapters, int):
            return {f"lora-{k}": self.rank for k in range(self.adapters)}
        return {a.name: a.rank for a in self.adapters}


class RequestClassConfig(FrozenModel):
    """A class of requests: its share of the workload, its priority and its deadline (docs/priorities.md)."""

    share: float = Field(gt=0, le=1e6, allow_inf_nan=False,
                         description="relative weight: the class's share of the requests")
    priority: int = Field(0, ge=-(2**31), le=2**31 - 1,
                          description="vLLM's request priority: lower is served first under scheduler.packing: "
                                      "priority")
    deadline_s: float | None = Field(None, gt=0, le=1e6, allow_inf_nan=False,
                                     description="time to first token it should meet, from its arrival: its "
                                                 "deadline under scheduler.packing: edf")


class WorkloadConfig(FrozenModel):
    """What requests arrive, when, and how long they are."""

    requests: int | None = Field(
        default=None, ge=1, le=MAX_REQUESTS,
        description="Requests to generate; default all rows a sequential trace source has from start_row.")
    trace: TraceSource | None = Field(default=None, description="Trace shared by 'trace' lengths and arrivals.")
    arrival: ArrivalProcess | None = Field(
        default=None, description="Arrival process (required unless inference_perf gives the load).")
    input_tokens: LengthDist | None = Field(
        default=None, description="Prompt length distribution (required unless inference_perf gives the data).")
    output_tokens: LengthDist | None = Field(
        default=None, description="Output length distribution (required unless inference_perf gives the data).")
    prefix: PrefixConfig | None = Field(default=None, description="Shared prefixes for prefix caching; none if unset.")
    templates: dict[str, float] | None = Field(
        default=None, description="Pipeline mix: template name -> relative weight (> 0); unset = prefill+decode.")
    models: dict[str, float] | None = Field(
        default=None, description="Model mix: model name -> relative weight (> 0); unset = the single model.")
    lora: LoraWorkloadConfig | None = Field(
        default=None, description="LoRA adapters the requests name (docs/lora.md); none if unset.")
    classes: dict[str, RequestClassConfig] | None = Field(
        default=None, description="Request classes by name, drawn by share: priorities and deadlines "
                                  "(docs/priorities.md); none if unset.")
    sessions: SessionsConfig | None = Field(
        default=None, description="Multi-turn sessions (docs/sessions.md); none if unset: independent requests.")
    inference_perf: InferencePerfConfig | None = Field(
        default=None, description="An inference-perf profile's data and load sections (docs/inference-perf.md), in "
                                  "place of requests, arrival and lengths.")
    vllm_bench: VllmBenchConfig | None = Field(
        default=None, description="vllm bench serve's dataset and load options (docs/inference-perf.md), written "
                                  "as requests, arrival, lengths and prefix.")

    @model_validator(mode="before")
    @classmethod
    def _expand_vllm_bench(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("vllm_bench"), dict):
            return data
        try:
            return expand_vllm_bench(data)
        except ValidationError:
            return data  # the field's own validation reports it, located under vllm_bench

    @model_validator(mode="after")
    def _check(self) -> WorkloadConfig:
        if self.inference_perf is not None:
            self._check_inference_perf()
            return self
        missing = [name for name in _PARTS if getattr(self, name) is None]
        if missing:
            raise ValueError(f"set {', '.join(missing)} (or inference_perf or vllm_bench)")
        for field in _PARTS:
            part = getattr(self, field)
            if self.sessions is not None and self.sessions.trace is not None:
                continue  # a session trace has its own lengths and times (_check_sessions)
            if isinstance(part, TraceLength | TraceArrival) and part.trace is None and self.trace is None:
                raise ValueError(f"{field} reads a trace but neither {field}.trace nor workload.trace is set")
        source = self.trace_source("arrival")
        if source is not None and source.sample != "sequential":
            raise ValueError("arrival.process 'trace' needs a trace with sample 'sequential', got 'random'")
        if self.sessions is not None:
            self._check_sessions(self.sessions)
        elif self.requests is None and not any(
                s is not None and s.sample == "sequential" for s in map(self.trace_source, _PARTS)):
            raise ValueError("requests must be set unless lengths or arrivals come from a sequential trace")
        bad = {name: w for name, w in (self.models or {}).items() if not 0 < w <= MAX_WEIGHT}
        if bad or self.models == {}:
            raise ValueError(f"models needs at least one model with weight > 0 (each <= {MAX_WEIGHT:g}), "
                             f"got {self.models}")
        weights = self.templates or {}
        if any(not 0 <= w <= MAX_WEIGHT for w in weights.values()) or (weights and not any(weights.values())):
            raise ValueError(f"templates needs weights in [0, {MAX_WEIGHT:g}], one of them > 0, got {weights}")
        return self

    def _check_inference_perf(self) -> None:
        """The profile gives the requests: nothing else may say how many, when or how long."""
        clash = [name for name in ("requests", "trace", *_PARTS, "prefix", "templates", "models", "lora", "classes",
                                   "sessions", "vllm_bench") if getattr(self, name) is not None]
        if clash:
            raise ValueError(f"inference_perf gives the requests, their lengths and times: remove {', '.join(clash)}")

    @property
    def num_requests(self) -> int | None:
        """Requests the workload sends where known before drawing it (``requests``, or the
        inference-perf profile's stages), else None."""
        if self.inference_perf is not None:
            return self.inference_perf.num_requests
        return self.requests

    def _check_sessions(self, sessions: SessionsConfig) -> None:
        if self.requests is not None:
            raise ValueError("requests counts independent requests: with sessions, set sessions.count")
        unsupported = [name for name in ("templates", "models", "lora", "classes") if getattr(self, name)]
        if unsupported:
            raise ValueError(f"sessions do not combine with {', '.join(unsupported)} yet")
        from_file = sessions.trace is not None
        for field in ("input_tokens", "output_tokens"):
            part = getattr(self, field)
            if from_file != isinstance(part, TraceLength) or (from_file and (part.trace or part.column)):
                raise ValueError(f"{field}: with sessions.trace, write {{dist: trace}} (the session file's lengths); "
                                 "without, a synthetic distribution (each turn's new tokens)")
        trace = sessions.trace
        if isinstance(self.arrival, TraceArrival) and (trace is None or trace.format != "llmservingsim"
                                                       or self.arrival.trace is not None):
            raise ValueError("arrival.process 'trace' with sessions reads the start times of a sessions.trace of "
                             "format llmservingsim")

    def trace_source(self, field: str) -> TraceSource | None:
        """The trace that ``arrival``, ``input_tokens`` or ``output_tokens`` reads, if any."""
        part = getattr(self, field)
        if isinstance(part, TraceLength | TraceArrival):
            return part.trace or self.trace
        return None


def parse_workload(data: Mapping[str, Any], where: str = "workload") -> WorkloadConfig:
    """Validate the ``workload:`` mapping of a scenario.

    Raises:
        ScenarioError: located at the first bad field (``workload.arrival.rate_per_s``);
            the message lists every problem with its value.
    """
    try:
        return WorkloadConfig.model_validate(data)
    except ValidationError as err:
        problems = [(_error_path(where, data, e), _error_text(e)) for e in err.errors()]
        first_path, first_text = problems[0]
        rest = "".join(f"\n{p}: {t}" for p, t in problems[1:])
        raise ScenarioError(first_path, first_text + rest) from None


def _error_path(prefix: str, data: Any, error: Any) -> str:
    """Dotted path of the error without pydantic's union tags ('poisson', 'lognormal')."""
    loc: tuple[int | str, ...] = error["loc"]
    path, node = prefix, data
    for i, part in enumerate(loc):
        names_missing_key = i == len(loc) - 1 and error["type"] == "missing"
        if isinstance(node, Mapping) and part not in node and not names_missing_key:
            continue  # a discriminator tag, not a key the user wrote
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
        node = node.get(part) if isinstance(node, Mapping) else None
    return path


_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
           "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def _error_text(error: Any) -> str:
    """The problem in the config's words: 'must be > 0, got -5'."""
    kind = error["type"]
    if kind in _BOUNDS:
        key, op = _BOUNDS[kind]
        bound = error["ctx"][key]
        return f"must be {op} {bound:g}, got {error['input']!r}"
    text = str(error["msg"]).removeprefix("Value error, ")
    if kind in ("missing", "model_type", "value_error") or kind.startswith("union_tag"):
        return text
    return f"{text}, got {error['input']!r}"
