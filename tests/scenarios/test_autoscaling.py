"""Autoscaled replica pools (hub/sim/autoscale): bounds, provisioning delay, following a step in load, drain, cost."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import cosim
from cosim.hub.cli import main
from cosim.hub.config.autoscale import ReplicasConfig
from cosim.hub.config.loading import ScenarioProblems, parse_config
from cosim.hub.sim.autoscale.policy import Recommender
from cosim.hub.sim.records import RequestRecord
from tests.paths import REPO
from tests.scenarios.helpers import scenario

# Llama-3-8B's weights, by hand: embeddings and LM head 128256 x 4096 each; per layer q and o 4096^2,
# k and v 4096 x 1024, the MLP 3 x 4096 x 14336, two norms of 4096; a final norm; 2 bytes each (fp16).
LAYER_PARAMS = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
WEIGHT_BYTES = 2 * (2 * 128256 * 4096 + 32 * LAYER_PARAMS + 4096)
LOAD_GBPS = 2.0
LOAD_NS = math.ceil(WEIGHT_BYTES / LOAD_GBPS)  # bytes / (GB/s) = ns: 8.03 s
PRICE = 3.0  # $ per device-hour
NS = 1_000_000_000


def step_rows(phases: list[tuple[float, float]]) -> list[tuple[float, int, int]]:
    """Evenly spaced arrivals: ``rate`` per second for ``duration`` seconds, phase after phase."""
    rows, start = [], 0.0
    for rate, duration in phases:
        count = round(rate * duration)
        rows += [(start + (i + 0.5) / rate, 100, 20) for i in range(count)]
        start += duration
    return rows


def pool_config(tmp_path: Path, phases: list[tuple[float, float]], **replicas: Any) -> dict[str, Any]:
    """One pool on the linear backend (about 5 requests/s per replica) under ``phases`` of load."""
    section = {"min": 1, "max": 5, "policy": "queue", "target": 2, "window_s": 10, "interval_s": 5,
               "scale_down_stabilization_s": 20, "load_bandwidth_gbps": LOAD_GBPS, **replicas}
    pool = {"name": "pool", "model": "m", "backend": "lin", "hardware": {"device": "h"},
            "scheduler": {"max_num_seqs": 4}, "replicas": section}
    config = scenario(clients=[pool], step_ns=1_000_000, per_token_ns=1_000_000,
                      hardware={"h": {"preset": "H100-SXM", "price_per_hour_usd": PRICE}})
    rows = step_rows(phases)
    trace = tmp_path / "load.csv"
    trace.write_text("arrival_s,input,output\n" + "".join(f"{a!r},{i},{o}\n" for a, i, o in rows))
    config["workload"] = {"requests": len(rows), "trace": {"path": str(trace), "format": "csv",
                                                           "input_column": "input", "output_column": "output"},
                          "arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"},
                          "output_tokens": {"dist": "trace"}}
    return config


STEP = [(1.0, 30.0), (20.0, 40.0), (1.0, 60.0)]  # up at 30 s, down at 70 s


@pytest.fixture(scope="module")
def stepped(tmp_path_factory: pytest.TempPathFactory) -> cosim.RunResult:
    return cosim.run(pool_config(tmp_path_factory.mktemp("step"), STEP))


def timeline(result: cosim.RunResult) -> list[tuple[float, int, int, int]]:
    block = result.summary["autoscaling"]["pool"]["timeline"]
    return list(zip(block["t_s"], block["ready"], block["provisioning"], block["draining"]))


def on_client(requests: list[RequestRecord], name: str) -> list[int]:
    """When each stage routed to ``name`` reached it (ns)."""
    return [stage.enqueue_ns for r in requests for stage in r.stages if stage.client == name]


def test_the_count_stays_within_min_and_max(stepped: cosim.RunResult) -> None:
    rows = timeline(stepped)
    assert max(r + p + d for _, r, p, d in rows) == 5  # it reached max under the step, and never passed it
    assert all(r >= 1 for _, r, _, _ in rows)
    assert stepped.summary["requests"]["completed"] == len(stepped.requests)


def test_a_new_replica_takes_no_request_before_its_weights_load(stepped: cosim.RunResult) -> None:
    block = stepped.summary["autoscaling"]["pool"]
    assert block["provisioning_s"] == pytest.approx(LOAD_NS / NS, rel=1e-9)
    added = [(round(event["t_s"] * NS), name) for event in block["events"] if event["to"] > event["from"]
             for name in event["replicas"]]
    assert added
    requests = list(stepped.requests)
    for created_ns, name in added:
        first = min(on_client(requests, name))
        assert first >= created_ns + LOAD_NS
        assert first < created_ns + LOAD_NS + 5 * NS  # it did take requests once ready (20 per second arrive)


def test_the_count_follows_a_step_in_load(stepped: cosim.RunResult) -> None:
    """Up within window + interval + provisioning of the step at 30 s; back to min after the drop at 70 s."""
    rows = timeline(stepped)
    assert all(r == 1 and p == 0 for t, r, p, _ in rows if t < 30)
    first_ready = min(t for t, r, _, _ in rows if r > 1)
    assert 30 < first_ready <= 30 + 10 + 5 + LOAD_NS / NS
    downs = [e["t_s"] for e in stepped.summary["autoscaling"]["pool"]["events"] if e["to"] < e["from"]]
    assert downs and min(downs) > 70
    assert max(downs) <= 70 + 10 + 5 + 20 + 5  # window, interval, stabilization, and drain
    assert rows[-1][1:] == (1, 0, 0)


def test_cost_is_replica_seconds_times_the_price(stepped: cosim.RunResult) -> None:
    """Each replica is paid from its creation (provisioning included) to its last request's end, when
    it drained, or to the end of the run: summed by hand from the events and the requests."""
    block, end_ns = stepped.summary["autoscaling"]["pool"], round(stepped.summary["sim_time_s"] * NS)
    created = {"pool-0": 0}
    drained: dict[str, int] = {}
    for event in block["events"]:
        for name in event["replicas"]:
            (created if event["to"] > event["from"] else drained)[name] = round(event["t_s"] * NS)
    requests = list(stepped.requests)
    seconds = 0.0
    for name, start in created.items():
        ends = [s.end_ns for r in requests for s in r.stages if s.client == name]
        stop = max([drained[name], *ends]) if name in drained else end_ns
        seconds += (stop - start) / NS
    assert block["replica_seconds"] == pytest.approx(seconds, rel=1e-8)
    assert stepped.summary["cost"]["usd"] == pytest.approx(seconds * PRICE / 3600, rel=1e-8)
    assert block["cost_usd"] == pytest.approx(stepped.summary["cost"]["usd"], rel=1e-8)
    assert block["mean_replicas"] == pytest.approx(seconds * NS / end_ns, rel=1e-8)
    clients = stepped.summary["clients"]
    assert sorted(clients) == sorted(created)  # one block per replica that existed, none for the template
    assert sum(c["device_hours"] for c in clients.values()) == pytest.approx(seconds / 3600, rel=1e-8)


def test_draining_replicas_finish_what_they_hold_and_take_nothing_new(tmp_path: Path) -> None:
    """Five replicas running long answers with nothing queued: the first decision drains four of them
    while they still run requests; none is routed to them after it, and each goes when its last
    request ends."""
    config = pool_config(tmp_path, [(5.0, 20.0)], initial=5, scale_down_stabilization_s=0)
    config["workload"]["output_tokens"] = {"dist": "fixed", "value": 400}
    result = cosim.run(config)
    block = result.summary["autoscaling"]["pool"]
    requests = list(result.requests)
    drains = [(round(e["t_s"] * NS), name) for e in block["events"] if e["to"] < e["from"] for name in e["replicas"]]
    assert drains
    assert any(r[3] for r in timeline(result))  # some replica was draining for a while
    for decided_ns, name in drains:
        assert max(on_client(requests, name)) <= decided_ns
        ends = [s.end_ns for r in requests for s in r.stages if s.client == name]
        assert max(ends) > decided_ns  # it held requests when told to drain
        assert result.clients[[c.name for c in result.clients].index(name)].existed_ns == max(ends)


def test_every_policy_scales_up_under_the_step(tmp_path: Path) -> None:
    for replicas in ({"policy": "utilization", "target": 0.6}, {"policy": "slo", "target": 0.9},
                     {"policy": "concurrency", "target": 3}):
        config = pool_config(tmp_path, STEP[:2], **replicas)
        config["slo"] = {"ttft_s": {"p90": 0.5}}
        block = cosim.run(config).summary["autoscaling"]["pool"]
        ups = [e["t_s"] for e in block["events"] if e["to"] > e["from"]]
        assert ups and 30 < min(ups) <= 30 + 10 + 5, replicas
        assert min(block["timeline"]["ready"]) >= 1 and max(block["timeline"]["ready"]) <= 5


def test_a_pool_that_cannot_scale_serves_as_fixed_clients_do(tmp_path: Path) -> None:
    """min = max: the same requests, the same times, the same cost as clients pool-0..2 listed by hand."""
    phases = [(10.0, 20.0)]
    pooled = cosim.run(pool_config(tmp_path, phases, min=3, max=3))
    fixed_config = pool_config(tmp_path, phases)
    template = fixed_config["clients"][0]
    del template["replicas"]
    fixed_config["clients"] = [{**template, "name": f"pool-{k}"} for k in range(3)]
    fixed = cosim.run(fixed_config)
    assert [(r.arrival_ns, r.first_token_ns, r.finish_ns, [s.client for s in r.stages]) for r in pooled.requests] \
        == [(r.arrival_ns, r.first_token_ns, r.finish_ns, [s.client for s in r.stages]) for r in fixed.requests]
    assert pooled.summary["cost"] == fixed.summary["cost"]
    assert pooled.summary["sim_time_s"] == fixed.summary["sim_time_s"]
    assert pooled.summary["autoscaling"]["pool"]["events"] == []


def test_same_config_same_bytes(tmp_path: Path) -> None:
    config = pool_config(tmp_path, STEP[:2])
    config["output"]["plots"] = True  # replicas.png is checked
    folders = [cosim.run(config, output_dir=tmp_path / name).output_dir for name in ("a", "b")]
    for name in ("requests.csv", "trace.json"):
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes()
    summaries = [json.loads((f / "summary.json").read_text()) for f in folders]
    for summary in summaries:
        summary.pop("wall_time_s")
    assert summaries[0] == summaries[1]
    counters = [json.loads(line.rstrip(",")) for line in (folders[0] / "trace.json").read_text().splitlines()
                if '"replicas pool"' in line]
    assert [c["args"]["ready"] for c in counters] == summaries[0]["autoscaling"]["pool"]["timeline"]["ready"]
    assert (folders[0] / "plots" / "replicas.png").stat().st_size > 0


@pytest.mark.parametrize(("replicas", "where", "what"), [
    ({"min": 3, "max": 2}, "clients[0].replicas.max", "must be >= min=3"),
    ({"initial": 7}, "clients[0].replicas.initial", "within [min, max]"),
    ({"policy": "utilization", "target": 60}, "clients[0].replicas.target", "fraction"),
    ({"policy": "slo", "target": 0.9}, "clients[0].replicas.policy", "which is empty"),
    ({"sample_s": 10}, "clients[0].replicas.sample_s", "<= interval_s"),
    ({"min": 0}, "clients[0].replicas.min", "greater than or equal to 1"),
])
def test_bad_replicas_name_their_path(tmp_path: Path, replicas: dict[str, Any], where: str, what: str) -> None:
    config = pool_config(tmp_path, [(1.0, 2.0)], **replicas)
    with pytest.raises(ScenarioProblems) as caught:
        parse_config(config)
    assert any(p.where == where and what in p.message for p in caught.value.problems), caught.value


def test_a_replica_name_may_not_be_taken(tmp_path: Path) -> None:
    config = pool_config(tmp_path, [(1.0, 2.0)])
    config["clients"].append({**config["clients"][0], "name": "pool-12", "replicas": None})
    with pytest.raises(ScenarioProblems, match=r"clients\[0\].name: 'pool' names replicas"):
        parse_config(config)


def test_hysteresis_by_hand() -> None:
    """HPA's: ceil(ready x metric / target); nothing within the tolerance; down only to the most wanted
    over the stabilization window."""
    config = ReplicasConfig(min=1, max=10, policy="queue", target=2.0, scale_down_stabilization_s=20)
    rec = Recommender(config)
    assert rec.decide(0, metric=5.0, target=2.0, ready=2, current=2) == 5  # ceil(2 x 5 / 2)
    assert rec.decide(5 * NS, metric=2.1, target=2.0, ready=5, current=5) == 5  # 1.05: within 10 %
    assert rec.decide(10 * NS, metric=0.0, target=2.0, ready=5, current=5) == 5  # 5 was wanted 10 s ago
    assert rec.decide(26 * NS, metric=0.0, target=2.0, ready=5, current=5) == 1  # 21 s later: min
    assert rec.decide(30 * NS, metric=100.0, target=2.0, ready=1, current=1) == 10  # ceil(50), capped at max


def test_the_example_runs_from_yaml(tmp_path: Path) -> None:
    """examples/autoscaling.yaml's first 700 requests: the quiet start and the first 4 minutes' burst."""
    args = ["run", str(REPO / "examples" / "autoscaling.yaml"), "-o", str(tmp_path / "run"), "--no-progress",
            "--set", "workload.requests=700"]
    assert main(args) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    block = summary["autoscaling"]["llama"]
    assert block["provisioning_s"] == pytest.approx(WEIGHT_BYTES / 5e9 + 30, rel=1e-9)  # 5 GB/s, 30 s start-up
    assert block["scale_ups"] >= 1 and 1 < block["max_replicas"] <= 8
    assert '"replicas llama"' in (tmp_path / "run" / "trace.json").read_text()
    assert (tmp_path / "run" / "plots" / "replicas.png").exists()


def test_two_pools_scale_side_by_side(tmp_path: Path) -> None:
    """Each pool has its own block; the run's cost is theirs together."""
    config = pool_config(tmp_path, STEP[:2], max=3)
    config["clients"].append({**config["clients"][0], "name": "other"})
    result = cosim.run(config)
    blocks = result.summary["autoscaling"]
    assert sorted(blocks) == ["other", "pool"]
    assert all(b["scale_ups"] >= 1 and b["max_replicas"] <= 3 for b in blocks.values())
    assert result.summary["cost"]["usd"] == pytest.approx(sum(b["cost_usd"] for b in blocks.values()), rel=1e-8)
    assert result.summary["requests"]["completed"] == len(result.requests)
