"""The native build: the simulation's hot path compiled by mypyc, from the same source.

``make native`` (``COSIM_NATIVE=1 pip install --no-build-isolation ...``, setup.py) compiles the
modules in ``NATIVE`` to C extensions; a plain install runs them as Python, with identical results
(docs/performance.md). Python imports a compiled module in preference to its source, so a source
edited after a build would be silently ignored. The build therefore records each source's hash
(``BUILD_RECORD``), and importing ``cosim.hub`` refuses a build whose sources have changed since.

This module imports nothing from cosim: setup.py reads ``NATIVE`` from it before cosim is installed.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
from pathlib import Path

# Paths under the folder that holds hub/ and adapters/ (the checkout, or the installed cosim package).
NATIVE = (
    "hub/sim/coordinator.py", "hub/sim/clients/llm.py",
    "adapters/roofline/backend.py",
)
BUILD_RECORD = "hub/native_build.json"  # source path -> SHA-256 of the source compiled
ROOT = Path(__file__).resolve().parent.parent


def source_hashes(root: Path = ROOT) -> dict[str, str]:
    """SHA-256 of each native module's source under ``root``."""
    return {path: hashlib.sha256((root / path).read_bytes()).hexdigest() for path in NATIVE}


def compiled(root: Path = ROOT) -> list[str]:
    """The native modules present as compiled extensions under ``root``."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    return [path for path in NATIVE if any((root / path).with_suffix(s).exists() for s in suffixes)]


def check_build(root: Path = ROOT) -> None:
    """Raises ImportError if a compiled module's source changed after the native build.

    Costs a few stat calls where nothing is compiled.
    """
    built = compiled(root)
    if not built:
        return
    record_path = root / BUILD_RECORD
    recorded = json.loads(record_path.read_text()) if record_path.exists() else {}
    current = source_hashes(root)
    stale = [path for path in built if recorded.get(path) != current[path]]
    if stale:
        raise ImportError(f"cosim's native build is older than its source: {', '.join(stale)} changed since "
                          f"it was compiled ({root}). Rebuild it with `make native`, or remove it with `make pure`.")
