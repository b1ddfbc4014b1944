"""``cosim validate-runs`` (hub/studies/suite): the shipped real runs, rerun and scored.

CI runs ``--fast`` here: the table's shape, finite numbers, and the same numbers on a rerun.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cosim.hub.cli import main
from cosim.hub.config.loading import parse_config
from cosim.hub.errors import ScenarioError
from cosim.hub.studies.suite import SuiteResult, blis, format_markdown, run_suite, select_runs
from cosim.hub.studies.suite.runs import INDEX, load_index

BLIS_METRICS = list(blis.METRICS)
LLMSS_METRICS = [f"{m}_{s}" for m in ("ttft", "tpot", "e2e") for s in ("mean", "p90", "p99")]


@pytest.fixture(scope="module")
def fast() -> SuiteResult:
    return run_suite(fast=True)


def test_fast_runs_the_fast_subset_and_every_metric(fast: SuiteResult) -> None:
    expected = {e.id for e in load_index() if e.fast}
    assert set(fast.wall_s) == expected and not fast.skipped
    for run_id in expected:
        rows = [r for r in fast.rows if r.run == run_id]
        if run_id.startswith("blis-"):
            experiment = blis.load_experiment(next(e.file for e in load_index() if e.id == run_id))
            assert [(r.scope, r.metric) for r in rows] == [(s, m) for s in experiment.measured for m in BLIS_METRICS]
            assert all(r.shortened and not r.published for r in rows)  # shortened stages: not comparable
        else:
            assert [r.metric for r in rows] == LLMSS_METRICS and all(not r.shortened for r in rows)
            assert {r.metric: r.bounds.get("LLMServingSim") for r in rows}["tpot_mean"] == "<=1.7%"
        assert all(r.measured is not None and r.measured > 0 for r in rows)
        assert all(r.cosim is not None and math.isfinite(r.cosim) and r.cosim > 0 for r in rows)


def test_fast_table_and_markdown(fast: SuiteResult) -> None:
    text = fast.text()
    assert "median |error| over whole runs, per family" in text and "CPU" in text
    markdown = format_markdown(fast.rows, backend="auto").splitlines()
    assert sum(line.startswith("| llmss-") or line.startswith("| blis-") for line in markdown) == len(fast.rows)
    errors = {(r.run, r.metric): r.error for r in fast.rows if r.scope == "run"}
    assert all(e is not None and abs(e) < 0.1 for e in errors.values())  # the profile-bundle replays: within 10%


def test_rerun_gives_the_same_numbers(fast: SuiteResult, tmp_path: Path) -> None:
    """Deterministic: the command on one run of the subset prints what the suite gave."""
    out = tmp_path / "rows.json"
    assert main(["validate-runs", "--fast", "--run", "blis-64-qwen7b-tp1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["scope"], r["metric"], r["cosim"]) for r in rows] == \
        [(r.scope, r.metric, r.cosim) for r in fast.rows if r.run == "blis-64-qwen7b-tp1"]


def test_every_experiment_is_a_valid_config_on_both_backends() -> None:
    for entry in load_index():
        if entry.kind != "blis-h100":
            continue
        experiment = blis.load_experiment(entry.file)
        for backend in blis.BACKENDS:
            config = parse_config(blis.experiment_config(experiment, backend=backend))
            ip = config.workload.inference_perf
            assert ip is not None and config.clients[0].scheduler.num_gpu_blocks == experiment.total_kv_blocks
            assert ip.num_requests == sum(int(s["rate"] * s["duration"]) for s in experiment.stages)


def test_backend_a_run_cannot_use_is_left_out_with_why() -> None:
    result = run_suite(backend="profile", only=("blis-64-qwen7b-tp1",))
    assert not result.rows and "runs on roofline or aiconfigurator" in result.skipped["blis-64-qwen7b-tp1"]


def test_index_errors_name_the_line(tmp_path: Path) -> None:
    index = tmp_path / "index.yaml"
    index.write_text("runs:\n  - {id: a, kind: blis-h100, file: nothere.json}\n")
    with pytest.raises(ScenarioError, match=r"runs\[0\]\.file: .*nothere\.json does not exist"):
        load_index(index)
    index.write_text("runs:\n  - {id: a, kind: vidur, file: x}\n")
    with pytest.raises(ScenarioError, match=r"runs\[0\]\.kind: 'vidur' is not one of"):
        load_index(index)
    with pytest.raises(ScenarioError, match="not in the index"):
        select_runs(load_index(INDEX), fast=False, only=("nope",))


def test_markdown_goes_between_the_markers_of_a_document() -> None:
    from cosim.hub.studies.suite.table import BEGIN, END, splice

    document = f"# title\n\n{BEGIN}\nold table\n{END}\n\n## after\n"
    assert splice(document, "new table") == f"# title\n\n{BEGIN}\nnew table\n{END}\n\n## after\n"
    assert splice("no markers", "t") == f"{BEGIN}\nt\n{END}\n"
