"""An interrupted ``cosim search --workers N`` stops its workers: after Ctrl-C or SIGTERM no process it
started survives it, and it exits at once with the signal's code rather than waiting for its jobs."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cosim.adapters.sdk.testing import LinearBackend
from cosim.v1 import types_pb2 as pb
from tests.scenarios.test_search import SPACE
from tests.waiting import wait_until

from .processes import running, session_members

COSIM = [sys.executable, "-m", "cosim"]


class Announcing(LinearBackend):
    """The linear backend, announcing each session it opens by a file in ``announce_dir`` named after
    the process it runs in: a search worker is under way."""

    def open_session(self, spec: pb.SessionSpec) -> tuple[int, int, int, int, float, float | None]:
        (Path(dict(spec.options)["announce_dir"]) / str(os.getpid())).touch()
        return super().open_session(spec)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_search_leaves_no_worker_running(tmp_path: Path, signum: int) -> None:
    space = copy.deepcopy(SPACE)
    space["goodput"]["requests"] = 500_000  # each deployment's runs would take many minutes
    announced = tmp_path / "announced"
    announced.mkdir()
    space["base"]["backends"]["lin"].update(python=f"{__name__}:{Announcing.__name__}")
    space["base"]["backends"]["lin"]["options"]["announce_dir"] = str(announced)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    search = subprocess.Popen([*COSIM, "search", str(path), "-o", str(tmp_path / "out"), "--workers", "2",
                               "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)

    def workers() -> list[int]:
        return [int(p.name) for p in announced.iterdir()]

    try:
        wait_until(lambda: len(workers()) == 2 or search.poll() is not None, 180, "two workers simulating")
        started = workers()
        assert len(started) == 2, f"the search ended first: {search.communicate(timeout=10)}"
        if signum == signal.SIGINT:
            os.killpg(search.pid, signum)  # Ctrl-C at a terminal: the whole foreground group gets it
        else:
            search.send_signal(signum)  # `kill`, a batch scheduler: the search alone gets it
        _, stderr = search.communicate(timeout=120)
    finally:
        if search.poll() is None:
            os.killpg(search.pid, signal.SIGKILL)
            search.wait()
    assert search.returncode == 128 + signum, stderr
    assert f"interrupted by {signal.Signals(signum).name}" in stderr and "Traceback" not in stderr, stderr
    assert not [pid for pid in started if running(pid)], "a worker outlived cosim search"
    # multiprocessing's resource tracker leaves on its own once the search is gone; nothing else remains.
    wait_until(lambda: not session_members(search.pid), 30, "the search's processes to go")


# A worker whose job is under way swallows a SIGTERM raised inside a GC callback, then must unwind anyway.
_SWALLOWED = """
import time, types
from cosim.hub.studies.search import pool
from cosim.hub.studies.interrupts import Terminated
pool._worker_signals()
pool._in_job = True
try:
    pool._swallowed(types.SimpleNamespace(exc_value=Terminated()))
except Terminated:
    print("raised inside the hook")
    raise SystemExit(1)
try:
    time.sleep(5)
except Terminated:
    print("unwound after the hook")
"""


def test_a_swallowed_sigterm_unwinds_the_job_after_the_hook_returns() -> None:
    """Delivered again from inside ``sys.unraisablehook``, the signal's handler would raise there, where
    Python ignores it ("Exception ignored in sys.unraisablehook") and the job carries on."""
    done = subprocess.run([sys.executable, "-c", _SWALLOWED], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "unwound after the hook", done.stdout + done.stderr
