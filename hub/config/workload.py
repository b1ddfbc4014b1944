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

TraceFormat = Literal["azure", "splitwise", "vidur", "csv", "jsonl", "mooncake"]
TimeUnit = Literal["s", "ms", "us", "ns", "datetime"]

# format -> (arrival column, input column, output column, time unit)
FORMAT_DEFAULTS: dict[str, tuple[str, str, str, TimeUnit]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime"),
    "splitwise": ("arrived_at", "num_prefill_tokens", "num_decode_tokens", "s"),
    "vidur": ("arrived_at", "num_prefill_tokens", "num_decode_tokens", "s"),
    "csv": ("arrival_s", "input_tokens", "output_tokens", "s"),
    "jsonl": ("arrival_s", "input_tokens", "output_tokens", "s"),
    "mooncake": ("timestamp", "input_length", "output_length", "ms"),
}
# Mooncake's traces name each prompt's 512-token blocks by hash (FAST25-release/README.md).
MOONCAKE_BLOCK_TOKENS = 512


class TraceSource(FrozenModel):
    """A request trace file and how to read it.

    Formats: ``azure`` (Azure LLM inference traces 2023/2024: TIMESTAMP,
    ContextTokens, GeneratedTokens), ``splitwise``/``vidur`` (Vidur's
    processed traces: arrived_at in seconds, num_prefill_tokens,
    num_decode_tokens; arrived_at may be absent when arrivals are not taken
    from the trace), generic ``csv``/``jsonl`` (columns arrival_s,
    input_tokens, output_tokens unless renamed), and ``mooncake`` (Mooncake's
    JSONL traces: timestamp in ms, input_length, output_length, and hash_ids,
    one per 512-token block of the prompt: equal hash ids become equal token
    ids, so prefix caching sees the reuse the trace records).
    """

    path: str = Field(description="Trace file; a relative path is read from the scenario file's folder.")
    format: TraceFormat = Field(description="File layout: azure, splitwise, vidur, csv, jsonl or mooncake.")
    arrival_column: str | None = Field(default=None, description="Arrival time column; default per format.")
    input_column: str | None = Field(default=None, description="Prompt length column; default per format.")
    output_column: str | None = Field(default=None, description="Output length column; default per format.")
    token_ids_column: str | None = Field(
        default=None, description="Prompt token ids column (a JSON list, or space-separated in CSV), for prefix "
                                  "caching by content; without it, prompts are synthesized (see docs).")
    lora_column: str | None = Field(
        default=None, description="Column naming each request's LoRA adapter (empty: the base model); read "
                                  "from the input lengths' source, in place of workload.lora's draws.")
    time_unit: TimeUnit | None = Field(
        default=None, description="Unit of the arrival column (s, ms, us, ns or datetime); default per format.")
    sample: Literal["sequential", "random"] = Field(
        default="sequential",
        description="Rows for requests: 'sequential' (request i takes row start_row + i, keeping the "
                    "trace's length mix and order) or 'random' (rows drawn uniformly with replacement).")
    start_row: int = Field(default=0, ge=0, le=MAX_REQUESTS, description="Data rows to skip at the start of the file.")

    @property
    def columns(self) -> tuple[str, str, str, TimeUnit]:
        """(arrival column, input column, output column, time unit), defaults filled in."""
        arrival, inp, out, unit = FORMAT_DEFAULTS[self.format]
        return (self.arrival_column or arrival, self.input_column or inp,
                self.output_column or out, self.time_unit or unit)


# --- token lengths ---------------------------------------------------------


class _Length(FrozenModel):
    min: int = Field(default=1, ge=1, le=MAX_TOKENS, description="Samples below this are raised to it (tokens).")
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS,
                            description="Samples above this are lowered to it (tokens); without it a sample "
                                        "beyond 1e9 tokens is an error, not clipped.")

    @model_validator(mode="after")
    def _check_bounds(self) -> _Length:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max must be >= min={self.min}, got {self.max}")
        return self


class FixedLength(_Length):
    """Every request gets ``value`` tokens."""

    dist: Literal["fixed"] = Field(description="Distribution kind.")
    value: int = Field(ge=1, le=MAX_TOKENS, description="Tokens.")


class UniformLength(_Length):
    """Integers drawn uniformly from ``low..high`` inclusive."""

    dist: Literal["uniform"] = Field(description="Distribution kind.")
    low: int = Field(ge=1, le=MAX_TOKENS, description="Smallest length (tokens).")
    high: int = Field(ge=1, le=MAX_TOKENS, description="Largest length (tokens), inclusive.")

    @model_validator(mode="after")
    def _check_range(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high must be >= low={self.low}, got {self.high}")
        return self


class NormalLength(_Length):
    """Normal samples, rounded to integers, then clipped to min..max."""

    dist: Literal["normal"] = Field(description="Distribution kind.")
    mean: float = Field(gt=0, le=MAX_TOKENS, description="Mean (tokens).")
    std: float = Field(ge=0, le=MAX_TOKENS, description="Standard deviation (tokens).")


class LognormalLength(_Length):
    """Lognormal samples, rounded and clipped.

    ``mean`` is the mean of the lengths themselves (not of their log), and
    ``sigma`` the standard deviation of the underlying normal, so the log
    has mean ``ln(mean) - sigma**2 / 2``. ``sigma`` 0.5 gives a coefficient
    of variation of about 0.53.
    """

    dist: Literal["lognormal"] = Field(description="Distribution kind.")
    mean: float = Field(gt=0, le=MAX_TOKENS, description="Mean of the distribution (tokens).")
    sigma: float = Field(ge=0, le=10, description="Standard deviation of the underlying normal (log space).")


class TraceLength(_Length):
    """Lengths read from a trace column, for the rows the source selects.

    Input and output lengths from the same source come from the same rows,
    so their correlation in the trace is kept.
    """

    dist: Literal["trace"] = Field(description="Distribution kind.")
    trace: TraceSource | None = Field(default=None, description="Trace to read; default workload.trace.")
    column: str | None = Field(
        default=None, description="Column to read; default the source's input or output column.")


LengthDist = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength | TraceLength, Field(discriminator="dist")]


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


# --- sessions --------------------------------------------------------------


class FixedTime(FrozenModel):
    """Every draw is ``value`` seconds."""

    dist: Literal["fixed"] = Field(description="Distribution kind.")
    value: float = Field(ge=0, le=MAX_TIME_S, description="Seconds.")


class UniformTime(FrozenModel):
    """Seconds drawn uniformly from ``low..high``."""

    dist: Literal["uniform"] = Field(description="Distribution kind.")
    low: float = Field(ge=0, le=MAX_TIME_S, description="Shortest (s).")
    high: float = Field(ge=0, le=MAX_TIME_S, description="Longest (s).")

    @model_validator(mode="after")
    def _check_range(self) -> UniformTime:
        if self.high < self.low:
            raise ValueError(f"high must be >= low={self.low}, got {self.high}")
        return self


class ExponentialTime(FrozenModel):
    """Exponential seconds of mean ``mean`` (a memoryless user)."""

    dist: Literal["exponential"] = Field(description="Distribution kind.")
    mean: float = Field(ge=0, le=MAX_TIME_S, description="Mean (s).")


class LognormalTime(FrozenModel):
    """Lognormal seconds of mean ``mean`` (sigma in log space, as lognormal lengths)."""

    dist: Literal["lognormal"] = Field(description="Distribution kind.")
    mean: float = Field(gt=0, le=MAX_TIME_S, description="Mean (s).")
    sigma: float = Field(ge=0, le=10, description="Standard deviation of the underlying normal.")


TimeDist = Annotated[FixedTime | UniformTime | ExponentialTime | LognormalTime, Field(discriminator="dist")]


class SessionTraceSource(FrozenModel):
    """A file of sessions (docs/sessions.md): ``sharegpt`` (a JSON array, or JSON lines, of
    ``{"conversations": [{"from", "value"}, ...]}``: each model message (``gpt``, ``function_call``)
    is a turn whose prompt is the conversation before it; tokens counted from the text at
    ``chars_per_token``) or ``llmservingsim`` (LLMServingSim's agentic JSONL: a line per session,
    ``arrival_time_ns`` and ``sub_requests`` of ``input_toks``, ``output_toks``, ``tool_duration_ns``)."""

    path: str = Field(description="Session file; a relative path is read from the scenario file's folder.")
    format: Literal["sharegpt", "llmservingsim"] = Field(description="File layout: sharegpt or llmservingsim.")
    chars_per_token: float = Field(
        default=4.0, gt=0, le=1000,
        description="sharegpt: characters per token (OpenAI's rule of thumb for English text: about 4).")


class SessionsConfig(FrozenModel):
    """Requests as multi-turn sessions (docs/sessions.md).

    A session is a chain of turns: each turn is released when the one before it finished plus a
    think (or tool) time, and its prompt is the previous turn's prompt and output plus its own
    new tokens (``workload.input_tokens``; ``workload.output_tokens`` its output), so prefix
    caching and routing see the history. Sessions start by ``workload.arrival`` (open loop) or,
    with ``users``, each of N users starts its next session when its last one ends (closed loop).
    """

    count: int | None = Field(default=None, ge=1, le=MAX_REQUESTS,
                              description="Sessions to run; default: every session of the trace, or as many as "
                                          "start before duration_s.")
    turns: LengthDist | None = Field(default=None, description="Turns per session (synthetic sessions).")
    think_time_s: TimeDist | None = Field(
        default=None, description="Pause between a turn's end and the next turn's release; default 0 (a trace's "
                                  "own tool durations take precedence).")
    users: int | None = Field(default=None, ge=1, le=1_000_000,
                              description="Closed loop: concurrent users, each starting its next session when its "
                                          "last one ends (their first sessions start by workload.arrival).")
    duration_s: float | None = Field(default=None, gt=0, le=MAX_TIME_S,
                                     description="No session starts at or after this time (s).")
    trace: SessionTraceSource | None = Field(default=None, description="Sessions read from a file.")

    @model_validator(mode="after")
    def _check(self) -> SessionsConfig:
        if (self.turns is None) == (self.trace is None):
            raise ValueError("set exactly one of turns (synthetic sessions) and trace (sessions from a file)")
        if self.count is None and self.trace is None and (self.users is None or self.duration_s is None):
            raise ValueError("count must be set, unless users and duration_s are (closed loop for a time)")
        return self


class WorkloadConfig(FrozenModel):
    """What requests arrive, when, and how long they are."""

    requests: int | None = Field(
        default=None, ge=1, le=MAX_REQUESTS,
        description="Requests to generate; default all rows a sequential trace source has from start_row.")
    trace: TraceSource | None = Field(default=None, description="Trace shared by 'trace' lengths and arrivals.")
    arrival: ArrivalProcess = Field(description="Arrival process.")
    input_tokens: LengthDist = Field(description="Prompt length distribution.")
    output_tokens: LengthDist = Field(description="Output length distribution.")
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

    @model_validator(mode="after")
    def _check(self) -> WorkloadConfig:
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
