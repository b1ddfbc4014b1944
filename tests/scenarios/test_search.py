"""Deployment search end to end: Python, CLI, process pool and Ray give one ranking; resume; infeasible rows."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

import cosim
from cosim.hub.cli import main
from cosim.hub.studies.search import SearchResult, enumerate_candidates, load_space

from .local_ray import local_ray

# Llama-2-13B (26 GB of fp16 weights) on L40S (48 GB) and RTX-4090 (24 GB): on the 4090 only TP=2 fits.
SPACE: dict[str, Any] = {
    "base": {
        "seed": 3,
        "models": {"m": {"preset": "meta-llama/Llama-2-13b-hf"}},
        "hardware": {"h": {"preset": "L40S"}},
        "backends": {"lin": {"python": "cosim.adapters.sdk.testing:LinearBackend",
                             "options": {"step_ns": 5_000_000, "per_seq_ns": 100_000}}},
        "clients": [{"name": "c0", "model": "m", "backend": "lin", "hardware": {"device": "h"}}],
        "workload": {"requests": 40, "arrival": {"process": "poisson", "rate_per_s": 10},
                     "input_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 8}},
        "slo": {"ttft_s": {"p90": 0.05}, "tpot_s": {"p90": 0.02}},
    },
    "devices": ["L40S", "RTX-4090"],
    "prices": {"RTX-4090": 0.5},
    "budget": {"max_devices": 2},
    "parallelism": {"tensor": [1, 2]},
    "scheduler": {"batching": ["continuous"], "max_num_seqs": [8]},
    "goodput": {"replications": 2, "tolerance": 0.15},
}


def ranking(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must not depend on the executor (wall time may)."""
    return [(r["rank"], r["label"], r["status"], r.get("goodput_rps"), r.get("goodput_upper_rps"), r["key"])
            for r in rows]


def test_space_enumerates_every_shape_within_the_budget() -> None:
    space, folder = load_space(SPACE)
    candidates, _ = enumerate_candidates(space, folder)
    labels = [c.label for c in candidates]
    assert labels == [f"{d} {p} {s} continuous s8" for d in ("L40S", "RTX-4090")
                      for p, s in (("tp1pp1", "1m"), ("tp1pp1", "2m"), ("tp1pp1", "1p1d"), ("tp2pp1", "1m"))]
    assert [c.cost_per_hour_usd for c in candidates] == [0.86, 1.72, 1.72, 1.72, 0.5, 1.0, 1.0, 1.0]


def test_search_ranks_by_goodput_per_dollar_and_reports_infeasible_configs(serial: SearchResult) -> None:
    rows = serial.rows
    assert len(rows) == 8 and serial.num_evaluated == 5
    live = [r for r in rows if r["rank"] is not None]
    assert [r["rank"] for r in live] == list(range(1, len(live) + 1))
    per_usd = [r["goodput_per_usd"] for r in live]
    assert per_usd == sorted(per_usd, reverse=True)
    assert all(r["goodput_per_usd"] == pytest.approx(r["goodput_rps"] * 3600 / r["cost_per_hour_usd"]) for r in live)
    infeasible = serial.infeasible
    assert sorted(r["label"] for r in infeasible) == [
        "RTX-4090 tp1pp1 1m continuous s8", "RTX-4090 tp1pp1 1p1d continuous s8", "RTX-4090 tp1pp1 2m continuous s8"]
    assert all("26.0 GB of weights" in r["reason"] and "RTX-4090" in r["reason"] for r in infeasible)
    assert any(r["pareto"] for r in live)
    out = serial.output_dir
    assert out is not None
    for name in ("results.csv", "results.md", "pareto.png", "results.jsonl"):
        assert (out / name).stat().st_size > 0
    assert "needs 26.0 GB" in (out / "results.md").read_text()


def test_cli_search_with_a_process_pool_ranks_as_python_does(serial: SearchResult, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    assert main(["search", str(space), "-o", str(tmp_path / "out"), "--workers", "2", "--no-progress",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert ranking(rows) == ranking(serial.rows)
    assert (tmp_path / "out" / "results.csv").read_text() == (serial.output_dir / "results.csv").read_text()


def test_interrupted_search_resumes_from_its_checkpoint(serial: SearchResult, tmp_path: Path) -> None:
    assert serial.output_dir is not None
    lines = (serial.output_dir / "results.jsonl").read_text().splitlines()
    # Keep the infeasible rows and two evaluated ones (their final lines, not the paused rounds before),
    # then a line torn by the interruption.
    rows = [json.loads(line) for line in lines]
    kept = [line for line, row in zip(lines, rows) if row["status"] != "ok"][:3] + \
        [line for line, row in zip(lines, rows) if row["status"] == "ok" and not row.get("paused")][:2]
    (tmp_path / "results.jsonl").write_text("\n".join(kept) + '\n{"key": "tor')
    resumed = cosim.search(SPACE, output_dir=tmp_path)
    assert resumed.num_evaluated == 3
    assert ranking(resumed.rows) == ranking(serial.rows)


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'cosim[ray]')")
def test_search_on_a_local_ray_instance_ranks_as_locally(serial: SearchResult, tmp_path: Path) -> None:
    with local_ray():
        on_ray = cosim.search(SPACE, output_dir=tmp_path, ray="auto")
    assert on_ray.num_evaluated == 5
    assert ranking(on_ray.rows) == ranking(serial.rows)
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
