"""`cosim bench NAME --json` prints the documented keys for every scenario (speed is measured, not tested)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import cosim
from cosim.hub.cli import main
from cosim.hub.studies.bench import BENCH_DIR, NAMED_ONLY, SCENARIOS

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


needs_aiconfigurator = pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                                          reason="aiconfigurator-core is not installed: pip install "
                                                 "'cosim[aiconfigurator]' (the dev extra includes it)")


@needs_aiconfigurator
def test_the_aisimulate_matched_scenario_runs_when_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert "aisimulate-matched" in NAMED_ONLY and "aisimulate-matched" not in SCENARIOS  # not run by default
    assert main(["bench", "aisimulate-matched", "--requests", "24", "--no-compare", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["scenario"] == "aisimulate-matched" and figures["requests"] == 24


@needs_aiconfigurator
def test_the_aisimulate_matched_workload_finishes_and_hits_its_shared_prefix(tmp_path: Path) -> None:
    """Every request finishes with the tokens it asked for; each after the first reuses the shared prompt."""
    result = cosim.run(BENCH_DIR / "aisimulate-matched.yaml", overrides=["workload.requests=40"],
                       output_dir=tmp_path / "run", in_process=True)
    requests = sorted(result.requests, key=lambda r: r.id)
    assert len(requests) == 40 == result.summary["requests"]["completed"]
    assert all(r.input_tokens == 1024 and r.generated_tokens == r.output_tokens == 256 for r in requests)
    assert result.summary["output_tokens"] == 40 * 256
    cached = [r.cached_tokens for r in requests]
    # The first prompt meets a cold cache; later ones reuse exactly the 256 shared tokens (16 blocks),
    # never their own 768, which no other request holds.
    assert cached[0] == 0 and set(cached) <= {0, 256} and cached.count(256) >= 35
    assert result.summary["prefix_cache_hit_rate"] == pytest.approx(sum(cached) / (40 * 1024))


def test_the_vidur_matched_scenario_runs_when_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert "vidur-matched" in NAMED_ONLY and "vidur-matched" not in SCENARIOS  # not run by default
    assert main(["bench", "vidur-matched", "--requests", "24", "--no-compare", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["scenario"] == "vidur-matched" and figures["requests"] == 24


def test_the_vidur_matched_workload_finishes_with_no_prefix_cached(tmp_path: Path) -> None:
    """Every request finishes with the tokens it asked for, and none reuses another's (Vidur has no prefix cache)."""
    result = cosim.run(BENCH_DIR / "vidur-matched.yaml", overrides=["workload.requests=30"],
                       output_dir=tmp_path / "run", in_process=True)
    requests = result.requests
    assert len(requests) == 30 == result.summary["requests"]["completed"]
    assert all(r.input_tokens == 512 and r.generated_tokens == r.output_tokens == 128 for r in requests)
    assert result.summary["prefix_cache_hit_rate"] == 0.0
