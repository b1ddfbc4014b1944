"""When a client's output tokens came out: tokens per instant, exact, in flat memory.

``vllm bench serve`` reports the most output tokens that arrived within one second of the run
(``max_output_tokens_per_s``). A step gives a token to each of its sequences at the same instant,
so :class:`TokenTimes` keeps one count per step end (or per delivery, for an API server), not one
per token. Past :attr:`TokenTimes.MAX_KEYS` instants the counts spill to a temporary file
(:class:`cosim.hub.sim.spill.SpillRows`), as the step rows do, so a long run's memory stays flat.
"""

from __future__ import annotations

import numpy as np

from .spill import INT64, SpillRows


class TokenTimes:
    """Output tokens per instant (ns) of one client or API server."""

    MAX_KEYS = 16_384

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self._spilled = SpillRows([("at_ns", INT64), ("tokens", INT64)])

    def add(self, at_ns: int, tokens: int) -> None:
        """``tokens`` came out at ``at_ns``."""
        counts = self._counts
        counts[at_ns] = counts.get(at_ns, 0) + tokens
        if len(counts) > self.MAX_KEYS:
            for at, n in counts.items():
                self._spilled.append(at, n)
            counts.clear()

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every count as (instants in ns, tokens at each); an instant may repeat."""
        spilled = self._spilled.columns()
        at = np.concatenate([spilled["at_ns"], np.fromiter(self._counts, dtype=np.int64, count=len(self._counts))])
        tokens = np.concatenate([spilled["tokens"],
                                 np.fromiter(self._counts.values(), dtype=np.int64, count=len(self._counts))])
        return at, tokens

    def close(self) -> None:
        """Removes the temporary file of spilled counts."""
        self._spilled.close()
