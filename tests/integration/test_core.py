"""The compiled core (core/: Rust, PyO3): its own unit tests pass, users get a wheel of it, and the
module this process imports is built from the sources in the checkout.

The Rust toolchain is the machine's (README, Install); cargo and maturin build into core/target,
so a build after `make install` only links (the first compiles the crates, about a minute).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import cosim_core
import pytest

from tests.paths import REPO

pytestmark = pytest.mark.slow

CORE = REPO / "core"


def tool(name: str) -> str:
    """The path of ``name`` in this venv or on PATH; the test is skipped, saying why, without it."""
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.skip(f"{name} is not installed (cargo: the machine's Rust toolchain; maturin: pip install -e '.[dev]')")
    return found


def test_the_crates_unit_tests_pass() -> None:
    """`cargo test`: the free queue against a plain deque, copies independent, the pool's invariants."""
    proc = subprocess.run([tool("cargo"), "test", "--lib", "--quiet", "--manifest-path", str(CORE / "Cargo.toml")],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    passed = re.search(r"test result: ok\. (\d+) passed", proc.stdout)
    assert passed is not None and int(passed.group(1)) >= 10, proc.stdout[-4000:]


def test_maturin_builds_a_wheel_holding_the_module_and_its_types(tmp_path: Path) -> None:
    proc = subprocess.run([tool("maturin"), "build", "--release", "--quiet", "--out", str(tmp_path),
                           "--manifest-path", str(CORE / "Cargo.toml")], capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (wheel,) = tmp_path.glob("cosim_core-*-abi3-*.whl")  # one wheel for every Python >= 3.11
    names = zipfile.ZipFile(wheel).namelist()
    assert {"cosim_core/__init__.pyi", "cosim_core/py.typed"} <= set(names)
    assert [n for n in names if n.startswith("cosim_core/cosim_core.") and n.endswith(".so")], names


def test_the_imported_core_has_the_stubs_api() -> None:
    """What the stub promises mypy is what the module has (a stale build would miss new methods)."""
    owner: object = cosim_core
    missing = []
    for line in (CORE / "cosim_core.pyi").read_text().splitlines():
        if line.startswith("class "):
            owner = getattr(cosim_core, line.split()[1].split(":")[0].split("(")[0], None)
            if owner is None:
                missing.append(line)
        elif line.startswith("def "):
            owner = cosim_core
        if "def " in line and owner is not None and not hasattr(owner, line.split("def ")[1].split("(")[0]):
            missing.append(line.strip())
    assert missing == []
