"""``workload.inference_perf``: an inference-perf profile's ``data`` and ``load`` sections, as written.

kubernetes-sigs/inference-perf drives a server over HTTP with a load profile (``data``: what each
request holds; ``load``: when requests are sent). :class:`InferencePerfConfig` takes those two
sections with inference-perf's own keys (v0.4.0, the release of February 2026 that the H100 runs of
``validation/blis-h100`` used; also the older ``num_groups`` / ``num_prompts_per_group`` names of
``shared_prefix``), inline or from the profile file itself (``profile: path.yaml``, read by
:func:`inline_profile` when the scenario is loaded). The semantics (how prompts are shared, when
requests go out, how a multi-turn chat grows) are :mod:`cosim.hub.sim.workload.inference_perf`'s;
docs/inference-perf.md describes both.

Supported: ``data.type`` ``shared_prefix`` and ``random`` (``input_distribution`` /
``output_distribution``); ``load.type`` ``constant`` and ``poisson`` with ``stages`` of ``rate`` and
``duration`` and the ``interval`` between stages. Other keys of those sections that change nothing
a simulation sees (``num_workers``, ``worker_max_concurrency``, ``base_seed``, ...) are accepted and
ignored; anything else is an error naming the profile key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from .bounds import MAX_RATE_PER_S, MAX_REQUESTS, MAX_TIME_S, MAX_TOKENS
from .frozen import FrozenModel

# Keys of an inference-perf load section that shape the client machine, not the requests it sends.
IGNORED_LOAD_KEYS = ("num_workers", "worker_max_concurrency", "worker_max_tcp_connections", "base_seed",
                     "circuit_breakers", "request_timeout")
# inference-perf's older names of the shared_prefix counts (its config accepts both).
_SHARED_PREFIX_ALIASES = {"num_groups": "num_unique_system_prompts",
                          "num_prompts_per_group": "num_users_per_system_prompt"}


class SharedPrefixData(FrozenModel):
    """``data.shared_prefix``: ``num_unique_system_prompts`` system prompts of ``system_prompt_len``
    tokens, each shared by ``num_users_per_system_prompt`` users (prompts); a request is a user's
    question of ``question_len`` tokens after its system prompt and asks for exactly ``output_len``
    tokens. With ``enable_multi_turn_chat`` each user is a chat that sends its whole history every
    round, one request at a time. Defaults are inference-perf's."""

    num_unique_system_prompts: int = Field(10, ge=1, le=1_000_000, description="Distinct system prompts "
                                           "(inference-perf's num_groups).")
    num_users_per_system_prompt: int = Field(10, ge=1, le=1_000_000, description="Users (questions) per system "
                                             "prompt (inference-perf's num_prompts_per_group).")
    system_prompt_len: int = Field(100, ge=0, le=MAX_TOKENS, description="Tokens of each system prompt.")
    question_len: int = Field(50, ge=1, le=MAX_TOKENS, description="Tokens of each user's question.")
    output_len: int = Field(50, ge=1, le=MAX_TOKENS, description="Tokens each request generates (max_tokens, "
                                                                 "ignore_eos).")
    enable_multi_turn_chat: bool = Field(False, description="Each user a chat whose rounds resend the history "
                                                            "(its context, its question and every answer).")

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for old, new in _SHARED_PREFIX_ALIASES.items():
                if old in data:
                    if new in data:
                        raise ValueError(f"set {new} or its older name {old}, not both")
                    data[new] = data.pop(old)
        return data

    @property
    def num_users(self) -> int:
        """Users (prompts) in all."""
        return self.num_unique_system_prompts * self.num_users_per_system_prompt


class LengthDistribution(FrozenModel):
    """inference-perf's ``Distribution`` of lengths: ``total_count`` normal draws of ``mean`` and
    ``std_dev``, rounded and clipped to ``min..max``."""

    min: int = Field(10, ge=1, le=MAX_TOKENS, description="Shortest length (tokens).")
    max: int = Field(1024, ge=1, le=MAX_TOKENS, description="Longest length (tokens).")
    mean: float = Field(512, gt=0, le=MAX_TOKENS, description="Mean of the normal draws (tokens).")
    std_dev: float = Field(200, ge=0, le=MAX_TOKENS, description="Their standard deviation (tokens).")
    total_count: int | None = Field(None, ge=1, le=MAX_REQUESTS, description="Lengths drawn; request i of a "
                                    "stage takes length i (inference-perf requires it for random data).")

    @model_validator(mode="after")
    def _check(self) -> LengthDistribution:
        if self.max < self.min:
            raise ValueError(f"max must be >= min={self.min}, got {self.max}")
        if not self.min <= self.mean <= self.max:
            raise ValueError(f"mean must lie in min..max = {self.min}..{self.max}, got {self.mean:g}")
        return self


class InferencePerfData(FrozenModel):
    """An inference-perf ``data`` section."""

    type: Literal["shared_prefix", "random"] = Field(description="Data generator: shared_prefix or random "
                                                                 "(others are not modelled yet).")
    shared_prefix: SharedPrefixData | None = Field(None, description="shared_prefix's settings.")
    input_distribution: LengthDistribution | None = Field(None, description="random: prompt lengths.")
    output_distribution: LengthDistribution | None = Field(None, description="random: output lengths.")
    path: str | None = Field(None, description="Dataset path of the dataset types; unused by these two.")

    @property
    def prefix_settings(self) -> SharedPrefixData:
        """``shared_prefix``, inference-perf's defaults where the section is absent."""
        return self.shared_prefix or SharedPrefixData()

    @model_validator(mode="after")
    def _check(self) -> InferencePerfData:
        if self.type == "random":
            for name in ("input_distribution", "output_distribution"):
                dist = getattr(self, name)
                if dist is None or dist.total_count is None:
                    raise ValueError(f"random data needs {name} with total_count (as inference-perf does)")
        return self


class LoadStage(FrozenModel):
    """One stage: ``rate`` requests per second for ``duration`` seconds, ``int(rate x duration)``
    requests in all."""

    rate: float = Field(gt=0, le=MAX_RATE_PER_S, description="Requests per second.")
    duration: float = Field(gt=0, le=MAX_TIME_S, description="Seconds.")

    @model_validator(mode="after")
    def _check(self) -> LoadStage:
        if int(self.rate * self.duration) < 1:
            raise ValueError(f"rate x duration = {self.rate * self.duration:g} sends no request "
                             "(inference-perf sends int(rate x duration))")
        if int(self.rate * self.duration) > MAX_REQUESTS:
            raise ValueError(f"rate x duration = {self.rate * self.duration:g} requests, more than {MAX_REQUESTS}")
        return self


class InferencePerfLoad(FrozenModel):
    """An inference-perf ``load`` section: ``stages`` one after the other, each sent by the
    ``constant`` timer (``int(rate x duration)`` exponential gaps rescaled to fill the stage) or the
    ``poisson`` one (a Poisson count per second, spread by the constant timer over that second); a
    stage starts ``interval`` seconds (and inference-perf's one second of queue filling) after every
    request of the stage before it has finished."""

    type: Literal["constant", "poisson"] = Field("constant", description="Load timer.")
    interval: float = Field(1.0, ge=0, le=MAX_TIME_S, description="Seconds between stages (inference-perf's "
                                                                  "default 1).")
    stages: list[LoadStage] = Field(min_length=1, max_length=10_000, description="Load stages, in order.")
    num_workers: int | None = Field(None, description="Client processes: not modelled (ignored).")
    worker_max_concurrency: int | None = Field(None, description="Ignored (see docs/inference-perf.md).")
    worker_max_tcp_connections: int | None = Field(None, description="Ignored.")
    base_seed: int | None = Field(None, description="Ignored: cosim draws from the scenario's seed.")
    circuit_breakers: list[Any] | None = Field(None, description="Ignored.")
    request_timeout: float | None = Field(None, description="Ignored.")

    @property
    def num_requests(self) -> int:
        """Requests of every stage."""
        return sum(int(s.rate * s.duration) for s in self.stages)


class InferencePerfConfig(FrozenModel):
    """``workload.inference_perf``: a profile's ``data`` and ``load`` (inline, or read from
    ``profile``, an inference-perf config file whose other sections are not read)."""

    profile: str | None = Field(None, description="inference-perf config file the data and load came from "
                                                  "(read when the scenario is loaded).")
    data: InferencePerfData = Field(description="The profile's data section.")
    load: InferencePerfLoad = Field(description="The profile's load section.")

    @property
    def num_requests(self) -> int:
        """Requests the profile sends."""
        return self.load.num_requests


def inline_profile(data: dict[str, Any], folder: Path) -> list[tuple[str, str]]:
    """Reads ``workload.inference_perf.profile`` (relative to ``folder``) into the raw config: its
    ``data`` and ``load`` sections go beside ``profile``; returns (where, problem) pairs."""
    import yaml

    from . import safe_yaml

    workload = data.get("workload")
    section = workload.get("inference_perf") if isinstance(workload, dict) else None
    if not isinstance(section, dict) or not isinstance(section.get("profile"), str):
        return []
    where = "workload.inference_perf.profile"
    if "data" in section or "load" in section:
        return [(where, "give the profile file or its data and load sections inline, not both")]
    path = Path(section["profile"]).expanduser()
    path = path if path.is_absolute() else folder / path
    try:
        content = safe_yaml.load(path.read_text())
    except OSError as err:
        return [(where, f"cannot read {path}: {err.strerror}")]
    except yaml.YAMLError as err:
        return [(where, f"{path} is not valid YAML: {safe_yaml.describe(err)}")]
    if not isinstance(content, dict) or not {"data", "load"} <= set(content):
        return [(where, f"{path} is not an inference-perf config: it needs data: and load: sections")]
    section["data"], section["load"] = content["data"], content["load"]
    return []
