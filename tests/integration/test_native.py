"""The native build (hub/native.py, `make native`): its wheel compiles every NATIVE module, its runs write
the same bytes as the pure-Python wheel's, and a compiled module whose source changed is refused.

Building it compiles C (a few minutes); without a C compiler the module is skipped, saying so.
"""

from __future__ import annotations

import json
import shutil
import sysconfig
import zipfile
from pathlib import Path

import pytest

from cosim.hub.native import BUILD_RECORD, NATIVE
from tests.paths import REPO, SHARED_DATA

from .wheels import build_wheel, clean_copy, install_wheel, run_in

pytestmark = pytest.mark.slow

REPLAYS = SHARED_DATA / "llmservingsim" / "scenarios"
QUICK = ["--no-progress", "--set", "output.plots=false"]
# Every batching path the compiled modules take: continuous and chunked batching, prefix caching by
# content under KV pressure, preemption, disaggregation, speculation, LoRA, sessions, DP/EP lock-step.
RUNS = {
    "chat": ["run", "examples/bench/chat-10k.yaml", "--set", "workload.requests=400", *QUICK],
    "disagg-long": ["run", "examples/bench/disagg-long.yaml", "--set", "workload.requests=30", *QUICK],
    "disaggregated": ["run", "examples/disaggregated.yaml", *QUICK],
    "speculative": ["run", "examples/speculative.yaml", "--set", "workload.requests=100", *QUICK],
    "lora": ["run", "examples/lora.yaml", *QUICK],
    "sessions": ["run", "examples/sessions.yaml", *QUICK],
    "replay-kv-bound": ["replay", str(REPLAYS / "rtx4090_llama-3.1-8b_tp1.json"), "--no-plots"],
    "replay-dp-ep": ["replay", str(REPLAYS / "rtxpro6000_qwen3-30b-a3b_dp2ep2.json"), "--no-plots"],
}
OUTPUTS = ("requests.csv", "clients.csv", "trace.json")


def extension_suffix() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX"))


@pytest.fixture(scope="module")
def native_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which(str(sysconfig.get_config_var("CC") or "cc").split()[0]) is None:
        pytest.skip("no C compiler: the native build needs one (`make native`)")
    built, _ = build_wheel(clean_copy(tmp_path_factory.mktemp("native-src")), tmp_path_factory.mktemp("native-dist"),
                           native=True)
    return built


@pytest.fixture(scope="module")
def native_venv(native_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_wheel(native_wheel, tmp_path_factory.mktemp("native-venv") / "venv")


def test_the_native_wheel_compiles_every_native_module_and_records_their_sources(native_wheel: Path) -> None:
    shipped = set(zipfile.ZipFile(native_wheel).namelist())
    for path in NATIVE:
        assert f"cosim/{path.removesuffix('.py')}{extension_suffix()}" in shipped, path
        assert f"cosim/{path}" in shipped, path  # the source stays beside it
    assert f"cosim/{BUILD_RECORD}" in shipped


@pytest.mark.parametrize("name", RUNS)
def test_native_runs_write_the_same_bytes_as_pure_python(name: str, venv: Path, native_venv: Path,
                                                         tmp_path: Path) -> None:
    args = RUNS[name]
    if args[0] == "replay" and not REPLAYS.is_dir():
        pytest.skip(f"no replay data at {REPLAYS}")
    summaries = []
    for build, root in (("pure", venv), ("native", native_venv)):
        proc = run_in(root, REPO, "cosim", *args, "-o", str(tmp_path / build))
        assert proc.returncode == 0, f"{build}: {proc.stderr[-3000:]}"
        summary = json.loads((tmp_path / build / "summary.json").read_text())
        summary.pop("wall_time_s")
        summaries.append(summary)
    assert summaries[0] == summaries[1]
    for output in OUTPUTS:
        assert (tmp_path / "pure" / output).read_bytes() == (tmp_path / "native" / output).read_bytes(), output


def test_a_compiled_module_whose_source_changed_is_refused_by_name(native_venv: Path, tmp_path: Path) -> None:
    site = Path(run_in(native_venv, tmp_path, "python", "-c", "import sysconfig; print(sysconfig.get_paths()"
                                                              "['platlib'])").stdout.strip())
    coordinator = site / "cosim" / "hub" / "sim" / "coordinator.py"
    assert coordinator.with_suffix(extension_suffix()).exists()
    coordinator.write_text(coordinator.read_text() + "\n# edited after the build\n")
    proc = run_in(native_venv, tmp_path, "cosim", "--help")
    assert proc.returncode != 0
    assert "native build is older than its source: hub/sim/coordinator.py changed" in proc.stderr, proc.stderr[-2000:]
