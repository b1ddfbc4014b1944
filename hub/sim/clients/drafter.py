"""The time a speculative drafter adds to each step (see :mod:`cosim.hub.sim.scheduling.speculative`).

After the target model's forward, every sequence that sampled gets ``k`` new
drafts (vLLM proposes them in the same step, ``propose_draft_token_ids``):

- ``ngram``: prompt lookup on the host, ``propose_ns_per_seq`` per sequence;
- ``draft_model`` and ``mtp``: a drafter model on the client's devices, timed
  by the client's own backend in a session of its own: a first forward over
  the tokens the step computed (the drafter keeps its KV in step with the
  target's), then ``k - 1`` forwards of one token per proposing sequence.
"""

from __future__ import annotations

from ...config.speculative import SpeculativeConfig
from ..ports import StepTimes
from ..scheduling import ScheduledBatch


class Drafter:
    """Times one client's proposals.

    Args:
        config: the client's speculative section.
        session: the drafter model's runtime session (``draft_model``, ``mtp``); None for ``ngram``.
    """

    def __init__(self, config: SpeculativeConfig, session: StepTimes | None = None) -> None:
        self.k, self.per_seq_ns = config.num_speculative_tokens, config.propose_ns_per_seq
        self.session = session

    def propose_ns(self, batch: ScheduledBatch, now_ns: int) -> int:
        """Time of the proposals made after ``batch``'s forward."""
        proposing = [(seq, num, computed) for seq, num, computed in zip(batch.seqs, batch.num_new, batch.context)
                     if num >= seq.num_tokens - computed]  # every token computed: it samples, then proposes
        if not proposing:
            return 0
        session = self.session
        if session is None:
            return self.per_seq_ns * len(proposing)
        total = session.step_time(batch.num_new, batch.context, now_ns=now_ns).duration_ns
        ones = [1] * len(proposing)
        for j in range(1, self.k):
            contexts = [computed + num + j - 1 for _, num, computed in proposing]
            total += session.step_time(ones, contexts, now_ns=now_ns).duration_ns
        return total
