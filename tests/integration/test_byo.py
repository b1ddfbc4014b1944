"""Bring your own simulator: examples/byo/ plugged into runs by address, command, python and image."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import cosim
from cosim.adapters.sdk.testing import check_runtime_backend
from cosim.hub.backends import free_port, launch_command
from tests.paths import REPO

PYTHON_DIR = REPO / "examples" / "byo" / "python"
RUST_DIR = REPO / "examples" / "byo" / "rust"
SMALL = ("workload.requests=30", "output.plots=false")


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # The example configs name their commands relative to the repository root.
    monkeypatch.chdir(REPO)


def check(result: cosim.RunResult, backend: str, fidelity: str) -> None:
    assert result.summary["requests"]["completed"] == 30
    assert result.summary["clients"]["c0"]["backend"] == backend
    assert result.summary["clients"]["c0"]["fidelity"] == fidelity


def test_python_example_is_short_and_conformant() -> None:
    assert len((PYTHON_DIR / "lab_backend.py").read_text().splitlines()) < 40
    launched = launch_command("lab", ["{python}", str(PYTHON_DIR / "lab_backend.py"), "--port", "{port}"])
    try:
        assert "predict_steps" in check_runtime_backend(launched.address)
    finally:
        launched.stop()


def test_python_example_by_command(tmp_path: Path) -> None:
    check(cosim.run(PYTHON_DIR / "command.yaml", overrides=SMALL, output_dir=tmp_path), "lab", "empirical")


def test_python_example_by_address(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(PYTHON_DIR / "lab_backend.py"), "--port", str(port)])
    try:
        result = cosim.run(PYTHON_DIR / "address.yaml", output_dir=tmp_path,
                           overrides=(*SMALL, f"backends.lab.address=127.0.0.1:{port}"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    check(result, "lab", "empirical")


def test_python_example_in_process(tmp_path: Path) -> None:
    """`python: lab_backend:LabBackend`, imported from the config's folder: no PYTHONPATH needed."""
    check(cosim.run(PYTHON_DIR / "python.yaml", overrides=SMALL, output_dir=tmp_path), "lab", "empirical")


@pytest.mark.container
@pytest.mark.slow
def test_python_example_by_image(cosim_image: str, tmp_path: Path) -> None:
    build = subprocess.run(["docker", "build", "-q", "--build-arg", f"BASE={cosim_image}",
                            "-t", "cosim/byo-python:local", str(PYTHON_DIR)], capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, build.stderr
    check(cosim.run(PYTHON_DIR / "image.yaml", overrides=SMALL, output_dir=tmp_path), "lab", "empirical")


@pytest.fixture(scope="module")
def rust_binary() -> Iterator[Path]:
    """examples/byo/rust built with cargo (skipped only where cargo is absent)."""
    cargo = shutil.which("cargo") or (str(Path.home() / ".cargo" / "bin" / "cargo")
                                      if (Path.home() / ".cargo" / "bin" / "cargo").exists() else None)
    if cargo is None:
        pytest.skip("cargo is not installed; the Rust example needs a Rust toolchain")
    began = time.monotonic()
    build = subprocess.run([cargo, "build", "--release", "--manifest-path", str(RUST_DIR / "Cargo.toml")],
                           capture_output=True, text=True, timeout=1800)
    assert build.returncode == 0, build.stderr[-4000:]
    print(f"cargo build: {time.monotonic() - began:.0f}s")  # noqa: T201 - shown with -s
    yield RUST_DIR / "target" / "release" / "byo-rust-backend"


@pytest.mark.slow
def test_rust_example_passes_the_conformance_suite(rust_binary: Path) -> None:
    launched = launch_command("lab-rust", [str(rust_binary), "--port", "{port}"])
    try:
        passed = check_runtime_backend(launched.address)
    finally:
        launched.stop()
    assert passed == ["describe", "health", "reflection", "predict_steps", "errors", "close_session"]


@pytest.mark.slow
def test_rust_example_times_a_run(rust_binary: Path, tmp_path: Path) -> None:
    result = cosim.run(RUST_DIR / "command.yaml", overrides=SMALL, output_dir=tmp_path)
    check(result, "lab-rust", "analytical")
    assert result.summary["latency"]["tpot_s"]["p50"] > 0
