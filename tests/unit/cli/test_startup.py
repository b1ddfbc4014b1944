"""What starting the CLI costs: plotting is imported only by a command that plots."""

from __future__ import annotations

import subprocess
import sys


def test_loading_the_cli_imports_no_matplotlib() -> None:
    """matplotlib costs 0.3 s of CPU to import; ``cosim run --set output.plots=false`` never draws."""
    probe = "import sys; from cosim.hub.cli import build_parser; build_parser(); sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0
