"""The committed stubs are exactly what proto/ generates."""

import filecmp
import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO


def test_stubs_match_protos(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    subprocess.run([str(REPO / "scripts" / "gen_stubs.sh"), str(tmp_path)], check=True, env=env,
                   capture_output=True)
    fresh, committed = tmp_path / "cosim" / "v1", REPO / "stubs" / "cosim" / "v1"
    names = sorted(p.name for p in fresh.iterdir() if p.is_file())
    assert names == sorted(p.name for p in committed.iterdir() if p.is_file() and p.suffix != ".pyc")
    _, mismatch, errors = filecmp.cmpfiles(fresh, committed, names, shallow=False)
    assert not mismatch and not errors, f"stubs drifted from proto/: {mismatch + errors}; run `make stubs`"
