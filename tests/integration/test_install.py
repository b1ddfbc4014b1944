"""Installing cosim: the wheel ships its data and runs the quickstart from a fresh venv; `make` installs once.

The wheel is built from a clean copy of the tree (tracked and new files, nothing ignored), as a fresh
clone would build it, without build isolation (the dev extras bring setuptools), and installed with
``--no-deps`` into a new venv that borrows the runtime dependencies of this one: nothing is fetched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO

# Folders of the tree and the package each one becomes (setup.py).
PACKAGE_OF = {"api": "cosim", "hub": "cosim/hub", "adapters": "cosim/adapters", "stubs/cosim/v1": "cosim/v1"}


def clean_copy(dest: Path) -> Path:
    """The tracked and new (not ignored) files of the checkout, copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.decode(errors='replace').strip()}")
    for name in listed.stdout.decode().split("\0"):
        if name and (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cosim's wheel, built as `pip wheel` builds it from a fresh clone; its build prints no warning."""
    src = clean_copy(tmp_path_factory.mktemp("src"))
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "--wheel-dir", str(dist), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # setuptools' warnings (e.g. a data folder "absent from the `packages` configuration") come through pip.
    assert "Warning" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    (built,) = dist.glob("cosim-*.whl")
    return built


def test_the_wheel_ships_every_data_file_of_the_packages(wheel: Path) -> None:
    """Presets, roofline profiles, regression artifacts, stub types: every tracked non-Python file."""
    tracked = subprocess.run(["git", "ls-files", *PACKAGE_OF], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    data = [name for name in tracked if not name.endswith(".py")]
    assert "adapters/regression/artifacts/operator.json" in data and "hub/presets/models.yaml" in data
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for name in data:
        folder = next(f for f in PACKAGE_OF if name.startswith(f + "/"))
        assert PACKAGE_OF[folder] + name[len(folder):] in shipped, name


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (not editable); the runtime dependencies are this venv's."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # After the venv's own site-packages: the wheel's cosim comes first, this venv's packages serve the rest.
    borrowed = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "zz_borrowed_dependencies.pth").write_text("".join(f"{p}\n" for p in borrowed))
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                              "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-4000:]
    return root


def run_in(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


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
    """`make quickstart` reinstalls only after pyproject.toml or setup.py change (stamps in the venv)."""
    for name in ("Makefile", "pyproject.toml", "setup.py"):
        shutil.copy2(REPO / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()

    def planned() -> str:
        return subprocess.run(["make", "-n", "quickstart"], cwd=tmp_path, capture_output=True, text=True,
                              check=True).stdout

    assert "pip install" in planned()  # never installed
    (tmp_path / ".venv" / ".installed").touch()
    assert "pip install" not in planned() and "cosim run examples/quickstart.yaml" in planned()
    later = (tmp_path / ".venv" / ".installed").stat().st_mtime + 10
    os.utime(tmp_path / "pyproject.toml", (later, later))
    assert "pip install --quiet -e ." in planned()
