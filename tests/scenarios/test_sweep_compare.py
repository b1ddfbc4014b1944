"""``cosim sweep`` (a run per grid point, sweep.csv, latency-vs-load plot) and ``cosim compare``."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import cosim
from cosim.hub.cli import main
from cosim.hub.errors import BackendError, ScenarioError
from cosim.hub.metrics.comparison_plots import plot_latency_vs_load
from cosim.hub.studies import runner
from tests.scenarios.helpers import scenario
from tests.scenarios.local_ray import local_ray

SLO = {"ttft_s": {"p90": 0.0005}, "tpot_s": {"p90": 0.00002, "mean": 0.00001}}


def write_scenario(folder: Path, **changes: Any) -> Path:
    config = scenario(per_token_ns=20, slo=SLO, workload={
        "requests": 30, "arrival": {"process": "poisson", "rate_per_s": 1000},
        "input_tokens": {"dist": "uniform", "low": 10, "high": 300},
        "output_tokens": {"dist": "uniform", "low": 2, "high": 20}}, **changes)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def no_server(name: str, *args: Any) -> None:
    raise AssertionError(f"backend {name} was served over gRPC")


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_sweep_writes_a_run_per_grid_point_and_sweep_csv(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    config, out = write_scenario(tmp_path, output={"plots": True}), tmp_path / "sweep"
    args = ["sweep", str(config), "--vary", "workload.arrival.rate_per_s=1000,50000",
            "--vary", "clients[0].scheduler.max_num_seqs=1,8", "--set", "workload.requests=20", "-o", str(out)]
    assert main(args) == 0
    rows = read_csv(out / "sweep.csv")
    assert [(r["workload.arrival.rate_per_s"], r["clients[0].scheduler.max_num_seqs"]) for r in rows] == [
        ("1000", "1"), ("1000", "8"), ("50000", "1"), ("50000", "8")]
    assert [r["point"] for r in rows][:2] == ["000-rate_per_s=1000-max_num_seqs=1",
                                              "001-rate_per_s=1000-max_num_seqs=8"]
    assert list(rows[0])[3:] == ["completed", "ttft_s_mean", "ttft_s_p90", "tpot_s_mean", "tpot_s_p90", "e2e_s_mean",
                                 "e2e_s_p90", "throughput_requests_per_s", "throughput_output_tokens_per_s",
                                 "goodput_requests_per_s", "slo_attainment", "energy_per_output_token_j",
                                 "tokens_per_j", "error"]
    for row in rows:
        point = out / row["point"]
        summary = json.loads((point / "summary.json").read_text())
        ran = yaml.safe_load((point / "config.yaml").read_text())
        assert ran["workload"]["arrival"]["rate_per_s"] == float(row["workload.arrival.rate_per_s"])
        assert ran["clients"][0]["scheduler"]["max_num_seqs"] == int(row["clients[0].scheduler.max_num_seqs"])
        assert ran["workload"]["requests"] == int(row["completed"]) == 20
        assert float(row["ttft_s_p90"]) == summary["latency"]["ttft_s"]["p90"]
        assert float(row["e2e_s_mean"]) == summary["latency"]["e2e_s"]["mean"]
        assert float(row["goodput_requests_per_s"]) == summary["goodput_requests_per_s"]
        assert float(row["slo_attainment"]) == summary["slo_attainment"] and row["error"] == ""
        assert float(row["tokens_per_j"]) == summary["energy"]["tokens_per_j"] > 0
        assert not (point / "plots").exists()  # points draw no plots of their own unless --run-plots
    # one sequence at a time under a burst queues; eight do not
    assert float(rows[2]["ttft_s_p90"]) > 2 * float(rows[3]["ttft_s_p90"])
    assert (out / "plots" / "latency_vs_load.png").stat().st_size > 0
    check_sweep_report(out, rows, num_plots=1)
    assert "[4/4] 003-rate_per_s=50000-max_num_seqs=8" in capsys.readouterr().out
    assert main(args) == 2  # the sweep folder is taken
    assert "run folder exists and is not empty" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0



def check_sweep_report(out: Path, rows: list[dict[str, str]], num_plots: int) -> None:
    """report.html holds the sweep's plots and a row per point: its link to the point's own report, its varied
    values and its metrics in the units of the column labels."""
    page = (out / "report.html").read_text()
    assert page.count('<img class="plot"') == page.count('src="data:image/png;base64,') == num_plots
    assert "<th>TTFT p90 (ms)</th>" in page and "<th>SLO attainment (%)</th>" in page
    assert "<td>tpot_s</td><td>mean</td><td class=\"n\">0.01</td>" in page  # the config's SLO target, in ms
    for row in rows:
        href = f"{row['point']}/report.html"
        assert f'<a href="{href}">{row["point"]}</a>' in page and (out / href).is_file()
        varied = [row[key] for key in list(row)[1:list(row).index("completed")]]
        metrics = [row["completed"], *(f"{float(row[key]) * 1000:.4g}" for key in ("ttft_s_mean", "ttft_s_p90"))]
        cells = "".join(f"<td>{v}</td>" for v in varied) + "".join(f"<td class=\"n\">{v}</td>" for v in metrics)
        assert cells in page, cells


def test_a_sweep_in_process_writes_the_same_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--in-process` reaches each point's `python:` backend without gRPC; the points' results do not change."""
    config = write_scenario(tmp_path)
    args = ["sweep", str(config), "--vary", "workload.arrival.rate_per_s=1000,50000", "--no-plots"]
    assert main([*args, "-o", str(tmp_path / "grpc")]) == 0
    check_sweep_report(tmp_path / "grpc", read_csv(tmp_path / "grpc" / "sweep.csv"), num_plots=0)
    assert "No plots (<code>--no-plots</code>)" in (tmp_path / "grpc" / "report.html").read_text()
    monkeypatch.setattr(runner, "_launch", no_server)
    assert main([*args, "-o", str(tmp_path / "direct"), "--in-process"]) == 0
    grpc_rows, direct_rows = (read_csv(tmp_path / name / "sweep.csv") for name in ("grpc", "direct"))
    assert grpc_rows == direct_rows and len(grpc_rows) == 2
    for row in grpc_rows:
        assert (tmp_path / "grpc" / row["point"] / "requests.csv").read_bytes() == \
            (tmp_path / "direct" / row["point"] / "requests.csv").read_bytes()

def test_a_sweep_on_worker_processes_writes_sweep_csv_byte_for_byte(tmp_path: Path) -> None:
    """`--workers 2` runs the points two at a time in processes of their own, finishing in any order; sweep.csv
    keeps the grid's order and every byte, and so does each point's run folder."""
    config = write_scenario(tmp_path)
    args = ["sweep", str(config), "--vary", "workload.arrival.rate_per_s=1000,50000,200000", "--no-plots"]
    assert main([*args, "-o", str(tmp_path / "serial")]) == 0
    assert main([*args, "-o", str(tmp_path / "pool"), "--workers", "2"]) == 0
    serial, pool = (tmp_path / name for name in ("serial", "pool"))
    assert (serial / "sweep.csv").read_bytes() == (pool / "sweep.csv").read_bytes()
    for row in read_csv(serial / "sweep.csv"):
        assert (serial / row["point"] / "requests.csv").read_bytes() == \
            (pool / row["point"] / "requests.csv").read_bytes()


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'cosim[ray]')")
@pytest.mark.slow
def test_a_sweep_as_ray_tasks_writes_the_same_rows(tmp_path: Path) -> None:
    config = write_scenario(tmp_path)
    vary = ["workload.arrival.rate_per_s=1000,50000"]
    serial = cosim.sweep(config, vary, output_dir=tmp_path / "serial", plots=False)
    with local_ray():
        on_ray = cosim.sweep(config, vary, output_dir=tmp_path / "ray", plots=False, ray="auto")
    assert (tmp_path / "serial" / "sweep.csv").read_bytes() == (tmp_path / "ray" / "sweep.csv").read_bytes()
    assert [r["point"] for r in on_ray.rows] == [r["point"] for r in serial.rows]


def test_sweep_df_types_the_varied_values(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    config = write_scenario(tmp_path)
    result = cosim.sweep(config, ["workload.arrival.rate_per_s=1000,2.5e4", "output.plots=false,true"],
                         output_dir=tmp_path / "out", plots=False, overrides=["workload.requests=5"])
    frame = result.df()
    assert list(frame.columns) == list(result.rows[0])
    assert frame["workload.arrival.rate_per_s"].tolist() == [1000, 1000, 25000.0, 25000.0]
    assert frame["output.plots"].tolist() == [False, True, False, True] and frame["output.plots"].dtype == bool
    assert frame["completed"].tolist() == [5, 5, 5, 5]


def test_sweep_checks_every_point_before_the_first_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, out = write_scenario(tmp_path), tmp_path / "sweep"
    assert main(["sweep", str(config), "--vary", "clients[0].scheduler.max_num_seqs=4,-1", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "sweep point clients[0].scheduler.max_num_seqs=-1" in err and "max_num_seqs" in err
    assert not out.exists()


def test_sweep_refuses_a_point_whose_prompts_no_client_can_serve(tmp_path: Path) -> None:
    """As cosim validate does (found by fuzzing: each point's run refused it instead, and sweep.csv was lost)."""
    config, out = write_scenario(tmp_path), tmp_path / "sweep"
    with pytest.raises(ScenarioError, match=r"sweep point clients\[0\]\.scheduler\.max_num_batched_tokens=50: .*"
                                             r"workload\.input_tokens: request \d+ .* can never be served"):
        cosim.sweep(config, ["clients[0].scheduler.max_num_batched_tokens=4096,50"], output_dir=out, plots=False)
    assert not out.exists()


def test_a_sweep_whose_every_point_fails_still_writes_sweep_csv(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(config: Any, **kwargs: Any) -> None:
        raise BackendError("unreachable", backend="lin")

    monkeypatch.setattr(runner, "run", failing)
    result = cosim.sweep(write_scenario(tmp_path), ["workload.requests=3,4"], output_dir=tmp_path / "s", plots=False)
    assert result.failed == ["000-requests=3", "001-requests=4"]
    assert [r["error"] for r in read_csv(tmp_path / "s" / "sweep.csv")] == ["backend 'lin': unreachable"] * 2


def test_latency_vs_load_plot_draws_the_slo_lines() -> None:
    rows = [{"workload.arrival.rate_per_s": str(rate), "ttft_s_mean": 0.0001 * rate, "ttft_s_p90": 0.0002 * rate,
             "tpot_s_mean": 0.00001, "tpot_s_p90": 0.00002, "e2e_s_mean": 0.01, "e2e_s_p90": 0.02,
             "throughput_requests_per_s": rate, "goodput_requests_per_s": rate / 2} for rate in (1, 2, 4)]
    fig = plot_latency_vs_load(Path("/dev/null"), rows, ["workload.arrival.rate_per_s"], SLO)
    ttft, tpot, e2e, throughput = fig.axes
    assert [line.get_label() for line in ttft.lines] == ["mean", "p90", "SLO p90 <= 0.5 ms"]
    assert list(ttft.lines[-1].get_ydata()) == [0.5, 0.5]  # ms
    assert [line.get_label() for line in tpot.lines][2:] == ["SLO mean <= 0.01 ms", "SLO p90 <= 0.02 ms"]
    assert len(e2e.lines) == 2 and list(throughput.lines[1].get_ydata()) == [0.5, 1.0, 2.0]
    assert list(ttft.lines[1].get_xdata()) == [1.0, 2.0, 4.0]


def test_compare_prints_runs_side_by_side_and_writes_overlaid_cdfs(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "burst.yaml"
    config.write_text(yaml.safe_dump(scenario(slo={"ttft_s": {"p90": 0.000005}})))  # 4 requests at t=0, 1 us steps
    for name, seqs in (("four", 4), ("one", 1)):
        assert main(["run", str(config), "-o", str(tmp_path / name), "--no-progress",
                     "--set", f"clients[0].scheduler.max_num_seqs={seqs}"]) == 0
    capsys.readouterr()
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "four"), str(tmp_path / "one"), "-o", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["metric", "four", "one"]
    # four at a time: every TTFT 1 us; one at a time: 1 + 3k us (prefill, two decodes each before the next)
    assert lines[2].split() == ["TTFT", "mean", "(ms)", "0.001", "0.0055", "(+450.0%)"]
    assert "SLO attainment (%)" in lines[-4] and lines[-4].split()[-2:] == ["50", "(-50.0%)"]
    # the same tokens in more steps, one sequence at a time: fewer tokens per joule
    assert "output tokens per joule" in lines[-2] and lines[-2].split()[-1].startswith("(-")
    table = read_csv(out / "compare.csv")
    assert table[1] == {"metric": "TTFT mean (ms)", "four": "0.001", "one": "0.0055"}
    for metric in ("ttft", "tpot", "e2e"):
        assert (out / f"{metric}_cdf.png").stat().st_size > 0
    page = (out / "report.html").read_text()  # the printed table, the runs' links, the SLO and the CDFs on one page
    assert "<tr><td>TTFT mean (ms)</td><td class=\"n\">0.001</td><td class=\"n\">0.0055 (+450.0%)</td></tr>" in page
    assert '<a href="../four/report.html">four</a>' in page and '<a href="../one/report.html">one</a>' in page
    assert "<td>ttft_s</td><td>p90</td><td class=\"n\">0.01</td>" in page  # 5 us, in ms
    assert page.count('src="data:image/png;base64,') == 3
    assert page.index("ttft_cdf.png") < page.index("tpot_cdf.png") < page.index("e2e_cdf.png")


def test_compare_names_a_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(tmp_path), "-o", str(tmp_path / "cmp")]) == 2
    assert f"{tmp_path}: not a run folder (no summary.json)" in capsys.readouterr().err
