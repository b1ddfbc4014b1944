"""``cosim predict collective|transfer`` through the gRPC backend."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cosim.hub.cli.predict_network import register_predict
from cosim.hub.errors import ScenarioError
from tests import paths

EXAMPLES = paths.EXAMPLES / "network"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cosim predict")
    register_predict(parser.add_subparsers(required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_collective_prints_the_worked_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["collective", "--network", str(EXAMPLES / "ring8.yml"), "--system", str(EXAMPLES / "ring8_ideal.json"),
                "--collective", "all_reduce", "--size-bytes", str(1 << 20)]) == 0
    assert capsys.readouterr().out == "41189 ns\n"  # the unit said: the simulated time in nanoseconds


def test_transfer_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["transfer", "--network", str(EXAMPLES / "network.yml"), "--system", str(EXAMPLES / "system.json"),
                "--src-npus", "0,1", "--dst-npus", "8,9", "--size-bytes", str(1 << 30), "--layers", "32",
                "--json"]) == 0
    duration = json.loads(capsys.readouterr().out)["duration_ns"]
    # 512 MiB per NPU in 32 layers of 2^24 B at 25 GiB/s = 26.84 B/ns: 31 x 625000 injected back to back,
    # then the last layer: floor(2 hops x 2000 + 625000) + endpoint delay 10.
    assert duration == 31 * 625000 + 629000 + 10


def test_npu_out_of_range_names_the_option() -> None:
    with pytest.raises(ScenarioError, match="--dst-npus.*out of range"):
        run(["transfer", "--network", str(EXAMPLES / "network.yml"), "--src-npus", "0", "--dst-npus", "99",
             "--size-bytes", "10"])


def test_bad_network_file_is_a_scenario_error(tmp_path: Path) -> None:
    path = tmp_path / "network.yml"
    path.write_text("topology: [ Hypercube ]\nnpus_count: [4]\nbandwidth: [1]\nlatency: [1]\n")
    with pytest.raises(ScenarioError, match=r"topology\[0\]"):
        run(["collective", "--network", str(path), "--collective", "all_gather", "--size-bytes", "10"])
