"""A run folder whose writing is cut short never passes for a whole one (issue #36, item 13)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cosim.hub.errors import ScenarioError
from cosim.hub.metrics import run_folder, summary_json, write_run_folder
from cosim.hub.metrics.run_folder import require_complete
from cosim.hub.studies.compare import compare
from tests.unit.metrics.test_metrics import make_clients, make_requests, make_summary


def write(folder: Path) -> dict[str, Any]:
    clients, timelines = make_clients()
    summary = make_summary()
    write_run_folder(folder, summary, make_requests(), clients, timelines, plots=False)
    return summary


def interrupt(*_: object, **__: object) -> None:
    raise KeyboardInterrupt


def test_a_whole_folder_is_unchanged_and_accepted(tmp_path: Path) -> None:
    summary = write(tmp_path / "run")
    assert (tmp_path / "run" / "summary.json").read_text() == summary_json(summary)
    assert "error" not in json.loads(summary_json(summary))
    assert require_complete(tmp_path / "run") == json.loads(summary_json(summary))
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "clients.csv", "report.html", "requests.csv", "summary.json", "trace.json"]  # no temporary left


def test_an_interrupt_between_files_leaves_a_folder_readers_refuse(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "whole")
    write(tmp_path / "cut")  # a whole folder first: its summary must not survive an interrupted rewrite
    monkeypatch.setattr(run_folder, "write_clients_csv", interrupt)  # after requests.csv, before trace.json
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path / "cut")
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["error"] == "run folder incomplete: its writing stopped on KeyboardInterrupt"
    with pytest.raises(ScenarioError, match=f"^{tmp_path / 'cut'}: a partial run folder \\(run folder incomplete"):
        require_complete(tmp_path / "cut")
    with pytest.raises(ScenarioError, match=f"^{tmp_path / 'cut'}: a partial run folder"):
        compare([tmp_path / "whole", tmp_path / "cut"])


def test_an_interrupt_while_the_summary_is_written_leaves_none(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "run")
    monkeypatch.setattr(run_folder, "write_trace", interrupt)
    monkeypatch.setattr(run_folder.os, "replace", interrupt)  # the second Ctrl-C, in the summary's rename
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path / "run")
    assert not (tmp_path / "run" / "summary.json").exists()
    assert not (tmp_path / "run" / ".summary.json.tmp").exists()
    with pytest.raises(ScenarioError, match="not a run folder \\(no summary.json\\), or one whose writing was cut"):
        require_complete(tmp_path / "run")


def test_a_failed_runs_folder_is_refused_by_compare(tmp_path: Path) -> None:
    clients, timelines = make_clients()
    failed = {**make_summary(), "error": "interrupted by SIGTERM at t=1.000000s"}
    write_run_folder(tmp_path / "failed", failed, make_requests(), clients, timelines, plots=False)
    with pytest.raises(ScenarioError, match="a partial run folder \\(interrupted by SIGTERM"):
        compare([tmp_path / "failed"])
