"""The run folder: complete and deterministic, and kept when a backend fails part way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cosim
from cosim.adapters.sdk import Session
from cosim.adapters.sdk.testing import LinearBackend
from cosim.hub.errors import BackendError
from cosim.v1 import types_pb2 as pb
from tests.scenarios.helpers import scenario


class DiesAfter40Steps(LinearBackend):
    """Answers 40 step predictions, then fails every call as a crashed simulator would."""

    name = "flaky"
    calls = 0

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        DiesAfter40Steps.calls += 1
        if DiesAfter40Steps.calls > 40:
            raise RuntimeError("simulated crash")
        return super().predict(session, batch)


def workload(n: int) -> dict:
    return {"requests": n, "arrival": {"process": "poisson", "rate_per_s": 2000},
            "input_tokens": {"dist": "uniform", "low": 10, "high": 300},
            "output_tokens": {"dist": "uniform", "low": 2, "high": 20}}


def test_same_seed_gives_byte_identical_outputs(tmp_path: Path) -> None:
    config = scenario(workload=workload(50), per_token_ns=3, output={"plots": True})
    first = cosim.run(config, output_dir=tmp_path / "a").output_dir
    second = cosim.run(config, output_dir=tmp_path / "b").output_dir
    for name in ("requests.csv", "clients.csv", "trace.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    a, b = (json.loads((d / "summary.json").read_text()) for d in (first, second))
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b
    assert {p.name for p in (first / "plots").iterdir()} >= {"latency_cdf.png", "kv_usage.png"}
    assert cosim.run(config, overrides=["seed=2"]).summary["latency"] != a["latency"]


def test_failed_backend_keeps_partial_results_and_names_the_backend(tmp_path: Path) -> None:
    config = scenario(workload=workload(100))
    config["backends"]["lin"] = {"python": "tests.scenarios.test_run_folder:DiesAfter40Steps",
                                 "options": {"step_ns": 1000}}
    config["backends"]["lin"].pop("options")
    with pytest.raises(BackendError, match=r"client 'c0': backend 'lin' at 127\.0\.0\.1:\d+ .*simulated crash"):
        cosim.run(config, output_dir=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "simulated crash" in summary["error"]
    assert 0 < summary["requests"]["completed"] < 100
    rows = (tmp_path / "requests.csv").read_text().splitlines()
    assert len(rows) == 1 + 100
