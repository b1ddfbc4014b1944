"""Optional dependencies of the adapters: a missing one answers with the pip command that installs it.

An adapter whose simulator comes from an optional extra of the ``cosim`` distribution
(``pyproject.toml``, ``[project.optional-dependencies]``) calls :func:`require_extra` before it
imports the simulator; without it installed, loading the backend fails with
``... is not installed; install it with: pip install 'cosim[genz]'`` instead of a bare
``No module named 'GenZ'`` (or an INTERNAL error at the first session).
"""

from __future__ import annotations

import importlib.util

# Optional extra -> (the module the adapter imports, the distribution that provides it).
# Each key is an extra pyproject.toml declares (tests/unit/adapters/sdk/test_extras.py checks it).
EXTRAS: dict[str, tuple[str, str]] = {
    "genz": ("GenZ", "genz-llm"),
    "scalesim": ("scalesim", "scalesim"),
    "aiconfigurator": ("aiconfigurator_core", "aiconfigurator-core"),
}


class MissingExtra(ImportError):
    """An optional dependency a backend needs is not installed.

    Attributes:
        extra: the ``cosim[...]`` extra that installs it.
        module: the module that could not be found.
        distribution: the PyPI distribution that provides the module.
        backend: the backend that needs it.
    """

    def __init__(self, extra: str, *, module: str, distribution: str, backend: str) -> None:
        super().__init__(name=module)
        self.extra, self.module, self.distribution, self.backend = extra, module, distribution, backend

    @property
    def pip_command(self) -> str:
        """The command that installs the extra, as a user types it."""
        return f"pip install 'cosim[{self.extra}]'"

    def __str__(self) -> str:
        return (f"the {self.backend} backend needs {self.distribution} (module {self.module}), which is not "
                f"installed; install it with: {self.pip_command}")


def require_extra(extra: str, *, backend: str | None = None) -> None:
    """Checks, without importing it, that the simulator of optional extra ``extra`` is installed.

    Args:
        extra: a key of :data:`EXTRAS`.
        backend: the backend's name for the message (default: the extra's name).

    Raises:
        MissingExtra: the extra's module cannot be found.
    """
    module, distribution = EXTRAS[extra]
    if importlib.util.find_spec(module) is None:
        raise MissingExtra(extra, module=module, distribution=distribution, backend=backend or extra)
