"""`python:` backends import from the config's folder and the working directory, with no PYTHONPATH."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import cosim
from cosim.hub.cli import main
from cosim.hub.errors import BackendError
from tests.scenarios.helpers import scenario

# A lab's backend: every step takes 7 us. Each test writes it under its own module name, so that
# one test's import cannot serve another's.
LAB = '''
from cosim.adapters.sdk import RuntimeBackend
from cosim.v1 import types_pb2 as pb


class Lab(RuntimeBackend):
    name = "lab"

    def predict(self, session, batch):
        return pb.StepTiming(duration_ns=7000)
'''


def write_config(folder: Path, reference: str) -> Path:
    """A one-client scenario timed by ``reference``, written as ``folder/run.yaml``."""
    config = scenario()
    config["backends"] = {"lab": {"python": reference}}
    config["clients"][0]["backend"] = "lab"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_module_beside_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = tmp_path / "study"
    config = write_config(study, "lab_beside_config:Lab")
    (study / "lab_beside_config.py").write_text(LAB)
    monkeypatch.chdir(tmp_path)  # not the config's folder
    result = cosim.run(config)
    assert result.summary["requests"]["completed"] == 4
    assert {r.finish_ns - r.first_token_ns for r in result.requests} == {2 * 7000}  # two decode steps


def test_a_module_in_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """As `cosim run` from the lab's folder, with the config elsewhere."""
    config = write_config(tmp_path / "configs", "lab_in_working_dir:Lab")
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "lab_in_working_dir.py").write_text(LAB)
    monkeypatch.chdir(tmp_path / "lab")
    assert main(["run", str(config), "--no-progress", "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "summary.json").exists()


def test_a_module_found_nowhere_names_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(tmp_path / "configs", "lab_nowhere:Lab")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BackendError) as err:
        cosim.run(config)
    text = str(err.value)
    assert "backend 'lab'" in text and "No module named 'lab_nowhere'" in text
    assert str(tmp_path / "configs") in text and str(tmp_path) in text
