"""The hub's backend registry: where backends named in submitted configs run.

A config written for a laptop says ``backends: {analytical: {kind: roofline}}``
and, run locally, serves the roofline in-process. Submitted to a hub in a
docker-compose stack, the same config should use the ``roofline`` service.
The registry maps a built-in *kind* or a backend *name* to ``host:port``;
:meth:`BackendRegistry.resolve` rewrites each matching backend entry of a
config to ``address:`` (keeping its options, deadline and cache settings):

- a backend whose name is a key resolves to that address (any source);
- otherwise a ``kind:`` backend whose kind is a key resolves to that address;
- everything else is left as written (``kind:`` without an entry runs in-process).

Entries come from a YAML file (``cosim hub --backends FILE``), either a plain
mapping or one under a ``backends:`` key::

    backends:
      roofline: roofline:50051
      regression: regression:50051

and from environment variables ``COSIM_BACKEND_<NAME>=host:port`` (name
upper-cased, ``-`` as ``_``), which override the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..config.scenario import ScenarioConfig
from ..errors import ScenarioError

ENV_PREFIX = "COSIM_BACKEND_"
_ADDRESS = re.compile(r"^[\w.\-\[\]:]+:\d+$")


@dataclass(frozen=True)
class BackendRegistry:
    """Backend addresses by kind or name.

    Attributes:
        addresses: key (a built-in kind or a backend name) -> ``host:port``.
    """

    addresses: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None = None, *, environ: Mapping[str, str] | None = None) -> BackendRegistry:
        """Reads ``path`` (if given), then ``COSIM_BACKEND_*`` variables on top.

        Raises:
            ScenarioError: the file is unreadable, not a mapping, or an address is not ``host:port``.
        """
        entries: dict[str, str] = {}
        if path is not None:
            entries.update(_read_file(Path(path)))
        env = os.environ if environ is None else environ
        for key, value in env.items():
            if key.startswith(ENV_PREFIX) and value:
                entries[key.removeprefix(ENV_PREFIX).lower().replace("_", "-")] = value
        for key, value in entries.items():
            if not _ADDRESS.match(value):
                raise ScenarioError(f"backends.{key}", f"expected host:port, got {value!r}")
        return cls(dict(entries))

    def lookup(self, name: str, kind: str | None) -> str | None:
        """The address a backend entry resolves to, or None to leave it as written."""
        # Names may use '_' where env variables forced '-': accept both spellings.
        for key in (name, name.replace("_", "-")):
            if key in self.addresses:
                return self.addresses[key]
        if kind is not None:
            return self.addresses.get(kind)
        return None

    def resolve(self, config: ScenarioConfig) -> ScenarioConfig:
        """``config`` with every registered backend rewritten to ``address:``."""
        backends = {}
        for name, backend in config.backends.items():
            address = self.lookup(name, backend.kind)
            if address is None:
                backends[name] = backend
            else:
                backends[name] = backend.model_copy(update={
                    "kind": None, "python": None, "command": None, "image": None, "address": address})
        return config.model_copy(update={"backends": backends})


def _read_file(path: Path) -> dict[str, str]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise ScenarioError(str(path), f"cannot read backend registry: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ScenarioError(str(path), f"not valid YAML: {err}") from None
    if isinstance(data, dict) and isinstance(data.get("backends"), dict):
        data = data["backends"]
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ScenarioError(str(path), "a backend registry maps names or kinds to 'host:port' strings")
    return {str(k): v for k, v in data.items()}
