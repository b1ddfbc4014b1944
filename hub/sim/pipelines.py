"""Request pipelines: the requests drawn from the scenario's templates (:mod:`cosim.hub.config.templates`).

Each request gets a template by the workload's weights, its lengths from the template's
distributions where it has its own, and the :class:`Pipeline` the coordinator moves it along.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..config.templates import BUILTIN_TEMPLATES, TemplateConfig
from .records import RequestRecord
from .workload import RequestSpec
from .workload.sampling import clip_lengths, sample_lengths


@dataclass(frozen=True, slots=True)
class Pipeline:
    """What the coordinator needs of a request's template."""

    template: str
    stages: tuple[str, ...]
    model: str
    branches: int = 1


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
            model = template.model or spec.model
            if (input_tokens, output_tokens, model, prefix_id, prefix_tokens) == \
                    (spec.input_tokens, spec.output_tokens, spec.model, spec.prefix_id, spec.prefix_tokens):
                result.append(spec)  # as drawn (the common case: a template of the workload's lengths)
            else:  # the spec's other fields (its trace row, LoRA adapter, class) stay as drawn
                result.append(dataclasses.replace(
                    spec, input_tokens=input_tokens, output_tokens=output_tokens, model=model, prefix_id=prefix_id,
                    prefix_tokens=prefix_tokens,
                    prompt_token_ids=spec.prompt_token_ids if input_tokens == spec.input_tokens else None))
            pipeline = Pipeline(template=name, stages=stages, model=model or default_model,
                                branches=branches)
            pipelines.append(shared.setdefault(pipeline, pipeline))  # one object per distinct pipeline
    order = sorted(range(len(result)), key=lambda k: result[k].id)
    return [result[k] for k in order], [pipelines[k] for k in order]


def session_pipeline(model: str) -> Pipeline:
    """The pipeline of a session's turns: the built-in chat (prefill, decode) of ``model``."""
    return Pipeline(template="chat", stages=tuple(BUILTIN_TEMPLATES["chat"]["stages"]), model=model)


def decode_kind(request: RequestRecord) -> str:
    """What generation after the first token is called in reports: ``reason`` or ``decode``."""
    return "reason" if "reason" in request.pipeline else "decode"
