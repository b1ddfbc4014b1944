"""Speculative decoding, as vLLM V1 runs it: drafts proposed after each sample, verified next step.

After a sequence samples, its drafter proposes ``k`` draft tokens. The next
step schedules them with the sequence's last token (``1 + k`` tokens, as
vLLM's ``num_tokens_with_spec``; a token budget too small for all of them
drops the last drafts), the target model verifies them in that one forward,
and the sequence advances by the drafts accepted plus one token (the target's
correction or bonus token). The KV of rejected drafts is discarded; their
blocks stay allocated for the next step's drafts.

Acceptance: ``acceptance_rate[i]`` is the probability that draft ``i + 1`` is
accepted given that every draft before it was (one number: the same for every
position), so ``P(accepted >= i) = rate[0] x ... x rate[i - 1]``. Each
sequence draws one uniform number per verification from the run's seeded
stream, in the order sequences reach the client, and accepts the drafts whose
survival probability exceeds it: a pure function of the sequence and its step,
so lookahead predicts exactly what the run does.

The drafter's own time: ``ngram`` proposes on the host (per sequence);
``draft_model`` runs a second model on the client's devices, timed by the same
backend; ``mtp`` runs the target's extra multi-token-prediction layers (a model
of the target's dimensions with ``mtp_layers`` layers), likewise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ...config.speculative import SpeculativeConfig


@dataclass(slots=True)
class SpecStats:
    """A client's speculative counts: verifications (a sequence's drafts checked in a step), drafts
    verified, and drafts accepted."""

    verifications: int = 0
    drafted: int = 0
    accepted: int = 0

    def summary(self) -> dict[str, float | int | None]:
        """Acceptance rate (accepted / drafted) and mean tokens per verification (accepted + 1)."""
        v = self.verifications
        return {"verifications": v, "drafted": self.drafted, "accepted": self.accepted,
                "acceptance_rate": self.accepted / self.drafted if self.drafted else None,
                "mean_accepted_length": (self.accepted + v) / v if v else None}


class Speculation:
    """A client's acceptance model and its stream of draws.

    Args:
        config: the client's speculative section.
        rng: the client's own generator (seeded from the run's seed).
    """

    def __init__(self, config: SpeculativeConfig, rng: np.random.Generator) -> None:
        self.k = config.num_speculative_tokens
        # P(accepted >= i) for i = 1..k, non-increasing
        self.survival = list(itertools.accumulate(config.rates, lambda a, b: a * b))
        self.rng = rng

    def draws(self, steps: int) -> np.ndarray:
        """Uniform numbers for a sequence's verifications (at most one per token it generates)."""
        return self.rng.random(max(1, steps))

    def accepted(self, u: float, drafts: int) -> int:
        """Drafts accepted of the first ``drafts`` proposed, for the draw ``u``."""
        survival = self.survival
        a = 0
        while a < drafts and u < survival[a]:
            a += 1
        return a
