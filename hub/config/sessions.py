"""Pydantic models for ``workload.sessions`` (multi-turn sessions, docs/sessions.md).

:class:`SessionsConfig` (turns, think times, open or closed loop, or sessions from a file:
:class:`SessionTraceSource`) and the time distributions of think times (:data:`TimeDist`).
Split from :mod:`.workload`, which re-exports them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .bounds import MAX_REQUESTS, MAX_TIME_S
from .frozen import FrozenModel
from .lengths import LengthDist


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
