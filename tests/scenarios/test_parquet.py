"""output.requests_format: parquet writes requests.csv's rows as a typed Parquet table."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pytest

import cosim
from cosim.hub.errors import ScenarioError
from cosim.hub.metrics import parquet
from cosim.hub.studies.compare import compare
from tests.scenarios.helpers import scenario

pq = pytest.importorskip("pyarrow.parquet")


def config(requests_format: str) -> dict:
    """Two clients, prompts of 1-3 output tokens (a 1-token request has no TPOT: an empty cell)."""
    clients = [{"name": n, "model": "m", "backend": "lin", "hardware": {"device": "h"}} for n in ("c0", "c1")]
    workload = {"requests": 7, "arrival": {"process": "poisson", "rate_per_s": 2e5},
                "input_tokens": {"dist": "uniform", "low": 16, "high": 300},
                "output_tokens": {"dist": "uniform", "low": 1, "high": 3}}
    return scenario(clients=clients, step_ns=1000, per_token_ns=7, workload=workload,
                    output={"plots": False, "requests_format": requests_format})


def test_parquet_holds_the_csv_rows_typed_and_is_byte_identical_across_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 3)  # 7 requests: groups of 3, 3 and 1
    cosim.run(config("csv"), output_dir=tmp_path / "csv")
    for name in ("a", "b"):
        cosim.run(config("parquet"), output_dir=tmp_path / name)
        assert not (tmp_path / name / "requests.csv").exists()
    assert (tmp_path / "a" / "requests.parquet").read_bytes() == (tmp_path / "b" / "requests.parquet").read_bytes()

    table = pq.ParquetFile(tmp_path / "a" / "requests.parquet")
    assert table.metadata.num_row_groups == 3
    data = table.read()
    with (tmp_path / "csv" / "requests.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert data.column_names == list(rows[0])
    assert str(data.schema.field("id").type) == "int64" and str(data.schema.field("ttft_s").type) == "double"
    assert str(data.schema.field("prefill_client").type) == "string"
    columns = data.to_pydict()
    assert columns["tpot_s"].count(None) == sum(r["tpot_s"] == "" for r in rows) > 0
    for i, row in enumerate(rows):
        for name, text in row.items():
            value = columns[name][i]
            if text == "":
                assert value is None, (i, name)
            elif isinstance(value, str):
                assert value == text, (i, name)
            else:  # times were exact decimals of ns, floats print 9 digits: equal to within both roundings
                assert math.isclose(value, float(text), rel_tol=1e-8), (i, name, value, text)


def test_requests_df_and_compare_read_a_parquet_run_folder(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    from_csv = cosim.run(config("csv"), output_dir=tmp_path / "csv")
    from_parquet = cosim.run(config("parquet"), output_dir=tmp_path / "parquet")
    a, b = from_csv.requests_df(), from_parquet.requests_df()
    assert list(a.columns) == list(b.columns) and list(a["id"]) == list(b["id"])
    assert list(a["prefill_client"]) == list(b["prefill_client"])
    for name in ("arrival_s", "ttft_s", "tpot_s", "e2e_ms"):
        assert a[name].isna().tolist() == b[name].isna().tolist()
        assert a[name].fillna(-1).tolist() == pytest.approx(b[name].fillna(-1).tolist(), rel=1e-8)

    latencies = [run.latencies() for run in compare([tmp_path / "csv", tmp_path / "parquet"], plots=False).runs]
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        assert latencies[0][metric] == pytest.approx(latencies[1][metric], rel=1e-8, nan_ok=True)


def test_parquet_without_pyarrow_is_refused_before_the_run_naming_the_key(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    with pytest.raises(ScenarioError, match=r"output\.requests_format: .*pip install 'cosim\[parquet\]'"):
        cosim.run(config("parquet"), output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything ran or was written
