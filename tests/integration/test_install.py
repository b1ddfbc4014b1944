"""Installing cosim: the wheel ships its data and runs the quickstart from a fresh venv; `make` installs once.

The wheel and venv fixtures: conftest.py; how they are built: wheels.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from tests.paths import REPO

from .wheels import run_in

# Folders of the tree and the package each one becomes (setup.py).
PACKAGE_OF = {"api": "cosim", "hub": "cosim/hub", "adapters": "cosim/adapters", "stubs/cosim/v1": "cosim/v1"}


def test_the_wheel_ships_every_data_file_of_the_packages(wheel: Path) -> None:
    """Presets, roofline profiles, regression artifacts, stub types: every tracked non-Python file."""
    tracked = subprocess.run(["git", "ls-files", *PACKAGE_OF], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    data = [name for name in tracked if not name.endswith(".py")]
    assert "adapters/regression/artifacts/operator.json" in data and "hub/config/presets/models.yaml" in data
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for name in data:
        folder = next(f for f in PACKAGE_OF if name.startswith(f + "/"))
        assert PACKAGE_OF[folder] + name[len(folder):] in shipped, name


def test_the_quickstart_runs_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    where = run_in(venv, tmp_path, "python", "-c", "import cosim.adapters.regression, cosim.hub; "
                                                   "print(cosim.hub.__file__)")
    assert where.returncode == 0 and where.stdout.startswith(str(venv)), where.stdout + where.stderr
    config = tmp_path / "quickstart.yaml"
    shutil.copy(REPO / "examples" / "quickstart.yaml", config)
    # The roofline with the shipped calibrated profile, then the regression backend on its shipped artifact.
    for name, override in (("roofline", "backends.analytical.options.profile=calibrated"),
                           ("regression", "clients[0].backend=empirical")):
        proc = run_in(venv, tmp_path, "cosim", "run", str(config), "--no-progress", "-o", str(tmp_path / name),
                      "--set", "workload.requests=50", "--set", "output.plots=false", "--set", override)
        assert proc.returncode == 0, proc.stderr[-4000:]
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["requests"]["completed"] == 50


def test_make_installs_once_and_again_when_the_packaging_changes(tmp_path: Path) -> None:
    """`make quickstart` reinstalls cosim only after pyproject.toml or setup.py change, and rebuilds the
    compiled core only after its sources change (stamps in the venv)."""
    core = [str(path.relative_to(REPO)) for path in (REPO / "core").rglob("*")
            if path.is_file() and path.suffix in (".rs", ".toml", ".lock", ".pyi")]
    for name in ("Makefile", "pyproject.toml", "setup.py", *core):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()

    def planned() -> str:
        return subprocess.run(["make", "-n", "quickstart"], cwd=tmp_path, capture_output=True, text=True,
                              check=True).stdout

    assert "pip install --quiet -e ." in planned() and "./core" in planned()  # never installed
    for stamp in (".installed", ".core"):
        (tmp_path / ".venv" / stamp).touch()
    assert "pip install" not in planned() and "cosim run examples/quickstart.yaml" in planned()
    later = (tmp_path / ".venv" / ".installed").stat().st_mtime + 10
    os.utime(tmp_path / "pyproject.toml", (later, later))
    assert "pip install --quiet -e ." in planned() and "./core" not in planned()
    os.utime(tmp_path / ".venv" / ".installed", (later + 5, later + 5))  # reinstalled since
    os.utime(tmp_path / "core" / "src" / "manager.rs", (later + 10, later + 10))
    assert "./core" in planned() and "-e ." not in planned()
