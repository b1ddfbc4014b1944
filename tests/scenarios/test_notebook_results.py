"""Notebook-friendly results: DataFrames of a run, and ``cosim run --json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

import cosim
from cosim.hub.cli import main
from tests.scenarios.helpers import scenario


def two_clients() -> dict:
    """Linear backend, two clients; every time a hand-countable multiple of a microsecond."""
    clients = [{"name": n, "model": "m", "backend": "lin", "hardware": {"device": "h"}} for n in ("c0", "c1")]
    return scenario(clients=clients, step_ns=1000, slo={"ttft_s": {"p90": 0.5}})


def test_requests_df_has_each_time_in_seconds_and_milliseconds() -> None:
    pytest.importorskip("pandas")
    result = cosim.run(two_clients())
    frame = result.requests_df()
    assert list(frame["id"]) == [0, 1, 2, 3]
    # 4 requests of 100 prompt and 3 output tokens, round robin over two clients: each client
    # prefills its two together (1 us), then decodes them twice (1 us each)
    assert list(frame["ttft_s"]) == [1e-6] * 4 and list(frame["ttft_ms"]) == [1e-3] * 4
    assert list(frame["e2e_ms"]) == [3e-3] * 4
    assert list(frame["prefill_client"]) == ["c0", "c1", "c0", "c1"]
    columns = list(frame.columns)
    for name in ("arrival", "ttft", "tpot", "e2e", "queue", "decode_end"):
        assert columns.index(f"{name}_ms") == columns.index(f"{name}_s") + 1, name
    assert not any(c.endswith("per_ms") for c in columns)


def test_summary_df_has_a_row_for_the_run_and_each_client() -> None:
    pytest.importorskip("pandas")
    result = cosim.run(two_clients())
    frame = result.summary_df()
    assert list(frame.index) == ["run", "c0", "c1"]
    summary = result.summary
    assert frame.loc["run", "latency.ttft_s.p90"] == summary["latency"]["ttft_s"]["p90"] == 1e-6
    assert frame.loc["run", "latency.ttft_ms.p90"] == pytest.approx(1e-3)
    assert frame.loc["run", "slo.ttft_ms.p90.target"] == 500.0
    assert frame.loc["run", "throughput.requests_per_s"] == summary["throughput"]["requests_per_s"]
    assert "throughput.requests_per_ms" not in frame.columns
    assert frame.loc["c1", "requests.completed"] == 2 and frame.loc["c1", "busy_ms"] == pytest.approx(3e-3)


def test_a_missing_pandas_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    result = cosim.run(two_clients())
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    for call in (result.requests_df, result.summary_df):
        with pytest.raises(ImportError, match=r"pip install 'cosim\[pandas\]'"):
            call()


def test_run_json_prints_only_the_summary_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "scenario.yaml"
    config.write_text(yaml.safe_dump(two_clients()))
    out = tmp_path / "out"
    assert main(["run", str(config), "-o", str(out), "--json", "--log-events", "5"]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)  # the whole of stdout is one JSON document
    assert printed == json.loads((out / "summary.json").read_text())
    assert captured.out == (out / "summary.json").read_text()
    assert printed["latency"]["ttft_s"]["p90"] == 1e-6
    assert "arrival request 0" in captured.err  # the events went to stderr
