"""Request pipelines: templates of stages, and the requests drawn from them.

A template is an ordered list of stages (``preprocess``, ``rag``,
``kv_retrieval``, ``prefill``, ``decode``, ``reason``, ``postprocess``), the
model it runs on, and its token-length distributions. Built-in templates
follow MIST Table III and HERMES Fig. 1; a scenario may define its own under
``templates:`` and mix them with ``workload.templates: {name: weight}``.

Table III gives mean and median of each length; a lognormal with that mean and
median has sigma = sqrt(2 ln(mean / median)), which is what the templates use
(the article answers, whose mean is below the median, use a normal fitted to
the mean and the P95 instead).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from ..config.frozen import FrozenModel
from ..config.workload import FixedLength, LognormalLength, NormalLength, UniformLength
from .records import RequestRecord
from .workload import RequestSpec, generate_requests
from .workload.sampling import clip_lengths, sample_lengths

if TYPE_CHECKING:  # the config imports this module
    from ..config.scenario import ScenarioConfig

TemplateLength = Annotated[FixedLength | UniformLength | NormalLength | LognormalLength, Field(discriminator="dist")]

StageKind = Literal["preprocess", "rag", "kv_retrieval", "prefill", "decode", "reason", "postprocess"]
LLM_STAGES = frozenset({"prefill", "decode", "reason"})


class ReasoningConfig(FrozenModel):
    """How a ``reason`` stage stretches the output (single path)."""

    factor: float = Field(1.0, ge=1, le=1000,
                          description="output tokens of a reasoning request = sampled output x factor")
    branches: int = Field(1, ge=1, le=1024, description="parallel reasoning paths sharing the prompt's KV "
                                                        "(multi-path); the request ends when every path has its output")


class KVPrefixConfig(FrozenModel):
    """The reusable KV a ``kv_retrieval`` stage fetches (code repositories, chat history)."""

    fraction: float = Field(0.8, gt=0, lt=1, description="share of the prompt that is a stored prefix")
    num_prefixes: int = Field(100, ge=1, le=1_000_000, description="distinct prefixes (uniform popularity)")


class TemplateConfig(FrozenModel):
    """One request pipeline and its token lengths."""

    stages: list[StageKind] = Field(min_length=1, description="stages in order")
    model: str | None = Field(None, description="a key of `models`; default the first client's model")
    input_tokens: TemplateLength | None = Field(None, description="prompt lengths; default the workload's")
    output_tokens: TemplateLength | None = Field(None, description="output lengths; default the workload's")
    reasoning: ReasoningConfig = Field(default_factory=ReasoningConfig)
    kv_prefix: KVPrefixConfig = Field(default_factory=KVPrefixConfig)

    @model_validator(mode="after")
    def _check_order(self) -> TemplateConfig:
        stages = self.stages
        if "prefill" not in stages:
            raise ValueError("a pipeline needs a prefill stage")
        first_llm = stages.index("prefill")
        if any(s in ("rag", "kv_retrieval", "preprocess") for s in stages[first_llm:]):
            raise ValueError("preprocess, rag and kv_retrieval stages must come before prefill")
        if any(s in LLM_STAGES for s in stages[first_llm + 1:] if s != "prefill") and \
                stages[first_llm + 1:].count("prefill"):
            raise ValueError("a pipeline has one prefill")
        return self


def _lognormal(mean: float, median: float) -> dict[str, Any]:
    return {"dist": "lognormal", "mean": mean, "sigma": round(math.sqrt(2 * math.log(mean / median)), 4)}


# Built-in templates (MIST Table III; HERMES Fig. 1). The article template's
# prompt is the question and instructions: Table III's 19,260 mean prefill
# tokens minus the 20 x 512 retrieved by the RAG stage.
BUILTIN_TEMPLATES: dict[str, dict[str, Any]] = {
    "chat": {"stages": ["prefill", "decode"]},
    "mist-article-summarization": {
        "stages": ["rag", "prefill", "decode"],
        "input_tokens": {**_lognormal(19260 - 10240, 11284 - 10240 + 1), "max": 65536},
        "output_tokens": {"dist": "normal", "mean": 218, "std": 69.3, "min": 1}},
    "mist-math-reasoning": {
        "stages": ["prefill", "reason", "decode"],
        "input_tokens": {**_lognormal(158, 93), "max": 4096},
        "output_tokens": {**_lognormal(6818, 5237), "max": 32768}},
    "mist-code-generation": {
        "stages": ["kv_retrieval", "prefill", "decode"],
        "input_tokens": {**_lognormal(26979, 16204), "max": 131072},
        "output_tokens": {**_lognormal(1088, 329), "max": 8192},
        "kv_prefix": {"fraction": 0.8, "num_prefixes": 100}},
    "hermes-qa-checked": {"stages": ["prefill", "decode", "postprocess"]},
    "hermes-rag-disaggregated": {"stages": ["rag", "prefill", "decode"]},
    "hermes-memory-reasoning": {"stages": ["kv_retrieval", "prefill", "reason", "decode"],
                                "reasoning": {"factor": 4.0}},
}


@dataclass(frozen=True, slots=True)
class Pipeline:
    """What the coordinator needs of a request's template."""

    template: str
    stages: tuple[str, ...]
    model: str
    prefix_fraction: float
    branches: int = 1


def resolve_templates(defined: Mapping[str, TemplateConfig]) -> dict[str, TemplateConfig]:
    """Built-in templates overlaid with the scenario's own."""
    templates = {name: TemplateConfig.model_validate(raw) for name, raw in BUILTIN_TEMPLATES.items()}
    templates.update(defined)
    return templates


def assign_pipelines(specs: Sequence[RequestSpec], weights: Mapping[str, float],
                     templates: Mapping[str, TemplateConfig], rng: np.random.Generator,
                     default_model: str) -> tuple[list[RequestSpec], list[Pipeline]]:
    """Draws a template per request (by weight) and re-draws lengths from its distributions.

    Arrival times are kept; requests of a template with its own lengths get new
    ones, reasoning templates multiply the output by their factor, and
    kv_retrieval templates get a stored prefix (a share of the prompt).
    """
    names = list(weights)
    probabilities = np.array([weights[n] for n in names], dtype=float)
    picks = rng.choice(len(names), size=len(specs), p=probabilities / probabilities.sum())
    pipelines: list[Pipeline] = []
    shared: dict[Pipeline, Pipeline] = {}  # a million requests share a few pipelines
    result: list[RequestSpec] = []
    for index, name in enumerate(names):
        template = templates[name]
        members = np.flatnonzero(picks == index)
        inputs, outputs = (None if dist is None else
                           clip_lengths(sample_lengths(dist, len(members), rng), dist.min, dist.max,
                                        where=f"templates.{name}.{field}")
                           for field, dist in (("input_tokens", template.input_tokens),
                                               ("output_tokens", template.output_tokens)))
        prefix_ids = rng.integers(template.kv_prefix.num_prefixes, size=len(members))
        stages = tuple(template.stages)
        for j, i in enumerate(members.tolist()):
            spec = specs[i]
            input_tokens = int(inputs[j]) if inputs is not None else spec.input_tokens
            output_tokens = int(outputs[j]) if outputs is not None else spec.output_tokens
            branches = 1
            if "reason" in template.stages:
                output_tokens = max(1, int(round(output_tokens * template.reasoning.factor)))
                if output_tokens > 1:  # a path needs two tokens to run beside its siblings
                    branches = template.reasoning.branches
                    output_tokens *= branches
            prefix_id, prefix_tokens = spec.prefix_id, spec.prefix_tokens
            if "kv_retrieval" in template.stages:
                prefix_id = f"{name}/prefix-{prefix_ids[j]}"
                prefix_tokens = int(input_tokens * template.kv_prefix.fraction)
            # the spec's other fields (its trace row, LoRA adapter, class) stay as drawn
            result.append(dataclasses.replace(
                spec, input_tokens=input_tokens, output_tokens=output_tokens, model=template.model or spec.model,
                prefix_id=prefix_id, prefix_tokens=prefix_tokens,
                prompt_token_ids=spec.prompt_token_ids if input_tokens == spec.input_tokens else None))
            pipeline = Pipeline(template=name, stages=stages, model=template.model or spec.model or default_model,
                                prefix_fraction=template.kv_prefix.fraction, branches=branches)
            pipelines.append(shared.setdefault(pipeline, pipeline))  # one object per distinct pipeline
    order = sorted(range(len(result)), key=lambda k: result[k].id)
    return [result[k] for k in order], [pipelines[k] for k in order]


def scenario_requests(config: ScenarioConfig, rng: np.random.Generator,
                      base_dir: Path) -> tuple[list[RequestSpec], list[Pipeline]]:
    """A scenario's requests and their pipelines, as a run draws them from ``rng`` (the generator
    seeded with ``config.seed``): the workload, then a template per request by weight. With
    ``workload.sessions``, every turn known before the run (at arrival 0: the admission checks'
    list; :mod:`cosim.hub.sim.conversations` releases them).

    Raises:
        ScenarioError: see :func:`cosim.hub.sim.workload.generate_requests`.
    """
    default_model = next(c.model for c in config.clients if c.kind == "llm")
    if config.workload.sessions is not None:  # every turn known ahead (hub/sim/conversations.py runs them)
        from .conversations import SessionSource

        turns = SessionSource(config.workload, config.seed, base_dir).check_specs()
        return turns, [session_pipeline(str(default_model))] * len(turns)
    specs = generate_requests(config.workload, rng, base_dir=base_dir)
    weights = config.workload.templates or {"chat": 1.0}
    return assign_pipelines(specs, weights, resolve_templates(config.templates), rng, default_model=str(default_model))


def session_pipeline(model: str) -> Pipeline:
    """The pipeline of a session's turns: the built-in chat (prefill, decode) of ``model``."""
    return Pipeline(template="chat", stages=tuple(BUILTIN_TEMPLATES["chat"]["stages"]), model=model,
                    prefix_fraction=KVPrefixConfig().fraction)


def decode_kind(request: RequestRecord) -> str:
    """What generation after the first token is called in reports: ``reason`` or ``decode``."""
    return "reason" if "reason" in request.pipeline else "decode"
