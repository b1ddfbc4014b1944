"""A client's speculative decoding section (vLLM's ``speculative_config``).

What it does to the steps: :mod:`cosim.hub.sim.scheduling.speculative`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .frozen import FrozenModel

# vLLM's n-gram proposer (numba, on the host): "For ShareGPT benchmark with 5K requests, the cumulative
# overhead reduces from 54.3 sec to 1.9 sec" (vLLM PR #13365, V1 "Optimize N-gram matching with Numba").
# Over about 5,000 x 200 = 1.0M proposals (ShareGPT's mean output is about 200 tokens, one proposal per
# step per sequence at most): 1.9 us per sequence per step.
NGRAM_PROPOSE_SEQ_NS = 1_900


class SpeculativeConfig(FrozenModel):
    """A client's speculative decoding (vLLM's ``speculative_config``)."""

    method: Literal["ngram", "draft_model", "mtp"] = Field(
        description="who proposes drafts: ngram (prompt lookup, host only), draft_model (a smaller model on "
                    "the same devices), mtp (the target's multi-token-prediction layers)")
    num_speculative_tokens: int = Field(gt=0, le=64, description="drafts proposed per sequence per step (k)")
    acceptance_rate: float | list[float] = Field(
        description="probability that a draft is accepted given the ones before it were: one for every "
                    "position, or one per position (k values)")
    draft_model: str | None = Field(None, description="draft_model: a key of `models`")
    mtp_layers: int = Field(1, gt=0, le=16, description="mtp: layers of the multi-token-prediction module")
    propose_ns_per_seq: int = Field(NGRAM_PROPOSE_SEQ_NS, ge=0, le=10**9,
                                    description="ngram: host time of one proposal, ns (docs/speculative.md)")

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        rates = self.rates
        if len(rates) != self.num_speculative_tokens:
            raise ValueError(f"acceptance_rate has {len(rates)} values for {self.num_speculative_tokens} "
                             "speculative tokens; give one, or one per position")
        if any(not 0.0 <= r <= 1.0 for r in rates):
            raise ValueError(f"acceptance rates are probabilities, in [0, 1]; got {rates}")
        if (self.method == "draft_model") != (self.draft_model is not None):
            raise ValueError("draft_model names the draft model's key of `models`, for method draft_model only")
        return self

    @property
    def rates(self) -> list[float]:
        rate = self.acceptance_rate
        return [rate] * self.num_speculative_tokens if isinstance(rate, float | int) else list(rate)
