"""Training pieces of the regression backend on synthetic data: tables, grids, the generic step CSV."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from cosim.adapters.regression.artifact import load_artifact, save_artifact
from cosim.adapters.regression.curves import fit_grid, fit_table
from cosim.adapters.regression.data import holdout_mask, read_step_csv
from cosim.adapters.regression.report import render_report
from cosim.adapters.regression.training import Evaluation, _errors, is_unsteady, train_step
from cosim.hub.cli import main


def test_table_interpolates_and_extrapolates_in_proportion() -> None:
    x = np.array([1.0, 2.0, 4.0, 4.0, 8.0])
    table = fit_table(x, np.column_stack([x * 2, x * 0 + 1]), ("a", "b"), rel_tol=0.0)
    assert table(3.0).tolist() == [6.0, 1.0]
    assert table(16.0)[0] == pytest.approx(32.0) and table(0.5)[0] == 2.0


def test_tiled_column_keeps_the_jump_after_a_tile_boundary() -> None:
    """A GEMM-like column stepping up right after 128 tokens is not smoothed across the boundary."""
    x = np.array([104.0, 112.0, 120.0, 136.0, 144.0])
    gemm = np.where(x <= 128, 1.0, 2.0)
    table = fit_table(x, np.column_stack([gemm, x]), ("gemm", "norm"), rel_tol=0.0, tile=128, tiled=("gemm",))
    assert table(128.0).tolist() == [1.0, 128.0]  # the boundary count belongs to the tile below
    assert table(124.0)[0] == 1.0 and table(129.0)[0] == 2.0 and table(132.0)[0] == 2.0


def test_values_left_out_are_filled_from_their_column() -> None:
    x = np.array([1.0, 2.0, 3.0])
    table = fit_table(x, np.array([[1.0, 5.0], [np.nan, 6.0], [3.0, 7.0]]), ("a", "b"), rel_tol=0.0)
    assert table(2.0).tolist() == [2.0, 6.0]


def test_grid_is_bilinear_and_knows_its_domain() -> None:
    xs, zs = np.meshgrid([1.0, 2.0], [0.0, 10.0, 20.0], indexing="ij")
    keep = ~((xs == 2.0) & (zs == 20.0))  # a ragged lattice
    grid = fit_grid(xs[keep], zs[keep], (xs + zs)[keep])
    assert grid(1.5, 5.0) == pytest.approx(6.5)
    assert grid.covers(1.0, 20.0) and not grid.covers(2.0, 20.0) and not grid.covers(3.0, 0.0)


def test_holdout_split_is_fixed_and_keeps_configurations_together() -> None:
    keys = [f"cfg{i // 3}" for i in range(300)]
    mask = holdout_mask(keys)
    assert mask.tolist() == holdout_mask(list(keys)).tolist()
    assert all(len(set(mask[i:i + 3])) == 1 for i in range(0, 300, 3))
    assert 0.1 < mask.mean() < 0.3


def test_unsteady_held_out_row_is_counted_but_not_judged() -> None:
    """A row whose median exceeds 1.2x its fastest repeat is left out of MAPE and p90, counted and shown."""
    median, fastest = np.array([1.0, 2.0, 2.5]), np.array([1.0, 1.7, 2.0])  # ratios 1.0, 1.18, 1.25
    unsteady = is_unsteady(median, fastest)
    assert unsteady.tolist() == [False, False, True]
    key = ("h100", "m", "TP1", "op")
    row = _errors(key, np.array([1.06, 2.0, 3.25]), median, unsteady=unsteady)  # APE 0.06, 0, 0.3
    assert (row.num_rows, row.num_unsteady) == (2, 1)
    assert row.mape == pytest.approx(0.03) and row.p90_ape == pytest.approx(0.054)
    assert row.mape_all == pytest.approx(0.12)
    text = render_report({"op": Evaluation(sections={"operators": [row]})}, command="test", speed_us={}, sizes={})
    assert "| h100 | m | TP1 | op | 2 | 3.00% | 5.40% | 0 | 1 | 12.00% | yes |" in text
    assert "| operators | 1 | 3.00% | 3.00% | 3.00% | 5% | 1/1 | 1 | 12.00% |" in text


def write_steps(path: Path, rows: list[str]) -> Path:
    path.write_text("device,model,tensor_parallel,new_tokens,context_tokens,step_time_ms,config\n" + "\n".join(rows))
    return path


def linear_steps(path: Path) -> Path:
    """200 decode steps of 5 ms + 0.2 ms per sequence + 1 us per context token."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(200):
        batch = int(rng.integers(1, 32))
        ctx = rng.integers(100, 2000, batch)
        ms = 5.0 + 0.2 * batch + 0.001 * ctx.sum()
        rows.append(f"h100,lab/model-x,1,{';'.join(['1'] * batch)},{';'.join(map(str, ctx))},{ms:.4f},c{i}")
    return write_steps(path, rows)


def test_generic_step_csv_trains_a_step_artifact(tmp_path: Path) -> None:
    artifact, evaluation = train_step([linear_steps(tmp_path / "steps.csv")])
    assert [r.mape for r in evaluation.sections["step"]][0] < 0.01
    save_artifact(artifact, tmp_path / "a.json")
    assert load_artifact(tmp_path / "a.json").kind == "step"


def test_malformed_step_csv_names_the_line(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "bad.csv", ["h100,m,1,1;1,5,3.0,c0"])
    with pytest.raises(ValueError, match="line 2"):
        read_step_csv(path)


def test_cosim_train_reports_success_on_stdout_not_as_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "a.json"
    with caplog.at_level(logging.WARNING):
        assert main(["train", "regression", "--kind", "step", "--data", str(linear_steps(tmp_path / "s.csv")),
                     "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out} ({out.stat().st_size} bytes) and {out.with_suffix('.md')}\n"
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
