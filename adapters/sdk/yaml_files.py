"""YAML files read by LibYAML's safe loader where PyYAML has it.

PyYAML's ``CSafeLoader`` is its safe loader over LibYAML's C parser: the same objects as the
pure-Python ``yaml.safe_load`` (``tests/unit/adapters/sdk/test_yaml_files.py`` compares both on the
package's own files) at about a tenth of the CPU, which a run pays at start for each data file it
reads (the device presets alone took 0.13 s with the pure-Python loader). Without LibYAML (a PyYAML
built without it) this is ``yaml.safe_load``.
"""

from __future__ import annotations

from typing import Any

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream: Any) -> Any:
    """``yaml.safe_load(stream)``, parsed by LibYAML where PyYAML has it."""
    return yaml.load(stream, Loader=SafeLoader)
