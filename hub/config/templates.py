"""Request pipeline templates: the stages of a request, its model and its token lengths.

A template is an ordered list of stages (``preprocess``, ``rag``,
``kv_retrieval``, ``prefill``, ``decode``, ``reason``, ``postprocess``), the
model it runs on, and its token-length distributions. Built-in templates
follow MIST Table III and HERMES Fig. 1; a scenario may define its own under
``templates:`` and mix them with ``workload.templates: {name: weight}``
(the requests drawn from them: :mod:`cosim.hub.sim.pipelines`).

Table III gives mean and median of each length; a lognormal with that mean and
median has sigma = sqrt(2 ln(mean / median)), which is what the templates use
(the article answers, whose mean is below the median, use a normal fitted to
the mean and the P95 instead).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from .frozen import FrozenModel
from .workload import FixedLength, LognormalLength, NormalLength, UniformLength

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


def resolve_templates(defined: Mapping[str, TemplateConfig]) -> dict[str, TemplateConfig]:
    """Built-in templates overlaid with the scenario's own."""
    templates = {name: TemplateConfig.model_validate(raw) for name, raw in BUILTIN_TEMPLATES.items()}
    templates.update(defined)
    return templates
