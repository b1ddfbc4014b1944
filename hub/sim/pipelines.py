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
    kv_retrieval templates get a stored prefix (a share of the prompt). Each template's requests are
    worked out as columns; a spec is remade only where something changed (the common case: none).
    """
    names = list(weights)
    probabilities = np.array([weights[n] for n in names], dtype=float)
    picks = rng.choice(len(names), size=len(specs), p=probabilities / probabilities.sum())
    drawn_inputs = np.fromiter((spec.input_tokens for spec in specs), np.int64, len(specs))
    drawn_outputs = np.fromiter((spec.output_tokens for spec in specs), np.int64, len(specs))
    drawn_models = np.array([spec.model for spec in specs], dtype=object)
    result = list(specs)
    pipelines = np.empty(len(specs), dtype=object)
    for index, name in enumerate(names):
        template = templates[name]
        members = np.flatnonzero(picks == index)
        inputs, outputs = (drawn[members] if dist is None else
                           clip_lengths(sample_lengths(dist, len(members), rng), dist.min, dist.max,
                                        where=f"templates.{name}.{field}")
                           for field, dist, drawn in (("input_tokens", template.input_tokens, drawn_inputs),
                                                      ("output_tokens", template.output_tokens, drawn_outputs)))
        prefix_ids = rng.integers(template.kv_prefix.num_prefixes, size=len(members))
        branches = np.ones(len(members), dtype=np.int64)
        if "reason" in template.stages:
            outputs = np.maximum(1, np.rint(outputs * template.reasoning.factor).astype(np.int64))
            branches[outputs > 1] = template.reasoning.branches  # a path needs two tokens to run beside its siblings
            outputs = outputs * branches
        models = np.full(len(members), template.model, dtype=object) if template.model else drawn_models[members]
        retrieves = "kv_retrieval" in template.stages  # a stored prefix of its own: every spec changes
        changed = (inputs != drawn_inputs[members]) | (outputs != drawn_outputs[members]) | \
            (models != drawn_models[members]) | retrieves
        prefix_tokens = (inputs * template.kv_prefix.fraction).astype(np.int64)
        for j in np.flatnonzero(changed).tolist():  # the spec's other fields (trace row, LoRA, class) stay
            spec, input_tokens = specs[members[j]], int(inputs[j])
            result[members[j]] = dataclasses.replace(
                spec, input_tokens=input_tokens, output_tokens=int(outputs[j]), model=models[j],
                prefix_id=f"{name}/prefix-{prefix_ids[j]}" if retrieves else spec.prefix_id,
                prefix_tokens=int(prefix_tokens[j]) if retrieves else spec.prefix_tokens,
                prompt_token_ids=spec.prompt_token_ids if input_tokens == spec.input_tokens else None)
        pipelines[members] = _shared(name, tuple(template.stages),
                                     [model or default_model for model in models.tolist()], branches.tolist())
    return result, pipelines.tolist()


def _shared(template: str, stages: tuple[str, ...], models: list[str], branches: list[int]) -> list[Pipeline]:
    """Each request's pipeline, one object per distinct pipeline (a million requests share a few)."""
    distinct: dict[tuple[str, int], Pipeline] = {}
    return [distinct.get(key) or distinct.setdefault(key, Pipeline(template, stages, *key))
            for key in zip(models, branches)]


def session_pipeline(model: str) -> Pipeline:
    """The pipeline of a session's turns: the built-in chat (prefill, decode) of ``model``."""
    return Pipeline(template="chat", stages=tuple(BUILTIN_TEMPLATES["chat"]["stages"]), model=model)


def decode_kind(request: RequestRecord) -> str:
    """What generation after the first token is called in reports: ``reason`` or ``decode``."""
    return "reason" if "reason" in request.pipeline else "decode"
