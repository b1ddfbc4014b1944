"""A pool of local worker processes that never outlives what it was made for.

Main name: :func:`worker_pool`. A plain ``ProcessPoolExecutor`` block ends by waiting for the jobs
already running, so a Ctrl-C or SIGTERM to ``cosim search --workers N`` waited minutes, and a second
signal left the workers running with no parent. Here an exception out of the block (Ctrl-C, SIGTERM,
an error) stops the workers at once. A worker ignores Ctrl-C (the parent handles it and stops the
pool); on SIGTERM, the parent's way to stop it, a job under way unwinds, so that the backends it
started are stopped (``command:`` and ``image:`` ones run in sessions of their own, so nothing else
would stop them), and the worker exits.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

from ..interrupts import Terminated

T = TypeVar("T")

# How long a worker has to exit after SIGTERM before it is killed.
STOP_GRACE_S = 15.0
# How long after a swallowed SIGTERM it is sent again (_swallowed): long enough to be out of the hook.
REDELIVER_S = 0.01

_in_job = False  # in a worker: whether a job runs (its backends to stop) or the worker waits for one


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if not _in_job:
        os._exit(128 + signum)
    raise Terminated()


def _swallowed(unraisable: Any) -> None:
    """``sys.unraisablehook`` of a worker: a Terminated raised where Python ignores exceptions (the
    signal arrived while a weakref or GC callback ran) is delivered again, to unwind the job after all.
    Shortly after, from another thread: sent from here, the handler would run before this hook returns,
    and raise inside it ("Exception ignored in sys.unraisablehook", the job carrying on)."""
    if isinstance(unraisable.exc_value, Terminated):
        again = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signal.SIGTERM))
        again.daemon = True
        again.start()
        return
    sys.__unraisablehook__(unraisable)


def _worker_signals() -> None:
    """A worker's initializer: Ctrl-C is the parent's to handle; SIGTERM ends the job, then the worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    sys.unraisablehook = _swallowed


def _run_job(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    global _in_job
    _in_job = True
    try:
        return fn(*args, **kwargs)
    except Terminated:  # the job's `finally` blocks have run: exit, rather than report it and take the next
        os._exit(128 + signal.SIGTERM)
    finally:
        _in_job = False


class _WorkerPool(ProcessPoolExecutor):
    """Runs each job through :func:`_run_job` (``map`` submits through ``submit``)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(_run_job, fn, *args, **kwargs)


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """``workers`` spawned processes (not forked: a child would inherit the parent's gRPC threads and
    locks). A normal exit waits for the jobs; an exception stops the workers and waits for them to go."""
    pool = _WorkerPool(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                       initializer=_worker_signals)
    try:
        yield pool
    except BaseException:
        processes = list((pool._processes or {}).values())  # no public handle before Python 3.14
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(STOP_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join()
        raise
    pool.shutdown(wait=True)
