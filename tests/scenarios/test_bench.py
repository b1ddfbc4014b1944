"""`cosim bench NAME --json` prints the documented keys for every scenario (speed is measured, not tested)."""

from __future__ import annotations

import json

import pytest

from cosim.hub.cli import main
from cosim.hub.studies.bench import SCENARIOS

KEYS = {"scenario", "requests", "wall_s", "requests_per_wall_s", "steps_per_wall_s", "rpcs_per_step",
        "cache_hit_rate", "peak_rss_mb", "grpc_over_inprocess", "native"}


@pytest.mark.parametrize("name", SCENARIOS)
def test_bench_scenario_runs_and_reports_its_figures(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", name, "--requests", "24", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert set(figures) >= KEYS and figures["scenario"] == name and figures["requests"] == 24
    assert figures["grpc_over_inprocess"] > 0 and 0 < figures["rpcs_per_step"] <= 1.5


def test_repeated_bench_keeps_the_fastest_runs_of_the_same_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    figures = []
    for repeat in ("1", "3"):
        assert main(["bench", "mixed", "--requests", "24", "--repeat", repeat, "--json"]) == 0
        figures.append(json.loads(capsys.readouterr().out))
    once, thrice = figures
    for key in ("requests", "steps", "rpcs_per_step", "cache_hit_rate", "sim_time_s"):
        assert once[key] == thrice[key], key
    # The ratio of the unrounded walls, so within what rounding each wall to 1 ms allows.
    wall, inprocess, half_ms = thrice["wall_s"], thrice["inprocess_wall_s"], 0.0005
    low, high = (wall - half_ms) / (inprocess + half_ms), (wall + half_ms) / (inprocess - half_ms)
    assert low - half_ms <= thrice["grpc_over_inprocess"] <= high + half_ms
