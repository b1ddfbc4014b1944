"""A pool of local worker processes that never outlives what it was made for.

Main name: :func:`worker_pool`. A plain ``ProcessPoolExecutor`` block ends by waiting for the jobs
already running, so a Ctrl-C or SIGTERM to ``cosim search --workers N`` waited minutes, and a second
signal left the workers running with no parent. Here an exception out of the block (Ctrl-C, SIGTERM,
an error) stops the workers at once. A worker ignores Ctrl-C (the parent handles it and stops the
pool); on SIGTERM it stops the backends it started (``command:`` and ``image:`` ones run in sessions of
their own, so nothing else would) and exits.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from types import FrameType

from ...backends.launchers import stop_all

# How long a worker has to exit after SIGTERM before it is killed.
STOP_GRACE_S = 15.0


def _exit_stopping_backends(signum: int, frame: FrameType | None) -> None:
    stop_all()
    os._exit(128 + signum)  # at once: a raised SystemExit would be caught as the job's error


def _worker_signals() -> None:
    """A worker's initializer: Ctrl-C is the parent's to handle; SIGTERM stops its backends and exits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_stopping_backends)


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """``workers`` spawned processes (not forked: a child would inherit the parent's gRPC threads and
    locks). A normal exit waits for the jobs; an exception stops the workers and waits for them to go."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
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
