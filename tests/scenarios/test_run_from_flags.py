"""The researcher's command line: ``cosim --version`` and a run from flags alone (no YAML)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import yaml

from cosim.hub.cli import main
from tests.paths import REPO

FLAGS = ["--model", "meta-llama/Llama-3.1-8B", "--device", "H100-SXM", "--tp", "1", "--rate", "5",
         "--requests", "12", "--input-tokens", "512", "--output-tokens", "64"]


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"cosim {metadata.version('cosim')}\n"


def test_a_run_from_flags_alone_writes_the_config_it_made_and_that_config_reruns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", *FLAGS, "-o", "flags", "--no-progress", "--set", "output.plots=false"]) == 0
    assert "12/12 completed" in capsys.readouterr().out
    config = yaml.safe_load(Path("flags/config.yaml").read_text())
    client, = config["clients"]
    assert (config["models"]["model"]["preset"], config["hardware"]["device"]["preset"]) == \
        ("meta-llama/Llama-3.1-8B", "H100-SXM")
    assert config["backends"]["roofline"]["kind"] == "roofline" and client["backend"] == "roofline"
    assert (client["hardware"]["tensor_parallel"], client["hardware"]["count"]) == (1, 1)
    assert client["scheduler"]["batching"] == "chunked" and client["scheduler"]["max_num_seqs"] == 256  # vLLM's
    workload = config["workload"]
    assert workload["requests"] == 12 and workload["arrival"]["process"] == "poisson"
    assert workload["arrival"]["rate_per_s"] == 5
    assert (workload["input_tokens"]["value"], workload["output_tokens"]["value"]) == (512, 64)
    assert main(["run", "flags/config.yaml", "-o", "again", "--no-progress"]) == 0
    assert Path("flags/requests.csv").read_bytes() == Path("again/requests.csv").read_bytes()


def test_flags_left_out_take_vllm_bench_serves_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1000 prompts of 1024 tokens, 128 out, all at once (--request-rate inf); cut by --set, as any config."""
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "Qwen/Qwen3-0.6B", "--device", "A100-80GB", "-o", "d", "--no-progress",
            "--set", "output.plots=false", "--set", "workload.requests=3"]
    assert main(argv) == 0
    workload = yaml.safe_load(Path("d/config.yaml").read_text())["workload"]
    assert workload["arrival"] == {"process": "constant", "at_s": 0.0}
    assert (workload["input_tokens"]["value"], workload["output_tokens"]["value"]) == (1024, 128)
    assert workload["requests"] == 3


@pytest.mark.parametrize(("argv", "expected"), [
    (["run", str(REPO / "examples" / "quickstart.yaml"), "--model", "x", "--tp", "2"],
     f"error: --model --tp: a run takes a config file ({REPO / 'examples' / 'quickstart.yaml'}) or flags alone, "
     "not both; change a config's fields with --set KEY=VALUE"),
    (["run"], "error: --model --device: give a scenario YAML file, or run from flags alone with at least --model "
              "and --device (e.g. --model meta-llama/Llama-3.1-8B --device H100-SXM)"),
    (["run", "--model", "meta-llama/Llama-3.1-8B", "--device", "H1000"],
     "error: hardware.device.preset: unknown device 'H1000'"),
    (["run", "--model", "llama-9", "--device", "H100-SXM"], "error: models.model.preset: unknown model 'llama-9'"),
    (["run", "--model", "meta-llama/Llama-3.1-8B", "--device", "H100-SXM", "--tp", "3"],
     "error: clients[0].hardware.tensor_parallel: 3 does not divide the 32 attention heads"),
])
def test_bad_flags_are_one_line_errors_naming_what_to_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                          expected: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())
