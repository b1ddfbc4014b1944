"""The time a speculative drafter adds to each step (see :mod:`cosim.hub.sim.scheduling.speculative`).

After the target model's forward, every sequence that sampled gets ``k`` new
drafts (vLLM proposes them in the same step, ``propose_draft_token_ids``):

- ``ngram``: prompt lookup on the host, ``propose_ns_per_seq`` per sequence;
- ``draft_model`` and ``mtp``: a drafter model on the client's devices, timed
  by the client's own backend in a session of its own: a first forward over
  the tokens the step computed (the drafter keeps its KV in step with the
  target's), then ``k - 1`` forwards of one token per proposing sequence
  (:meth:`Drafter.forwards`).

A step's ``k`` forwards are known once it is formed, so a miss in the
drafter's timing cache asks for all of them in one call, with the forwards of
the steps the client predicts next (``ahead``): a speculating client costs
about one call per burst of arrivals, as its target model does, instead of
up to ``k`` a step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from collections.abc import Sequence as Seq

from ...config.speculative import SpeculativeConfig
from ..ports import StepTimes
from ..scheduling import ScheduledBatch, Signature

# Up to n signatures of the drafter's forwards predicted to follow (n: the timing cache's hint).
DraftsAhead = Callable[[int], Seq[Signature]]


class Drafter:
    """Times one client's proposals.

    Args:
        config: the client's speculative section.
        session: the drafter model's runtime session (``draft_model``, ``mtp``); None for ``ngram``.
    """

    def __init__(self, config: SpeculativeConfig, session: StepTimes | None = None) -> None:
        self.k, self.per_seq_ns = config.num_speculative_tokens, config.propose_ns_per_seq
        self.session = session

    def forwards(self, batch: ScheduledBatch) -> list[Signature]:
        """The signatures of the drafter model's forwards after ``batch``'s (formed, not yet applied):
        one over the tokens the step computed, then ``k - 1`` of one token per proposing sequence;
        none when no sequence proposes."""
        proposing = [(num, computed) for seq, num, computed in zip(batch.seqs, batch.num_new, batch.context)
                     if num >= seq.num_tokens - computed]  # every token computed: it samples, then proposes
        if not proposing:
            return []
        ones = (1,) * len(proposing)
        return [(tuple(batch.num_new), tuple(batch.context)),
                *[(ones, tuple([computed + num + j - 1 for num, computed in proposing])) for j in range(1, self.k)]]

    def propose_ns(self, batch: ScheduledBatch, now_ns: int, ahead: DraftsAhead | None = None) -> int:
        """Time of the proposals made after ``batch``'s forward. With a drafter model, the first of
        its forwards the timing cache misses carries the step's later ones, and ``ahead(n)``: the
        forwards of the steps predicted to follow."""
        session = self.session
        if session is None:
            return self.per_seq_ns * sum(num >= seq.num_tokens - computed
                                         for seq, num, computed in zip(batch.seqs, batch.num_new, batch.context))
        forwards = self.forwards(batch)
        total = 0
        for j, (new_tokens, context_tokens) in enumerate(forwards):
            along = functools.partial(_along, forwards[j + 1:], ahead)
            total += session.step_time(new_tokens, context_tokens, now_ns=now_ns, ahead=along).duration_ns
        return total


def _along(later: list[Signature], ahead: DraftsAhead | None, depth: int) -> list[Signature]:
    """What rides along a drafter's miss: the step's ``later`` forwards, then up to ``depth`` predicted."""
    return [*later, *(ahead(depth) if ahead is not None else ())]
