"""Run folders reproduce themselves (config.yaml, run.json) and are never replaced by accident."""

from __future__ import annotations

import json
import pickle
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import cosim
from cosim.hub.cli import main
from cosim.hub.errors import ScenarioError
from cosim.hub.studies import runner
from cosim.hub.studies.provenance import git_commit, portable_base_dir
from tests.paths import REPO, SHARED_DATA
from tests.scenarios.helpers import scenario

REPLAY_DATA = SHARED_DATA / "llmservingsim"
OUTPUTS = ("requests.csv", "clients.csv", "trace.json")


def write_scenario(folder: Path, **changes: Any) -> Path:
    """A linear-backend scenario whose prompt and output lengths come from a trace beside it
    (a relative path), with Poisson arrivals (so the seed matters)."""
    (folder / "traces").mkdir(parents=True)
    rows = "".join(f"{50 + 37 * i % 200},{2 + 5 * i % 17}\n" for i in range(40))
    (folder / "traces" / "lengths.csv").write_text("input,output\n" + rows)
    trace = {"path": "traces/lengths.csv", "format": "csv", "input_column": "input", "output_column": "output"}
    config = scenario(per_token_ns=5, slo={"ttft_s": {"p90": 0.0002}}, workload={
        "requests": 40, "trace": trace, "arrival": {"process": "poisson", "rate_per_s": 20_000},
        "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}})
    config.update(changes)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def summary_without_wall_time(folder: Path) -> dict[str, Any]:
    summary = json.loads((folder / "summary.json").read_text())
    summary.pop("wall_time_s")
    return summary


def test_config_yaml_reproduces_the_run_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Overrides are in config.yaml, and its relative trace path still resolves from another folder."""
    write_scenario(tmp_path / "configs")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    sets = ["--set", "seed=5", "--set", "clients[0].scheduler.max_num_seqs=3"]
    assert main(["run", "../configs/scenario.yaml", "-o", "a", "--no-progress", *sets]) == 0
    assert main(["run", "a/config.yaml", "-o", "b", "--no-progress"]) == 0
    assert main(["run", "../configs/scenario.yaml", "-o", "without-sets", "--no-progress"]) == 0
    a, b = Path("a"), Path("b")
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert summary_without_wall_time(a) == summary_without_wall_time(b)
    assert (a / "requests.csv").read_bytes() != (Path("without-sets") / "requests.csv").read_bytes()
    config_a, config_b = (yaml.safe_load((d / "config.yaml").read_text()) for d in (a, b))
    assert (config_a["seed"], config_a["clients"][0]["scheduler"]["max_num_seqs"]) == (5, 3)
    assert config_a["base_dir"] == "../../configs"  # relative to the run folder a: the tree may move
    assert [c.pop("output")["dir"] for c in (config_a, config_b)] == ["a", "b"]
    assert config_a == config_b


def test_a_copied_project_folder_reruns_from_its_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """config.yaml names base_dir relative to the run folder, so a copy of the project (its configs, traces
    and runs) reruns where the original is gone; a base_dir sharing nothing but / with it stays absolute."""
    write_scenario(tmp_path / "project" / "configs")
    monkeypatch.chdir(tmp_path / "project")
    assert main(["run", "configs/scenario.yaml", "-o", "runs/a", "--no-progress"]) == 0
    shutil.copytree(tmp_path / "project", tmp_path / "copy")
    shutil.rmtree(tmp_path / "project")
    monkeypatch.chdir(tmp_path / "copy")
    assert main(["run", "runs/a/config.yaml", "-o", "runs/b", "--no-progress"]) == 0
    for name in OUTPUTS:
        assert Path("runs/a", name).read_bytes() == Path("runs/b", name).read_bytes(), name
    assert yaml.safe_load(Path("runs/b/config.yaml").read_text())["base_dir"] == "../../configs"
    assert portable_base_dir(Path("/usr/share"), tmp_path / "run") == "/usr/share"


def test_config_yaml_of_a_run_with_a_lab_backend_beside_its_config_reruns(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A `python:` backend imports from the original config's folder, named by config.yaml's base_dir."""
    study = tmp_path / "study"
    study.mkdir()
    (study / "lab_for_rerun.py").write_text(
        "from cosim.adapters.sdk.testing import LinearBackend\n\n\nclass Lab(LinearBackend):\n    name = 'lab'\n")
    config = scenario(per_token_ns=3)
    config["backends"]["lin"]["python"] = "lab_for_rerun:Lab"
    (study / "scenario.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "study/scenario.yaml", "-o", "a", "--no-progress"]) == 0
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    # imported again, from where config.yaml says (the first run added the study folder to sys.path)
    monkeypatch.delitem(sys.modules, "lab_for_rerun")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(study.resolve())])
    assert main(["run", "../a/config.yaml", "-o", "b", "--no-progress"]) == 0
    assert (tmp_path / "a" / "requests.csv").read_bytes() == Path("b", "requests.csv").read_bytes()


def test_run_json_records_version_commit_command_and_seed(tmp_path: Path) -> None:
    config = write_scenario(tmp_path)
    argv = ["run", str(config), "-o", str(tmp_path / "out"), "--no-progress", "--set", "seed=11"]
    assert main(argv) == 0
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["seed"] == 11 and record["overrides"] == ["seed=11"]
    assert record["command"] == shlex.join(["cosim", *argv])
    assert record["cosim_version"] == metadata.version("cosim")
    assert record["dependencies"]["numpy"] == np.__version__ and record["dependencies"]["pydantic"] == \
        metadata.version("pydantic")
    assert "pandas" not in record["dependencies"]  # an extra's, not a requirement of cosim's
    assert record["config_source"] == str(config) and record["base_dir"] == str(tmp_path)
    assert record["presets"]["models"]["m"]["num_layers"] == 32
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if shutil.which("git") and head.returncode == 0:
        assert record["git"]["commit"] == head.stdout.strip()
        assert isinstance(record["git"]["dirty"], bool)
    else:
        assert record["git"] is None


def test_git_commit_is_none_outside_a_checkout_of_cosim(tmp_path: Path) -> None:
    """A wheel's folder is no checkout; one inside some other repository is not cosim's checkout either."""
    assert git_commit(tmp_path) is None
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", str(tmp_path / "project")], check=True)
        inside = tmp_path / "project" / ".venv" / "site-packages" / "cosim"
        inside.mkdir(parents=True)
        assert git_commit(inside.resolve()) is None


def test_run_refuses_to_overwrite_a_run_folder_unless_told(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, out = write_scenario(tmp_path), tmp_path / "out"
    assert main(["run", str(config), "-o", str(out), "--no-progress"]) == 0
    before = (out / "summary.json").read_bytes()
    capsys.readouterr()
    assert main(["run", str(config), "-o", str(out), "--no-progress", "--set", "seed=2"]) == 2
    err = capsys.readouterr().err
    # each API names its own remedy: the flag on the command line, the keyword in Python
    assert err == (f"error: {out}: run folder exists and is not empty; pass --overwrite to replace its files, or "
                   "choose another folder with -o\n")
    assert (out / "summary.json").read_bytes() == before
    with pytest.raises(ScenarioError) as taken:
        cosim.run(config, output_dir=out)
    assert str(taken.value) == (f"{out}: run folder exists and is not empty; pass overwrite=True to replace its "
                                "files, or choose another output_dir")
    assert str(pickle.loads(pickle.dumps(taken.value))) == str(taken.value)
    assert main(["run", str(config), "-o", str(out), "--no-progress", "--set", "seed=2", "--overwrite"]) == 0
    assert json.loads((out / "run.json").read_text())["seed"] == 2
    assert cosim.run(config, output_dir=out, overwrite=True).summary["seed"] == 1
    (tmp_path / "empty").mkdir()
    assert cosim.run(config, output_dir=tmp_path / "empty").output_dir == tmp_path / "empty"


def test_submit_refuses_a_taken_local_folder_before_reaching_the_hub(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    config, out = write_scenario(tmp_path), tmp_path / "taken"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    assert main(["submit", str(config), "--hub", "127.0.0.1:9", "-o", str(out), "--no-progress"]) == 2
    assert f"{out}: run folder exists and is not empty" in capsys.readouterr().err


@pytest.mark.skipif(not (REPLAY_DATA / "scenarios").is_dir(), reason=f"{REPLAY_DATA} is absent")
def test_replay_refuses_a_taken_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("an earlier replay")
    scenario_file = REPLAY_DATA / "scenarios" / "rtx4090_llama-3.1-8b_tp1.json"
    assert main(["replay", str(scenario_file), "-o", str(tmp_path), "--no-plots"]) == 2
    assert f"{tmp_path}: run folder exists and is not empty" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_run_with_its_backends_in_process_writes_the_same_folder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`cosim run --in-process` calls the roofline in the hub's thread, not over gRPC: the same steps,
    the same folder byte for byte. Only the summary's count of backend calls differs: in process the
    roofline's compiled model times each miss where it happens and looks nothing ahead."""
    bench = REPO / "examples" / "bench" / "chat-10k.yaml"
    sets = ["--set", "workload.requests=300", "--no-progress"]
    assert main(["run", str(bench), "-o", str(tmp_path / "grpc"), *sets]) == 0
    monkeypatch.setattr(runner, "_launch", lambda name, *args: pytest.fail(f"backend {name} was served over gRPC"))
    assert main(["run", str(bench), "-o", str(tmp_path / "direct"), "--in-process", *sets]) == 0
    for name in OUTPUTS:
        assert (tmp_path / "grpc" / name).read_bytes() == (tmp_path / "direct" / name).read_bytes(), name
    grpc_summary, direct_summary = (summary_without_wall_time(tmp_path / run) for run in ("grpc", "direct"))
    grpc_backends, direct_backends = grpc_summary.pop("backends"), direct_summary.pop("backends")
    assert grpc_summary == direct_summary
    assert grpc_backends["steps_timed"] == direct_backends["steps_timed"]
    assert 0 < grpc_backends["rpcs"] < direct_backends["rpcs"]
