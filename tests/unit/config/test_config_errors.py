"""Bad input is a one-line error naming the location, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cosim.hub.cli import main
from tests.paths import EXAMPLES

QUICKSTART = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())


def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict, *extra: str) -> tuple[int, str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(config))
    code = main(["run", str(path), "-o", str(tmp_path / "out"), "--no-progress", *extra])
    return code, capsys.readouterr().err


def edited(**changes: object) -> dict:
    config = yaml.safe_load(yaml.safe_dump(QUICKSTART))
    config["workload"]["requests"] = 5
    for path, value in changes.items():
        node = config
        *parents, last = path.split("__")
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[last] = value
    return config


@pytest.mark.parametrize(("changes", "expected"), [
    ({"clients__0__model": "gpt5"}, "clients[0].model: unknown model 'gpt5'"),
    ({"clients__0__backend": "nope"}, "clients[0].backend: unknown backend 'nope'"),
    ({"clients__0__hardware__device": "tpu"}, "clients[0].hardware.device: unknown device 'tpu'"),
    ({"hardware": {"a100": {"preset": "H1000"}}}, "hardware.a100.preset"),
    ({"models": {"llama3-8b": {"preset": "llama-9"}}}, "models.llama3-8b.preset"),
    ({"slo": {"ttft_s": {"p90": -1}}}, "slo.ttft_s.p90: must be > 0, got -1"),
    ({"clients__0__scheduler__chunk_size": -5},
     "clients[0].scheduler.chunk_size: input should be greater than 0, got -5"),
    ({"clients__0__role": "decode"}, "a decode client needs a prefill (or mixed) client"),
    ({"workload__models": {"llama3-8b": 1, "other": 1}}, "workload.models.other: unknown model"),
    ({"models": {"llama3-8b": {"preset": "meta-llama/Llama-2-70b-hf"}}}, "clients[0].hardware: model"),
    ({"workload__trace": {"path": "missing.csv", "format": "azure"},
      "workload__input_tokens": {"dist": "trace"}}, "missing.csv"),
])
def test_bad_config_is_one_line_error_with_exit_code_2(tmp_path, capsys, changes, expected) -> None:
    code, err = run_cli(tmp_path, capsys, edited(**changes))
    assert code == 2
    assert expected in err, err
    assert "Traceback" not in err


def test_malformed_trace_row_names_file_and_line(tmp_path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n0.1,ten,5\n")
    config = edited(workload={"requests": 2, "trace": {"path": str(trace), "format": "csv"},
                              "arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"},
                              "output_tokens": {"dist": "trace"}})
    code, err = run_cli(tmp_path, capsys, config)
    assert code == 2 and f"{trace}:3" in err, err


def test_set_override_reaches_the_field_and_bad_override_is_named(tmp_path, capsys) -> None:
    code, err = run_cli(tmp_path, capsys, edited(), "--set", "clients[0].scheduler.max_num_seqs=0")
    assert code == 2 and "clients[0].scheduler.max_num_seqs: input should be greater than 0, got 0" in err
    code, err = run_cli(tmp_path, capsys, edited(), "--set", "clients[3].name=x")
    assert code == 2 and "--set clients[3].name" in err


def test_unreadable_yaml_names_the_line(tmp_path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("seed: 1\nmodels: {a: [\n")
    assert main(["validate", str(path)]) == 2
    assert f"{path}:" in capsys.readouterr().err
