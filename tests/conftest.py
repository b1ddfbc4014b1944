"""Settings for the whole suite."""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (``timeout``, a cancelled CI job) ends the session as Ctrl-C does, so that fixtures'
    teardowns run: no compose stack, container or backend process outlives the tests that started it."""
    signal.signal(signal.SIGTERM, _interrupt)
