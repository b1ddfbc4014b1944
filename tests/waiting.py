"""Waiting for an event, not for a number of seconds."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.1) -> None:
    """Returns once ``condition()`` holds; fails naming ``what`` after ``timeout_s`` (a generous bound:
    the wait ends at the event, not at the bound)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(poll_s)
