"""Every built-in backend passes the SDK conformance suite, loaded as the hub loads it."""

from __future__ import annotations

import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cosim.adapters.sdk import MemoryBackend, RuntimeBackend, load_backend
from cosim.adapters.sdk.testing import Spec, run_conformance, sample_session_spec
from cosim.hub.backends import BUILTIN_BACKENDS

from .test_astrasim_contract import FAKE_ASTRASIM
from .test_regression_contract import make_spec as regression_spec

SERVED = ["describe", "health", "reflection"]
RUNTIME_CHECKS = [*SERVED, "predict_steps", "predict_steps_stream", "errors", "close_session"]
MEMORY_CHECKS = [*SERVED, "access", "errors", "close_session"]
NETWORK_CHECKS = [*SERVED, "transfer", "collective", "errors", "close_session"]

# The simulators behind the optional extras (`cosim[genz]`, `cosim[scalesim]`, `cosim[aiconfigurator]`), by import
# name.
EXTRAS = {"genz": "GenZ", "scalesim": "scalesim", "aiconfigurator": "aiconfigurator_core"}


def scalesim_spec() -> Spec:
    """The sample session on a small array, so that the cycle-level simulation stays quick."""
    spec = sample_session_spec()
    spec.options.update({"rows": 8, "cols": 8, "num_arrays": 1, "max_folds": 2, "max_stream": 16,
                         "ifmap_sram_kb": 64, "filter_sram_kb": 64, "ofmap_sram_kb": 32})
    return spec


# Backends that cannot serve the suite's sample spec: regression knows only the models it was
# trained on (Llama-2-70B on H100, TP 2, is one).
SPECS: dict[str, Callable[[], Spec]] = {"regression": regression_spec, "scalesim": scalesim_spec}


@pytest.mark.parametrize("name", sorted(BUILTIN_BACKENDS))
def test_builtin_backend_passes_the_conformance_suite(name: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if name in EXTRAS:
        pytest.importorskip(EXTRAS[name])
    if name == "astrasim":  # the fake binary of test_astrasim_contract stands in for ASTRA-sim
        binary = tmp_path / "AstraSim_Analytical_Congestion_Unaware"
        binary.write_text(f"#!{sys.executable}\n{FAKE_ASTRASIM}")
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("FAKE_ASTRASIM_LOG", str(tmp_path / "runs.log"))
        monkeypatch.setenv("COSIM_ASTRA_SIM", str(binary))
    backend = load_backend(BUILTIN_BACKENDS[name])
    expected = (RUNTIME_CHECKS if isinstance(backend, RuntimeBackend)
                else MEMORY_CHECKS if isinstance(backend, MemoryBackend) else NETWORK_CHECKS)
    assert run_conformance(backend, SPECS[name]() if name in SPECS else None) == expected
