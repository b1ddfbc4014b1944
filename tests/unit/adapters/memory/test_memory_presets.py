"""Memory tier presets and the ``cosim predict kv`` command."""

from __future__ import annotations

import argparse
import json

import pytest

from cosim.adapters.memory import levels_from_presets, load_presets
from cosim.hub.cli.predict_kv import register_predict
from cosim.hub.errors import ScenarioError


def test_presets_carry_mist_table_v_and_validation_figures_with_sources() -> None:
    presets = load_presets()
    figures = {name: (p["capacity_bytes"], p["bandwidth_gbps"], p["latency_ns"]) for name, p in presets.items()}
    assert figures["lpddr"][:2] == (10**12, 128.0)
    assert figures["platform-shared"][:2] == (4 * 10**12, 32.0)
    assert figures["rack-shared"][:2] == (32 * 10**12, 2.0)
    assert figures["dcn"][1:] == (128.0, 20_000_000)
    assert figures["ddr4"][1:] == (150.0, 80)
    assert figures["nvme"][1:] == (7.0, 50_000)
    assert (presets["platform-shared"]["shares"], presets["rack-shared"]["shares"]) == (4, 32)
    assert all("MIST" in p["source"] for p in presets.values())


def test_levels_from_presets_builds_levels_in_order() -> None:
    levels = levels_from_presets(["lpddr", "rack-shared"], hit_rates=[0.5, 0.9],
                                 shared_by={"rack-shared": ["a", "b"]})
    assert [(lv.name, lv.hit_rate, list(lv.shared_by)) for lv in levels] == [
        ("lpddr", 0.5, []), ("rack-shared", 0.9, ["a", "b"])]
    assert levels[1].capacity_bytes == 32 * 10**12
    assert [lv.hit_rate for lv in levels_from_presets(["ddr4", "nvme"])] == [1.0, 1.0]


def test_unknown_presets_and_mismatched_hit_rates_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown memory preset.*'hbm9'"):
        levels_from_presets(["lpddr", "hbm9"])
    with pytest.raises(ValueError, match="1 hit rates for 2 levels"):
        levels_from_presets(["lpddr", "nvme"], hit_rates=[0.5])


def predict_kv(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    register_predict(parser.add_subparsers())
    args = parser.parse_args(["kv", *argv])
    return int(args.handler(args))


def test_predict_kv_prints_the_formula_through_grpc(capsys: pytest.CaptureFixture[str]) -> None:
    # 0.5 * (100 + 1e6/128) + 0.5 * 0.9 * (5000 + 1e6/2) = 3956.25 + 227250, rounded up.
    assert predict_kv("--levels", "lpddr,rack-shared", "--hit-rates", "0.5,0.9", "--bytes", "1e6",
                      "--kv-bytes-per-token", "1000", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["duration_ns"], out["recompute_tokens"], out["level"]) == (231_207, 50, "lpddr")
    assert predict_kv("--levels", "nvme", "--bytes", "7000000") == 0
    assert "retrieval time: 1050000 ns" in capsys.readouterr().out  # 50 µs + 7 MB at 7 GB/s


@pytest.mark.parametrize(("argv", "where"), [
    (["--levels", "lpddr,warp", "--bytes", "10"], "--levels"),
    (["--levels", "lpddr", "--hit-rates", "1.5", "--bytes", "10"], "--hit-rates"),
    (["--levels", "lpddr,nvme", "--hit-rates", "0.5", "--bytes", "10"], "--hit-rates"),
    (["--levels", "lpddr", "--bytes", "0"], "--bytes"),
])
def test_predict_kv_reports_bad_input_as_a_scenario_error(argv: list[str], where: str) -> None:
    with pytest.raises(ScenarioError) as err:
        predict_kv(*argv)
    assert err.value.where == where
