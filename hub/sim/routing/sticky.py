"""``sticky``: session affinity (docs/sessions.md).

A session's turns go to the client its first turn went to, unless it is gone or over
``sticky_max_load``; then ``sticky_base`` decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...config.sections import RouterConfig
from ..records import RequestRecord
from .router import C, Router, router_class


class Sticky(Router):
    """A session's turn goes where its session's last turn went (among the candidates, a client it is
    pinned to), unless that client holds more than ``sticky_max_load`` x (the least loaded
    candidate's sequences + 1); otherwise, and for its first turn, ``sticky_base`` decides, and the
    session is pinned to that client in place of the one it leaves."""

    def __init__(self, config: RouterConfig, rng: np.random.Generator,
                 clock: Callable[[], int] = lambda: 0) -> None:
        super().__init__(config, rng, clock)
        self.base = router_class(config.sticky_base)(config, rng, clock)
        self._pins: dict[int, list[str]] = {}  # session -> the clients its turns go to

    def choose(self, candidates: Sequence[C], request: RequestRecord) -> C:
        return self.pick(candidates, request)  # a lone candidate is pinned too

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        pinned = self._pins.get(request.session) if request.session >= 0 else None
        if pinned:
            here = [c for c in candidates if c.name in pinned]
            if here:
                bound = self.config.sticky_max_load * (min(c.load("stages") for c in candidates) + 1)
                if here[0].load("stages") <= bound:
                    return here[0]
                pinned.remove(here[0].name)
        choice = self.base.choose(candidates, request)
        if request.session >= 0:
            self._pins.setdefault(request.session, []).append(choice.name)
        return choice

    def end_session(self, session: int) -> None:
        self._pins.pop(session, None)
