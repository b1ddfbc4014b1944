"""Energy of whole runs: a hand-computed case, a backend's own figure, a device without power, the HERMES example."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

import cosim
import cosim.hub.studies.runner as runner
from cosim.hub.metrics import format_table
from cosim.hub.metrics.html import report_html
from cosim.hub.studies.search import enumerate_candidates, load_space
from tests.paths import EXAMPLES
from tests.scenarios.helpers import scenario

MS = 1_000_000


def two_requests(**options: Any) -> dict[str, Any]:
    """Two requests of 100 prompt and 3 output tokens, at 0 and 10 ms, on one client of 2 H100s (TP=2) whose
    every step takes 1 ms on the linear backend."""
    config = scenario(clients=[{"name": "c0", "model": "m", "backend": "lin",
                                "hardware": {"device": "h", "count": 2, "tensor_parallel": 2}}], step_ns=MS)
    config["backends"]["lin"]["options"].update(options)
    config["workload"] = {"requests": 2, "arrival": {"process": "uniform", "rate_per_s": 100},
                          "input_tokens": {"dist": "fixed", "value": 100},
                          "output_tokens": {"dist": "fixed", "value": 3}}
    return config


def test_energy_is_the_sum_over_steps_of_power_times_duration_plus_idle() -> None:
    """H100-SXM: idle 75 W, memory-bound 380 W, TDP 700 W; each step 3/4 compute-bound, 1/4 memory-bound."""
    s = runner.run(two_requests(memory_share=0.25)).summary
    # Each request: a prefill step and two decode steps, 1 ms each: 0-3 ms and 10-13 ms.
    assert s["clients"]["c0"]["steps"] == 6 and s["sim_time_s"] == pytest.approx(0.013)
    watts = 75 + (700 - 75) * 0.75 + (380 - 75) * 0.25  # 620 W per device
    busy = 6 * watts * 0.001 * 2  # six steps of 1 ms on 2 devices: 7.44 J
    idle = 75 * (2 * 0.013 - 6 * 0.001 * 2)  # 14 device-ms at idle power: 1.05 J
    energy = s["energy"]
    assert energy["busy_j"] == pytest.approx(busy, rel=1e-9)
    assert energy["idle_j"] == pytest.approx(idle, rel=1e-9)
    assert energy["total_j"] == pytest.approx(busy + idle, rel=1e-9)
    assert energy["per_request_j"] == pytest.approx((busy + idle) / 2, rel=1e-9)
    assert energy["per_output_token_j"] == pytest.approx((busy + idle) / 6, rel=1e-9)
    assert energy["tokens_per_j"] == pytest.approx(6 / (busy + idle), rel=1e-9)
    assert energy["mean_power_w"] == pytest.approx((busy + idle) / 0.013, rel=1e-9)
    client = s["clients"]["c0"]["energy"]
    assert client["total_j"] == energy["total_j"] and client["reported_steps"] == 0
    assert client["power_w"] == {"idle_w": 75, "memory_bound_w": 380, "tdp_w": 700}
    assert "energy      0.00849 kJ (busy 0.00744 kJ, idle 0.00105 kJ)" in format_table(s)
    assert "<td>output tokens per joule</td><td class=\"n\">0.7067</td>" in report_html(s, Path("-"), title="run")


def test_a_backends_reported_energy_overrides_the_power_model() -> None:
    s = runner.run(two_requests(memory_share=0.25, energy_j=0.5)).summary
    assert s["energy"]["busy_j"] == pytest.approx(6 * 0.5)  # the backend's 0.5 J per step, not 1.24 J
    assert s["energy"]["idle_j"] == pytest.approx(75 * (2 * 0.013 - 6 * 0.001 * 2), rel=1e-9)
    assert s["clients"]["c0"]["energy"]["reported_steps"] == 6


def test_a_client_without_a_power_figure_is_reported_missing(tmp_path: Path) -> None:
    """A lab's device preset without tdp_w: the run names the client and sums nothing."""
    fields = {"name": "LabChip", "kind": "npu", "vendor": "Lab", "peak_tflops": {"fp16": 400},
              "mem_bandwidth_gbps": 2000, "mem_capacity_gib": 64, "intra_node_link": "pcie", "intra_node_gbps": 32,
              "intra_node_latency_us": 10, "intra_node_hop_latency_us": 1, "intra_node_bus_efficiency": 0.7,
              "inter_node_gbps": 25, "devices_per_node": 8}
    fields["sources"] = {key: "our lab's bring-up measurements" for key in fields if key not in
                         ("name", "kind", "vendor")}
    (tmp_path / "presets.yaml").write_text(yaml.safe_dump({"devices": [fields]}))
    config = two_requests()
    config.update(presets="presets.yaml", hardware={"h": {"preset": "H100-SXM"}, "lab": {"preset": "LabChip"}})
    config["clients"].append({"name": "c1", "model": "m", "backend": "lin", "hardware": {"device": "lab"}})
    config["workload"]["requests"] = 4
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    s = runner.run(tmp_path / "config.yaml").summary
    assert s["energy"] == {"missing": ["c1"]}
    assert "no power figure" in s["clients"]["c1"]["energy"]["missing"]
    assert s["clients"]["c0"]["energy"]["total_j"] > 0  # the other client's own figures stay
    assert "energy      not reported: no power figure for c1" in format_table(s)
    assert "not reported: no power figure for c1" in report_html(s, tmp_path / "plots", title="run")


@pytest.fixture(scope="module")
def hermes() -> dict[str, dict[str, Any]]:
    """Every deployment of examples/search/energy_batching.yaml, run at 16 requests/s (both GPUs busy)."""
    space, folder = load_space(EXAMPLES / "search" / "energy_batching.yaml")
    candidates, base_dir = enumerate_candidates(space, folder)
    results = {}
    for candidate in candidates:
        config = copy.deepcopy(candidate.scenario)
        config["workload"]["requests"] = 200
        results[candidate.label.split(" ", 2)[2]] = runner.run(config, base_dir=base_dir).summary
    return results


def test_hermes_disaggregation_gets_the_most_tokens_per_joule(hermes: dict[str, dict[str, Any]]) -> None:
    """HERMES §V: disaggregated serving yields higher throughput per energy (its decode client's steps are
    memory-bound, at lower power, and batch every decode on one GPU); static batching the least."""
    per_j = {label: s["energy"]["tokens_per_j"] for label, s in hermes.items()}
    collocated = [per_j[f"2m {b} s128"] for b in ("continuous", "chunked c512", "mixed")]
    disaggregated = [per_j[f"1p1d {b} s128"] for b in ("continuous", "chunked c512", "mixed")]
    assert min(disaggregated) > 1.1 * max(collocated)
    assert per_j["2m static s128"] < 0.5 * min(collocated)  # it cannot keep up: fewer tokens for longer
    assert per_j["2m chunked c512 s128"] == pytest.approx(per_j["2m continuous s128"], rel=0.05)
    # at the same load, the same tokens: the difference is energy, not throughput
    tokens = {label: s["output_tokens"] for label, s in hermes.items() if "static" not in label}
    assert len(set(tokens.values())) == 1


def test_search_ranks_deployments_by_tokens_per_joule(tmp_path: Path) -> None:
    """objective: tokens_per_j orders the table by the output tokens per joule at each goodput."""
    base = scenario(step_ns=5 * MS, per_token_ns=0)
    base["backends"]["lin"]["options"].update(per_seq_ns=100_000, memory_share=0.5)
    base["workload"] = {"requests": 30, "arrival": {"process": "poisson", "rate_per_s": 10},
                        "input_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 8}}
    base["slo"] = {"ttft_s": {"p90": 0.05}, "tpot_s": {"p90": 0.02}}
    space = {"base": base, "devices": ["H100-SXM"], "budget": {"max_devices": 2}, "parallelism": {"tensor": [1]},
             "scheduler": {"batching": ["continuous"], "max_num_seqs": [8]},
             "goodput": {"replications": 1, "tolerance": 0.2}, "objective": "tokens_per_j"}
    result = cosim.search(space, output_dir=tmp_path)
    live = [r for r in result.rows if r["rank"] is not None]
    assert len(live) == 3 and all(r["tokens_per_j"] > 0 for r in live)
    per_j = [r["tokens_per_j"] for r in live]
    assert per_j == sorted(per_j, reverse=True)
    # 1p1d has more goodput than 1m but fewer tokens per joule: the ranking is not by goodput
    assert [r["shape"] for r in live] == ["2m", "1m", "1p1d"]
    assert live[2]["goodput_rps"] > live[1]["goodput_rps"]
    assert "tokens_per_j" in (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
