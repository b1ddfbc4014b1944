"""Request pipelines: the requests drawn from the scenario's templates (:mod:`cosim.hub.config.templates`).

Each request gets a template by the workload's weights, its lengths from the template's
distributions where it has its own, and the :class:`Pipeline` the coordinator moves it along.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config.templates import BUILTIN_TEMPLATES, TemplateConfig
from .records import RequestRecord
from .workload import RequestSpecs
from .workload.sampling import clip_lengths, sample_lengths


@dataclass(frozen=True, slots=True)
class Pipeline:
    """What the coordinator needs of a request's template."""

    template: str
    stages: tuple[str, ...]
    model: str
    branches: int = 1


def assign_pipelines(specs: RequestSpecs, weights: Mapping[str, float], templates: Mapping[str, TemplateConfig],
                     rng: np.random.Generator, default_model: str) -> tuple[RequestSpecs, list[Pipeline]]:
    """Draws a template per request (by weight) and re-draws lengths from its distributions.

    Arrival times are kept; requests of a template with its own lengths get new
    ones, reasoning templates multiply the output by their factor, and
    kv_retrieval templates get a stored prefix (a share of the prompt). A request's other fields
    (its trace row, LoRA adapter, class) stay as drawn; its prompt's token ids only with its input.
    """
    names = list(weights)
    probabilities = np.array([weights[n] for n in names], dtype=float)
    picks = rng.choice(len(names), size=len(specs), p=probabilities / probabilities.sum())
    ints = {name: column.copy() for name, column in specs.ints.items()}
    objects = {name: list(column) for name, column in specs.objects.items()}
    pipelines = np.empty(len(specs), dtype=object)
    for index, name in enumerate(names):
        template = templates[name]
        members = np.flatnonzero(picks == index)
        for field, dist in (("input_tokens", template.input_tokens), ("output_tokens", template.output_tokens)):
            if dist is not None:
                ints[field][members] = clip_lengths(sample_lengths(dist, len(members), rng), dist.min, dist.max,
                                                    where=f"templates.{name}.{field}")
        prefix_ids = rng.integers(template.kv_prefix.num_prefixes, size=len(members))
        branches = np.ones(len(members), dtype=np.int64)
        if "reason" in template.stages:
            scaled = np.rint(ints["output_tokens"][members] * template.reasoning.factor).astype(np.int64)
            outputs = np.maximum(1, scaled)
            branches[outputs > 1] = template.reasoning.branches  # a path needs two tokens to run beside its siblings
            ints["output_tokens"][members] = outputs * branches
        if "kv_retrieval" in template.stages:
            ints["prefix_tokens"][members] = ints["input_tokens"][members] * template.kv_prefix.fraction
            _assign(objects, "prefix_id", members, [f"{name}/prefix-{k}" for k in prefix_ids.tolist()], len(specs))
        if template.model:
            _assign(objects, "model", members, [template.model] * len(members), len(specs))
        drawn = objects.get("model")
        models = [drawn[i] or default_model for i in members.tolist()] if drawn else [default_model] * len(members)
        pipelines[members] = _shared(name, tuple(template.stages), models, branches.tolist())
    if "prompt_token_ids" in objects:  # a prompt of new length has none
        for i in np.flatnonzero(ints["input_tokens"] != specs.ints["input_tokens"]).tolist():
            objects["prompt_token_ids"][i] = None
    return RequestSpecs(ints, objects), pipelines.tolist()


def _assign(objects: dict[str, list[Any]], name: str, members: np.ndarray, values: list[Any], n: int) -> None:
    """Sets column ``name`` of ``members`` to ``values`` (a column of Nones where there was none)."""
    column = objects.setdefault(name, [None] * n)
    for i, value in zip(members.tolist(), values, strict=True):
        column[i] = value


def _shared(template: str, stages: tuple[str, ...], models: list[str], branches: list[int]) -> list[Pipeline]:
    """Each request's pipeline, one object per distinct pipeline (a million requests share a few)."""
    distinct: dict[tuple[str, int], Pipeline] = {}
    return [distinct.get(key) or distinct.setdefault(key, Pipeline(template, stages, *key))
            for key in zip(models, branches)]


def distinct_pipelines(pipelines: Sequence[Pipeline]) -> tuple[np.ndarray, list[Pipeline]]:
    """The few pipeline objects that the requests share, and each request's index among them (an
    int32 column)."""
    numbers: dict[int, int] = {}  # by object: equal pipelines are the same object where it matters
    index = np.fromiter((numbers.setdefault(id(p), len(numbers)) for p in pipelines), np.int32, len(pipelines))
    return index, [pipelines[first] for first in np.unique(index, return_index=True)[1].tolist()]


def session_pipeline(model: str) -> Pipeline:
    """The pipeline of a session's turns: the built-in chat (prefill, decode) of ``model``."""
    return Pipeline(template="chat", stages=tuple(BUILTIN_TEMPLATES["chat"]["stages"]), model=model)


def decode_kind(request: RequestRecord) -> str:
    """What generation after the first token is called in reports: ``reason`` or ``decode``."""
    return "reason" if "reason" in request.pipeline else "decode"
