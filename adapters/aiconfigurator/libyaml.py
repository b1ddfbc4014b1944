"""The library's YAML files read by LibYAML while this backend calls it.

aiconfigurator-core reads its system files with PyYAML's pure-Python safe loader, and opening a
session reads many of them: its list of systems, engines and versions (``get_supported_databases``)
and its version slots parse every system's YAML file, and loading a database reads each version
folder's ``collection_meta.yaml``. That was about 0.55 s of CPU at each session open (the whole
of the list of systems takes 0.55 s with the pure-Python loader, 0.1 s with LibYAML).
PyYAML's ``CSafeLoader`` is the same safe loader over LibYAML's C parser, and builds the same
objects (``tests/contract/test_aiconfigurator_contract.py`` compares both on every YAML file the
library ships). :func:`libyaml_reads` hands the library's YAML-reading modules a ``yaml`` whose
safe loading is LibYAML's while cosim's calls into the library run, and gives them back their own
after; the library is not changed. Without LibYAML (a PyYAML built without it) nothing changes.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import types
from collections.abc import Iterator
from typing import Any

import yaml

from cosim.adapters.sdk import yaml_files

# The library's modules that read YAML files with ``yaml.safe_load`` or ``yaml.load(..., yaml.SafeLoader)``.
READERS = ("aiconfigurator_core.sdk.perf_database", "aiconfigurator_core.sdk.operations.base",
           "aiconfigurator_core.sdk.attention_lanes")


class _LibYaml(types.ModuleType):
    """PyYAML, with its safe loader LibYAML's."""

    SafeLoader = yaml_files.SafeLoader

    def __init__(self) -> None:
        super().__init__("yaml", yaml.__doc__)

    def safe_load(self, stream: Any) -> Any:
        return yaml_files.safe_load(stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(yaml, name)


_lock = threading.Lock()
_depth = 0  # blocks inside libyaml_reads, in every thread


@contextlib.contextmanager
def libyaml_reads() -> Iterator[None]:
    """While the block runs, the library's YAML reading modules (:data:`READERS`) parse with LibYAML.

    Nested or overlapping blocks (other threads' too) share one swap: the first in installs LibYAML's
    loader, the last out gives the modules back the ``yaml`` they imported.
    """
    global _depth
    if not yaml.__with_libyaml__:
        yield
        return
    modules = [importlib.import_module(name) for name in READERS]
    with _lock:
        _depth += 1
        if _depth == 1:
            fast = _LibYaml()
            for module in modules:
                module.yaml = fast
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for module in modules:
                    module.yaml = yaml
