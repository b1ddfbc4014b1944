"""SIGTERM handled like Ctrl-C: an exception in the main thread, so that every ``finally`` runs.

Python turns SIGINT into KeyboardInterrupt; SIGTERM (``kill``, ``docker stop``,
a batch scheduler's time limit) ends the process at once by default, leaving
``command:`` backends orphaned and no partial run folder. Inside
:func:`sigterm_raises`, SIGTERM raises :class:`Terminated`, a KeyboardInterrupt,
so the paths that handle Ctrl-C handle it too; :func:`exit_code` gives the
shell's code for either (130, 143). Inside :func:`held_between_events`, either
waits for the end of the event being handled, so that a partial run's records are
whole (a second one does not wait: an event stuck in a backend call ends at once).

A run in another thread (a hub's run, whose submitter may go away) has no signals:
:class:`RunStop` hands it a :class:`Stopped`, a KeyboardInterrupt too, from any
thread. Every event loop of the run (the run, and its prediction intervals'
reruns) holds it between two events, so the run writes its partial folder and
stops its backends as for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from cosim_core import StopFlag

from ..errors import CosimError


class Interrupted(CosimError):
    """What a run interrupted by Ctrl-C or SIGTERM reports in its summary.json (``error``)."""


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM."""

    signum = signal.SIGTERM


class Stopped(KeyboardInterrupt):
    """A run stopped from another thread (:class:`RunStop`); its message says why."""


def signal_name(interrupt: BaseException) -> str:
    """``SIGTERM`` for :class:`Terminated`, ``SIGINT`` for any other KeyboardInterrupt."""
    return signal.Signals(getattr(interrupt, "signum", signal.SIGINT)).name


def interruption(interrupt: BaseException) -> str:
    """What stopped a run, for its error: ``interrupted by SIGINT``, or a :class:`Stopped`'s reason."""
    return f"stopped: {interrupt}" if isinstance(interrupt, Stopped) else f"interrupted by {signal_name(interrupt)}"


def exit_code(interrupt: BaseException) -> int:
    """128 + the signal's number, as a shell reports a process the signal ended."""
    return 128 + int(getattr(interrupt, "signum", signal.SIGINT))


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread (elsewhere: no change)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class HeldInterrupt:
    """A Ctrl-C or SIGTERM held by :func:`held_between_events` (``interrupt``: None until one comes);
    ``flag`` is set with it, for the kernel to stop at (:meth:`Kernel.run`'s ``flag``)."""

    def __init__(self) -> None:
        self.interrupt: KeyboardInterrupt | None = None
        self.flag = StopFlag()

    def hold(self, interrupt: KeyboardInterrupt) -> None:
        """Holds ``interrupt`` (unless one is held already) and stops the event loop before its next event."""
        self.interrupt = self.interrupt or interrupt
        self.flag.set()


class RunStop:
    """Stops a run from another thread: :meth:`stop` hands a :class:`Stopped` to each event loop the
    run holds (``held_between_events(stop)``), between two events, and to every one it starts later.
    Holding it costs the event loop nothing: the kernel reads the held interrupt's flag natively."""

    def __init__(self) -> None:
        self.stopped: Stopped | None = None
        self._held: list[HeldInterrupt] = []
        self._lock = threading.Lock()

    def stop(self, reason: str) -> None:
        """Stops the run (the first reason counts); callable from any thread, at any time."""
        with self._lock:
            if self.stopped is None:
                self.stopped = Stopped(reason)
            for held in self._held:
                held.hold(self.stopped)

    @contextlib.contextmanager
    def holding(self, held: HeldInterrupt) -> Iterator[None]:
        """Within the block, :meth:`stop` reaches ``held`` (at once if it came before)."""
        with self._lock:
            self._held.append(held)
            if self.stopped is not None:
                held.hold(self.stopped)
        try:
            yield
        finally:
            with self._lock:
                self._held.remove(held)


@contextlib.contextmanager
def held_between_events(stop: RunStop | None = None) -> Iterator[HeldInterrupt]:
    """Within the block, Ctrl-C and SIGTERM (where they would raise: Python's Ctrl-C handler,
    :func:`sigterm_raises`) are held in the yielded object for the event loop to raise between two
    events; a second signal before then raises at once. Elsewhere than the main thread the signals
    change nothing. ``stop`` (any thread) is held likewise."""
    held = HeldInterrupt()
    with stop.holding(held) if stop is not None else contextlib.nullcontext():
        if threading.current_thread() is not threading.main_thread():
            yield held
            return
        with _signals_held(held):
            yield held


@contextlib.contextmanager
def _signals_held(held: HeldInterrupt) -> Iterator[None]:
    def hold(signum: int, frame: FrameType | None) -> None:
        interrupt = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        if held.interrupt is not None:
            raise interrupt
        held.hold(interrupt)

    raising: dict[int, Any] = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _raise_terminated}
    previous = {signum: signal.getsignal(signum) for signum in raising}
    for signum, handler in raising.items():
        if previous[signum] is handler:
            signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is raising[signum]:
                signal.signal(signum, handler)
