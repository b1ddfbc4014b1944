"""Pydantic models of request lengths and the traces they may read.

:class:`TraceSource` (a trace file and its columns) and the length distributions
(:data:`LengthDist`: fixed, uniform, normal, lognormal, or a trace column). Split from
:mod:`.workload`, which re-exports them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .bounds import MAX_REQUESTS, MAX_TOKENS
from .frozen import FrozenModel

TraceFormat = Literal["azure", "splitwise", "vidur", "csv", "jsonl", "mooncake", "sharegpt"]
TimeUnit = Literal["s", "ms", "us", "ns", "datetime"]

# format -> (arrival column, input column, output column, time unit)
FORMAT_DEFAULTS: dict[str, tuple[str, str, str, TimeUnit]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime"),
    "splitwise": ("arrived_at", "num_prefill_tokens", "num_decode_tokens", "s"),
    "vidur": ("arrived_at", "num_prefill_tokens", "num_decode_tokens", "s"),
    "csv": ("arrival_s", "input_tokens", "output_tokens", "s"),
    "jsonl": ("arrival_s", "input_tokens", "output_tokens", "s"),
    "mooncake": ("timestamp", "input_length", "output_length", "ms"),
    "sharegpt": ("arrival_s", "input_tokens", "output_tokens", "s"),  # no times: lengths of first exchanges
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
    input_tokens, output_tokens unless renamed), ``sharegpt`` (a ShareGPT JSON file: each conversation's
    first message and answer, as ``vllm bench serve`` takes them, counted at ``chars_per_token``; no
    times), and ``mooncake`` (Mooncake's
    JSONL traces: timestamp in ms, input_length, output_length, and hash_ids,
    one per 512-token block of the prompt: equal hash ids become equal token
    ids, so prefix caching sees the reuse the trace records).
    """

    path: str = Field(description="Trace file; a relative path is read from the scenario file's folder.")
    format: TraceFormat = Field(description="File layout: azure, splitwise, vidur, csv, jsonl, mooncake "
                                                    "or sharegpt.")
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
    chars_per_token: float = Field(default=4.0, gt=0, le=1000, description="sharegpt: characters per token.")
    fixed_output_tokens: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS, description="sharegpt: every output this long (vllm bench serve's "
                                                       "--sharegpt-output-len), in place of the answers' lengths.")

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
