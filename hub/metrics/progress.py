"""A terminal progress bar for long runs: :class:`ProgressBar` (tqdm underneath)."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Self, TextIO

from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs in the venv

from .stats import NS_PER_S


class ProgressBar:
    """Completed/total requests and simulated time, on stderr when it is a terminal.

    Args:
        total: requests the run will submit (None if unknown).
        enabled: force on or off; by default on only when ``stream`` is a TTY.
        stream: where to draw (stderr by default).
    """

    def __init__(self, total: int | None, *, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        out = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(out, "isatty", lambda: False)())
        self.is_enabled = enabled
        self._bar = tqdm(total=total, desc="requests", unit="req", file=out, disable=not enabled,
                         dynamic_ncols=True, leave=False, mininterval=0.2)

    def update(self, completed: int, sim_time_ns: int) -> None:
        """Shows ``completed`` requests done at simulated time ``sim_time_ns``."""
        if not self.is_enabled:
            return
        self._bar.n = completed
        self._bar.set_postfix_str(f"sim {sim_time_ns / NS_PER_S:.3f}s", refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        """Removes the bar from the terminal."""
        self._bar.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
