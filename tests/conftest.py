"""Settings for the whole suite."""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (``timeout``, a cancelled CI job) ends the session as Ctrl-C does, so that fixtures'
    teardowns run: no compose stack, container or backend process outlives the tests that started it.

    SIGINT gets Python's own handler back: a shell starts a background job (``make test &``, a CI
    runner without job control) with SIGINT ignored, which its children inherit, so the tests of
    Ctrl-C would find it ignored in the process under test and in every process it starts."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
