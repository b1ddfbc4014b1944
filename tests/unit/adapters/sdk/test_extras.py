"""A missing optional extra answers with the pip command that installs it."""

from __future__ import annotations

import re
import sys
import tomllib

import pytest

import cosim
from cosim.adapters.sdk import load_backend
from cosim.adapters.sdk.extras import EXTRAS, MissingExtra, require_extra
from cosim.hub.backends import BUILTIN_BACKENDS
from cosim.hub.errors import BackendError
from tests.paths import REPO


def test_every_extra_the_adapters_name_is_declared_with_its_distribution() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, (_module, distribution) in EXTRAS.items():
        names = [re.split(r"[<>=!~\[; ]", requirement)[0] for requirement in declared[extra]]
        assert distribution in names, (extra, declared[extra])


@pytest.fixture
def without_simulators(monkeypatch: pytest.MonkeyPatch) -> None:
    """As where no optional simulator is installed: their modules are not found, and the adapters
    are imported afresh."""
    for extra, (_module, distribution) in list(EXTRAS.items()):
        monkeypatch.setitem(EXTRAS, extra, (f"not_installed_{extra}", distribution))
    adapters = ("cosim.adapters.genz", "cosim.adapters.scalesim", "cosim.adapters.aiconfigurator")
    for name in [n for n in sys.modules if n.startswith(adapters)]:
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize(("kind", "distribution"), [("genz", "genz-llm"), ("scalesim", "scalesim"),
                                                    ("aiconfigurator", "aiconfigurator-core")])
def test_loading_a_backend_without_its_extra_gives_the_pip_command(without_simulators: None, kind: str,
                                                                    distribution: str) -> None:
    with pytest.raises(ValueError) as err:
        load_backend(BUILTIN_BACKENDS[kind])
    assert str(err.value) == (f"cannot load backend '{BUILTIN_BACKENDS[kind]}': the {kind} backend needs "
                              f"{distribution} (module not_installed_{kind}), which is not installed; install it "
                              f"with: pip install 'cosim[{kind}]'")
    assert isinstance(err.value.__cause__, MissingExtra)


def test_a_run_on_a_missing_extra_names_the_backend_and_the_pip_command(without_simulators: None) -> None:
    config = {"models": {"m": {"preset": "meta-llama/Meta-Llama-3-8B"}}, "hardware": {"h": {"preset": "H100-SXM"}},
              "backends": {"analytical": {"kind": "genz"}},
              "clients": [{"name": "c0", "model": "m", "backend": "analytical", "hardware": {"device": "h"}}],
              "workload": {"requests": 1, "arrival": {"process": "constant"},
                           "input_tokens": {"dist": "fixed", "value": 10},
                           "output_tokens": {"dist": "fixed", "value": 2}}}
    with pytest.raises(BackendError, match=r"backend 'analytical'.*pip install 'cosim\[genz\]'"):
        cosim.run(config)


def test_an_installed_extra_passes() -> None:
    pytest.importorskip("GenZ")
    require_extra("genz")
