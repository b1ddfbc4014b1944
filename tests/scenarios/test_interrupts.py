"""Ctrl-C and SIGTERM stop a run between two events (hub/studies/interrupts.py held_between_events), so that
the partial run folder holds every request once and whole."""

from __future__ import annotations

import csv
import os
import signal
import threading
from pathlib import Path

import pytest

import cosim
from cosim.hub.sim.records import RequestRecord
from cosim.hub.studies.interrupts import RunStop, Stopped, Terminated, sigterm_raises
from tests.scenarios.helpers import scenario

REQUESTS = 400


def config() -> dict:
    workload = {"requests": REQUESTS, "arrival": {"process": "poisson", "rate_per_s": 2000},
                "input_tokens": {"dist": "uniform", "low": 16, "high": 300},
                "output_tokens": {"dist": "uniform", "low": 2, "high": 40}}
    return scenario(step_ns=100_000, per_token_ns=50, workload=workload, output={"plots": False})


@pytest.mark.parametrize(("signum", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)])
def test_a_signal_inside_an_event_stops_the_run_after_it(tmp_path: Path, signum: int,
                                                         raised: type[BaseException]) -> None:
    seen: list[int] = []

    def on_request(request: RequestRecord) -> None:
        if len(seen) == 50:
            os.kill(os.getpid(), signum)  # delivered here, in the middle of the event
        seen.append(request.id)  # ... which still runs to its end

    with sigterm_raises(), pytest.raises(raised):
        cosim.run(config(), output_dir=tmp_path / "run", on_request=on_request)
    assert len(seen) >= 51  # the request finishing when the signal came, and any others of its step
    with (tmp_path / "run" / "requests.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    ids = [int(r["id"]) for r in rows]
    assert ids == list(range(REQUESTS))  # every request once: finished, in flight or not yet arrived
    finished = {int(r["id"]) for r in rows if r["e2e_s"]}
    assert finished == set(seen) and len(finished) < REQUESTS
    assert "interrupted by" in (tmp_path / "run" / "summary.json").read_text()


def test_a_run_stop_from_another_thread_stops_a_run_in_a_thread_after_its_event(tmp_path: Path) -> None:
    """A hub's run (a worker thread, no signals) stopped from the RPC's thread: the same partial folder."""
    stop = RunStop()
    seen: list[int] = []

    def on_request(request: RequestRecord) -> None:
        if len(seen) == 50:
            waker = threading.Thread(target=stop.stop, args=("the submitter went away",))
            waker.start()
            waker.join()  # stopped in the middle of the event, from elsewhere
        seen.append(request.id)

    outcome: list[BaseException] = []

    def worker() -> None:
        try:
            cosim.run(config(), output_dir=tmp_path / "run", on_request=on_request, stop=stop)
        except BaseException as err:  # noqa: BLE001 - examined below
            outcome.append(err)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(120)
    assert len(outcome) == 1 and isinstance(outcome[0], Stopped) and str(outcome[0]) == "the submitter went away"
    with (tmp_path / "run" / "requests.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["id"]) for r in rows] == list(range(REQUESTS))
    assert {int(r["id"]) for r in rows if r["e2e_s"]} == set(seen) and len(seen) < REQUESTS
    summary = (tmp_path / "run" / "summary.json").read_text()
    assert "stopped: the submitter went away at t=" in summary


def test_a_run_stopped_before_it_starts_stops_at_its_first_event(tmp_path: Path) -> None:
    stop = RunStop()
    stop.stop("gone before the run")
    with pytest.raises(Stopped):
        cosim.run(config(), output_dir=tmp_path / "run", stop=stop)
    assert '"completed": 0' in (tmp_path / "run" / "summary.json").read_text()
