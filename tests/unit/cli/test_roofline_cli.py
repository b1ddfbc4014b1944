"""`cosim predict step` and `cosim calibrate roofline` command modules."""

from __future__ import annotations

import argparse
import json

import pytest

from cosim.hub.cli import calibrate, predict_step
from cosim.hub.errors import ScenarioError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    predict_step.register_predict(commands.add_parser("predict").add_subparsers())
    calibrate.register(commands)
    return parser


def test_parse_batch() -> None:
    assert predict_step.parse_batch("2048:0, 1:900") == ([2048, 1], [0, 900])
    with pytest.raises(ScenarioError, match=r"--batch: entry 1 'x:3'"):
        predict_step.parse_batch("1:2,x:3")
    with pytest.raises(ScenarioError, match="--batch"):
        predict_step.parse_batch("0:5")


def test_predict_step_json_goes_through_grpc(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["predict", "step", "--backend", "roofline", "--model", "meta-llama/Llama-2-70b-hf",
                                 "--device", "H100-SXM", "--tp", "2", "--batch", "1:900,1:900", "--json"])
    assert args.handler(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["duration_ns"] > 0 and "mlp_down" in out["breakdown"]


def test_predict_step_bad_input_is_a_scenario_error() -> None:
    parser = _parser()
    for argv, where in ((["--model", "no-such-model", "--device", "H100-SXM"], "--model"),
                        (["--model", "llama2-70b", "--device", "H100-SXM", "--tp", "3"], "--model/--device/--tp")):
        args = parser.parse_args(["predict", "step", "--batch", "1:10", *argv])
        with pytest.raises(ScenarioError, match=where):
            args.handler(args)


def test_calibrate_rejects_a_missing_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = _parser().parse_args(["calibrate", "roofline", "--data", str(tmp_path / "none.csv")])
    with pytest.raises(ScenarioError, match="--data"):
        args.handler(args)
