"""Memory bounded by concurrency: finished requests leave memory, and nothing a run reports changes."""

from __future__ import annotations

import gc
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

import cosim
import cosim.hub.sim.spill as spill_module
import cosim.hub.studies.simulation as simulation_module
from cosim.hub.config.loading import parse_config
from cosim.hub.metrics.request_table import RequestTable
from cosim.hub.sim.records import ClientTimeline
from cosim.hub.sim.spill import INT8, INT64, SpillRows
from cosim.hub.sim.token_times import TokenTimes
from cosim.hub.studies.bench_scale import cpu_growth, run_scale, scaled_marks
from cosim.hub.studies.runner import started_backends
from cosim.hub.studies.simulation import Simulation
from tests.scenarios.helpers import client, scenario

FILES = ("summary.json", "requests.csv", "clients.csv", "trace.json")


def chat(requests: int = 40) -> dict:
    """Two clients, a disaggregated pair and Poisson arrivals: transfers, queues and both stage kinds."""
    return scenario(clients=[client("p", role="prefill"), client("d", role="decode")],
                    network={"link": {"bandwidth_gbps": 100, "latency_s": 1e-6}},
                    workload={"requests": requests, "arrival": {"process": "poisson", "rate_per_s": 2000},
                              "input_tokens": {"dist": "uniform", "low": 10, "high": 300},
                              "output_tokens": {"dist": "uniform", "low": 1, "high": 20}})


def test_spilled_rows_read_back_in_order_and_cross_processes() -> None:
    rows = SpillRows([("t", INT64), ("flag", INT8)], buffer_bytes=27)  # spills every three rows
    for i in range(10):
        rows.append(i * 10**12, i % 2)
    assert len(rows) == 10
    assert rows.columns()["t"].tolist() == [i * 10**12 for i in range(10)]
    copy = pickle.loads(pickle.dumps(rows))
    assert copy.columns()["flag"].tolist() == [i % 2 for i in range(10)]
    copy.append(7, 1)
    assert len(copy) == 11 and len(rows) == 10


def test_a_row_that_does_not_fit_is_refused_whole() -> None:
    rows = SpillRows([("t", INT64), ("flag", INT8)], buffer_bytes=27)
    rows.append(1, 1)
    with pytest.raises(OverflowError):
        rows.append(2, 300)  # its first value packed, its second too large for a byte
    with pytest.raises(ValueError):
        rows.append(3)
    rows.append(4, -1)
    columns = rows.columns()
    assert len(rows) == 2 and columns["t"].tolist() == [1, 4] and columns["flag"].tolist() == [1, -1]


def test_a_run_that_spills_its_requests_writes_the_same_folder_and_records(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    kept = cosim.run(chat(), output_dir=tmp_path / "kept")
    monkeypatch.setattr(simulation_module, "KEEP_IN_MEMORY", 0)
    spilled = cosim.run(chat(), output_dir=tmp_path / "spilled")
    for name in FILES[1:]:
        assert (tmp_path / "kept" / name).read_bytes() == (tmp_path / "spilled" / name).read_bytes(), name
    kept.summary.pop("wall_time_s"), spilled.summary.pop("wall_time_s")
    assert kept.summary == spilled.summary
    assert "read back" in repr(spilled.requests) and len(spilled.requests) == 40
    assert list(spilled.requests) == list(kept.requests) and spilled.requests == kept.requests
    assert spilled.requests[-1] == kept.requests[39] and spilled.requests[1:3] == list(kept.requests)[1:3]


def test_a_run_that_spills_leaves_no_temporary_file_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run closes its step and request tables; the records its result reads close with the result."""
    monkeypatch.setattr(spill_module, "DEFAULT_BUFFER_BYTES", 64)  # every table spills within a few rows
    monkeypatch.setattr(simulation_module, "KEEP_IN_MEMORY", 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        result = cosim.run(chat(), output_dir=tmp_path)
        assert len(result.requests) == 40 and result.requests[39].id == 39
        del result
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_inter_token_gaps_that_spill_give_the_same_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = cosim.run(chat()).summary
    monkeypatch.setattr(ClientTimeline, "MAX_GAP_KEYS", 4)
    spilled = cosim.run(chat()).summary
    assert kept["latency"]["itl_s"] == spilled["latency"]["itl_s"]
    assert kept["benchmark"] == spilled["benchmark"] and kept["clients"] == spilled["clients"]


def test_token_times_that_spill_give_the_same_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's token times are its step rows' (spilled with them); an API server's, its own counts."""
    kept = cosim.run(chat()).summary["benchmark"]
    monkeypatch.setattr(spill_module, "DEFAULT_BUFFER_BYTES", 64)  # a client's step rows spill every row
    spilled = cosim.run(chat()).summary["benchmark"]
    assert kept == spilled and kept["max_output_tokens_per_s"] is not None
    served = chat()
    served["frontend"] = {}  # an API server in front of each client: the peak is what it delivers
    kept = cosim.run(served).summary["benchmark"]
    monkeypatch.setattr(TokenTimes, "MAX_KEYS", 4)
    spilled = cosim.run(served).summary["benchmark"]
    assert kept == spilled and kept["max_output_tokens_per_s"] is not None


def test_the_table_of_a_partial_run_equals_that_of_its_records() -> None:
    """Finished requests are numbers only; in-flight and not yet arrived ones are still counted."""
    config = parse_config(chat(200))
    with started_backends(config, ["lin"]) as backends:
        sim = Simulation(config, Path("."), backends, spill_requests=True)
        coordinator = sim.coordinator
        specs, pipelines = sim.workload()
        coordinator.schedule_arrivals(specs, pipelines, spill=True)
        sim.kernel.run(stop=lambda: coordinator.num_finished >= 50 and len(coordinator.in_flight) >= 2)
    records = list(coordinator.requests)
    assert [r.id for r in records] == list(range(200))
    assert sum(r.is_finished for r in records) == coordinator.num_finished >= 50
    assert any(not r.stages for r in records), "some requests had not arrived"
    table, expected = coordinator.table(), RequestTable.of(records)
    for name, column in expected.columns.items():
        assert np.array_equal(table.columns[name], column), name
    assert table.stage_table() == expected.stage_table() and table.breakdown() == expected.breakdown()
    assert sorted(table.span_starts.tolist()) == sorted(expected.span_starts.tolist())


def test_scale_marks_follow_the_requests_run() -> None:
    assert scaled_marks((100_000, 500_000, 1_000_000), 20_000) == [2_000, 10_000, 20_000]


def test_cpu_growth_compares_the_last_mark_with_the_second() -> None:
    """The first mark holds the warm-up; a cost per request growing with the run shows past it."""
    marks = [{"cpu_s_per_request": 0.004}, {"cpu_s_per_request": 0.002}, {"cpu_s_per_request": 0.0023}]
    assert cpu_growth(marks) == 1.15 and cpu_growth(marks[:2]) is None


def test_scale_bench_memory_stays_flat_as_requests_pass() -> None:
    """The scale bench's machinery, small: RSS at the last mark within a small factor of the first."""
    figures = run_scale("scale-1m", requests=3_000)
    first, *_, last = figures["marks"]
    assert [m["requests"] for m in figures["marks"]] == [300, 1_500, 3_000] and figures["requests"] == 3_000
    assert last["rss_mb"] <= 1.5 * first["rss_mb"]
    assert figures["steps_per_wall_s"] > 0 and figures["peak_rss_mb"] >= last["rss_mb"] * 0.9
    assert all(m["cpu_s_per_request"] > 0 for m in figures["marks"]) and figures["cpu_growth"] is not None
