"""Ctrl-C and SIGTERM stop a run between two events (hub/studies/interrupts.py held_between_events), so that
the partial run folder holds every request once and whole."""

from __future__ import annotations

import csv
import os
import signal
from pathlib import Path

import pytest

import cosim
from cosim.hub.sim.records import RequestRecord
from cosim.hub.studies.interrupts import Terminated, sigterm_raises
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
