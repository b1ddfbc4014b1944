"""Building cosim's wheel as a fresh clone would, and installing it into a new venv.

The wheel is built from a clean copy of the tree (tracked and new files, nothing ignored) without
build isolation (the dev extras bring setuptools, and mypy for a native build), and installed with
``--no-deps`` into a new venv that borrows the runtime dependencies of this one: nothing is fetched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.paths import REPO


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


def build_wheel(src: Path, dist: Path, *, native: bool = False) -> tuple[Path, str]:
    """Builds the wheel of the tree ``src`` into ``dist`` (``native``: COSIM_NATIVE=1); returns it and
    what the build printed."""
    env = {**os.environ, "COSIM_NATIVE": "1" if native else "0"}
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "--wheel-dir", str(dist), str(src)], capture_output=True, text=True, timeout=1200,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (built,) = dist.glob("cosim-*.whl")
    return built, proc.stdout + proc.stderr


def install_wheel(wheel: Path, root: Path) -> Path:
    """A fresh venv at ``root`` with ``wheel`` installed (not editable); the runtime dependencies are
    this venv's."""
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
    """Runs ``venv``'s ``args[0]`` (cosim, python) in ``cwd``, away from this checkout's PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
