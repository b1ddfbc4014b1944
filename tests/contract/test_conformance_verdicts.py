"""The conformance command prints a PASS/FAIL verdict per check, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cosim.adapters.sdk.testing import main

LAB = '''
from cosim.adapters.sdk import RuntimeBackend
from cosim.v1 import types_pb2 as pb


class Negative(RuntimeBackend):
    name = "negative"

    def predict(self, session, batch):
        return pb.StepTiming(duration_ns=-5)


class Crashes(RuntimeBackend):
    name = "crashes"

    def predict(self, session, batch):
        raise KeyError("oops")


class NeedsALicence(RuntimeBackend):
    name = "licensed"

    def __init__(self):
        raise RuntimeError("no licence file")

    def predict(self, session, batch):
        return pb.StepTiming()
'''


@pytest.fixture
def lab_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lab's module in the working directory (imported from there, as `python -m` would)."""
    (tmp_path / "conformance_lab.py").write_text(LAB)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def verdicts(out: str) -> dict[str, str]:
    return {line.split()[1].rstrip(":"): line.split()[0] for line in out.splitlines()
            if line.startswith(("PASS", "FAIL", "SKIP"))}


def test_a_passing_backend_gets_a_pass_per_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cosim.adapters.sdk.testing:LinearBackend"]) == 0
    out = capsys.readouterr().out
    assert verdicts(out) == dict.fromkeys(["describe", "health", "reflection", "predict_steps",
                                           "predict_steps_stream", "errors", "close_session"], "PASS")
    assert out.splitlines()[-1] == "7 passed, 0 failed"


def test_a_failing_check_is_a_fail_with_its_reason_and_the_others_still_run(
        lab_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance_lab:Negative"]) == 1
    out = capsys.readouterr().out
    assert verdicts(out) == {"describe": "PASS", "health": "PASS", "reflection": "PASS", "predict_steps": "FAIL",
                             "predict_steps_stream": "FAIL", "errors": "PASS", "close_session": "PASS"}
    assert "FAIL  predict_steps: a call answered INTERNAL: backend 'negative' returned duration_ns=-5" in out
    assert out.splitlines()[-1] == "5 passed, 2 failed"


def test_a_class_that_cannot_load_is_one_fail(lab_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance_lab:NeedsALicence"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "FAIL  load: conformance_lab:NeedsALicence() raised RuntimeError: no licence file", "0 passed, 1 failed"]
    assert main(["conformance_lab:Missing"]) == 1
    assert "FAIL  load: cannot load backend 'conformance_lab:Missing'" in capsys.readouterr().out


def test_nothing_at_the_address_is_a_fail(capsys: pytest.CaptureFixture[str]) -> None:
    from cosim.hub.backends import free_port

    assert main(["--address", f"127.0.0.1:{free_port()}"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL  reflection: listing the services at 127.0.0.1:") and "UNAVAILABLE" in out


def test_the_command_prints_no_traceback_for_a_crashing_backend(lab_dir: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "cosim.adapters.sdk.testing", "conformance_lab:Crashes"],
                          cwd=lab_dir, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert "FAIL  predict_steps: a call answered INTERNAL: backend 'crashes' failed in PredictSteps: " \
           "KeyError: 'oops' at conformance_lab.py:" in proc.stdout
