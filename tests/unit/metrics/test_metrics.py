"""Metrics and the run folder, on hand-built records with hand-computed answers."""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path

import pytest

from cosim.hub.errors import ScenarioError
from cosim.hub.metrics import ProgressBar, format_table, summarize, summary_json, write_run_folder
from cosim.hub.sim.power import DevicePower, StepJoules
from cosim.hub.sim.records import ClientInfo, ClientTimeline, RequestRecord, StageRecord

S = 1_000_000_000
SLO = {"ttft_s": {"p90": 0.9}, "tpot_s": {"p50": 0.3, "p99": 1.0}}


def sec(x: float) -> int:
    return round(x * S)


def make_request(rid: int, arrival: float, input_tokens: int, output_tokens: int, first: float, finish: float,
                 stages: list[StageRecord], generated: int | None = None, max_tbt: float = 0.0) -> RequestRecord:
    return RequestRecord(
        id=rid, model="m", arrival_ns=sec(arrival), input_tokens=input_tokens, output_tokens=output_tokens,
        generated_tokens=output_tokens if generated is None else generated,
        first_token_ns=sec(first) if first >= 0 else -1, finish_ns=sec(finish) if finish >= 0 else -1,
        max_tbt_ns=sec(max_tbt), stages=stages)


def stage(kind: str, client: str, enqueue: float, start: float, end: float, transfer: float = 0.0) -> StageRecord:
    return StageRecord(kind=kind, client=client, enqueue_ns=sec(enqueue), start_ns=sec(start) if start >= 0 else -1,
                       end_ns=sec(end) if end >= 0 else -1, transfer_ns=sec(transfer))


def make_requests() -> list[RequestRecord]:
    """Three finished requests and one still decoding (a partial run)."""
    return [
        make_request(0, 0.0, 100, 4, 1.0, 1.6, [stage("prefill", "p0", 0.0, 0.2, 1.0),
                                                  stage("decode", "d0", 1.1, 1.2, 1.6, transfer=0.1)], max_tbt=0.25),
        make_request(1, 0.5, 200, 1, 1.3, 1.3, [stage("prefill", "p0", 0.5, 1.0, 1.3)]),
        make_request(2, 1.0, 50, 3, 1.2, 2.2, [stage("prefill", "p0", 1.0, 1.0, 1.2),
                                                 stage("decode", "d0", 1.2, 1.4, 2.2)], max_tbt=0.6),
        make_request(3, 2.0, 10, 5, 2.5, -1, [stage("prefill", "p0", 2.0, 2.0, 2.5),
                                                stage("decode", "d0", 2.5, 2.6, -1)], generated=2),
    ]


def make_clients() -> tuple[list[ClientInfo], dict[str, ClientTimeline]]:
    clients = [
        ClientInfo(name="p0", role="prefill", model="m", backend="roofline", fidelity="analytical",
                   device="H100", num_devices=1, price_per_hour_usd=2.0, kv_capacity_blocks=50, block_size_tokens=16),
        ClientInfo(name="d0", role="decode", model="m", backend="regression", fidelity="empirical",
                   device="H100", num_devices=2, price_per_hour_usd=2.0, kv_capacity_blocks=100, block_size_tokens=16,
                   meters_energy=True, power=DevicePower(idle_w=100, memory_bound_w=200, peak_w=400)),
    ]
    p0, d0 = ClientTimeline(), ClientTimeline()
    p0.append(sec(0.2), sec(1.0), 1, 100, 0, 7, 1)
    p0.append(sec(1.0), sec(1.3), 2, 250, 0, 20, 0)
    p0.append(sec(2.0), sec(2.5), 1, 10, 0, 1, 0)
    d0.append(sec(1.2), sec(1.6), 1, 0, 3, 10, 0)
    d0.append(sec(1.6), sec(2.2), 1, 0, 2, 5, 0)
    d0.add_energy(StepJoules(5.0, device_s=2.0))  # its two steps: (0.4 + 0.6) s x 2 devices
    return clients, {"p0": p0, "d0": d0}


def make_summary(requests: list[RequestRecord] | None = None) -> dict:
    clients, timelines = make_clients()
    return summarize(make_requests() if requests is None else requests, clients, timelines, slo=SLO,
                     sim_time_ns=3 * S, wall_time_s=0.5, extra={"cache_hit_rate": 0.25})


def test_latency_statistics_match_hand_computation() -> None:
    s = make_summary()
    assert s["requests"] == {"submitted": 4, "completed": 3, "meeting_slo": 1}
    # TTFT of completed requests: 1.0, 0.8, 0.2 -> sorted 0.2, 0.8, 1.0.
    assert s["latency"]["ttft_s"] == {"mean": pytest.approx(2 / 3), "p50": 0.8, "p90": 0.96, "p99": 0.996, "max": 1.0}
    # TPOT: r0 (1.6-1.0)/3 = 0.2, r2 (2.2-1.2)/2 = 0.5; r1 has one token and is skipped.
    assert s["latency"]["tpot_s"] == {"mean": 0.35, "p50": 0.35, "p90": 0.47, "p99": 0.497, "max": 0.5}
    assert s["latency"]["e2e_s"] == {"mean": 1.2, "p50": 1.2, "p90": 1.52, "p99": 1.592, "max": 1.6}
    # queue: r0 0.2 + 0.1 (decode waits 1.1 -> 1.2; the transfer is not queueing), r1 0.5, r2 0.0 + 0.2.
    assert s["latency"]["queue_s"]["mean"] == pytest.approx(1 / 3)
    assert s["latency"]["tbt_max_s"]["max"] == 0.6


def test_slo_goodput_and_attainment() -> None:
    s = make_summary()
    # r0 misses TTFT (1.0 > 0.9); r2 misses TPOT (0.5 > 0.3); r1 (one token: no TPOT) meets.
    assert s["slo_attainment"] == pytest.approx(1 / 3)
    assert s["goodput_requests_per_s"] == pytest.approx(1 / 3)
    assert s["slo"]["ttft_s"]["p90"] == {"target": 0.9, "observed": 0.96, "met": False}
    assert s["slo"]["tpot_s"]["p50"] == {"target": 0.3, "observed": 0.35, "met": False}
    assert s["slo"]["tpot_s"]["p99"] == {"target": 1.0, "observed": 0.497, "met": True}


def test_throughput_cost_energy_and_extra() -> None:
    s = make_summary()
    assert s["throughput"] == {"requests_per_s": 1.0, "output_tokens_per_s": pytest.approx(10 / 3),
                               "input_tokens_per_s": 120.0}
    assert s["sim_time_s"] == 3.0 and s["wall_time_s"] == 0.5
    # 3 device-seconds x 3 devices at $2 per device-hour.
    assert s["cost"]["usd"] == pytest.approx(0.005)
    assert s["cost"]["tokens_per_usd"] == pytest.approx(2000)
    # p0's energy is not modelled; d0 idles 2 devices x 3 s - 2 device-s busy = 4 device-s at 100 W.
    assert s["energy"] == {"busy_j": 5.0, "idle_j": 400.0, "total_j": 405.0, "mean_power_w": 135.0,
                           "per_request_j": 135.0, "per_output_token_j": 40.5, "tokens_per_j": pytest.approx(10 / 405),
                           "not_modelled": ["p0"]}
    assert "energy" not in s["clients"]["p0"]
    assert s["clients"]["d0"]["energy"]["total_j"] == 405.0 and s["clients"]["d0"]["energy"]["reported_steps"] == 0
    assert s["cache_hit_rate"] == 0.25


def test_per_client_blocks() -> None:
    c = make_summary()["clients"]
    assert set(c) == {"p0", "d0"}
    assert c["d0"]["requests"] == {"submitted": 3, "completed": 2, "meeting_slo": 0}
    assert c["p0"]["requests"] == {"submitted": 1, "completed": 1, "meeting_slo": 1}
    assert c["d0"]["latency"]["tpot_s"]["mean"] == 0.35
    assert c["p0"]["utilization"] == pytest.approx(1.6 / 3)
    assert c["d0"]["mean_batch_size"] == 1.0
    assert c["p0"]["max_kv_blocks_used"] == 20
    assert c["d0"]["steps"] == 2
    assert (c["d0"]["backend"], c["d0"]["fidelity"], c["d0"]["role"]) == ("regression", "empirical", "decode")
    assert (c["d0"]["device"], c["d0"]["num_devices"]) == ("H100", 2)


def test_unknown_slo_metric_is_a_scenario_error() -> None:
    clients, timelines = make_clients()
    with pytest.raises(ScenarioError, match="slo.ttft_s.p95"):
        summarize([], clients, timelines, slo={"ttft_s": {"p95": 1.0}}, sim_time_ns=S, wall_time_s=0)


def test_empty_run_summarizes_and_formats() -> None:
    s = summarize([], [], {}, slo=SLO, sim_time_ns=0, wall_time_s=0.0)
    assert s["requests"]["completed"] == 0 and s["slo_attainment"] is None
    assert s["latency"]["ttft_s"]["p90"] is None
    assert "TTFT" in format_table(s)
    json.loads(summary_json(s))


def test_summary_and_csv_bytes_are_deterministic(tmp_path: Path) -> None:
    """The same records, in any order, give byte-identical JSON and CSV files."""
    clients, timelines = make_clients()
    shuffled = make_requests()
    random.Random(3).shuffle(shuffled)
    for folder, requests in ((tmp_path / "a", make_requests()), (tmp_path / "b", shuffled)):
        write_run_folder(folder, make_summary(requests), requests, clients, timelines, plots=False)
    for name in ("summary.json", "requests.csv", "clients.csv", "trace.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_requests_csv_rows_and_partial_request(tmp_path: Path) -> None:
    clients, timelines = make_clients()
    write_run_folder(tmp_path, make_summary(), make_requests(), clients, timelines, plots=False)
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert [r["id"] for r in rows] == ["0", "1", "2", "3"]
    assert rows[0]["ttft_s"] == "1" and rows[0]["tpot_s"] == "0.2" and rows[0]["e2e_s"] == "1.6"
    assert rows[0]["decode_client"] == "d0" and rows[0]["decode_transfer_s"] == "0.1"
    assert rows[0]["decode_queue_s"] == "0.1" and rows[0]["prefill_start_s"] == "0.2"
    assert rows[1]["tpot_s"] == "" and rows[1]["decode_client"] == ""
    # The unfinished request: TTFT known, no E2E, decode started but not ended.
    assert rows[3]["ttft_s"] == "0.5" and rows[3]["e2e_s"] == "" and rows[3]["decode_end_s"] == ""
    assert rows[3]["decode_start_s"] == "2.6" and rows[3]["generated_tokens"] == "2"


def test_clients_csv_downsamples_long_timelines(tmp_path: Path) -> None:
    clients, timelines = make_clients()
    long = ClientTimeline()
    for i in range(1000):
        long.append(i * 10, i * 10 + 10, 1 + i % 4, 0, 1 + i % 4, i, i % 7)
    timelines["d0"] = long
    write_run_folder(tmp_path, make_summary(), make_requests(), clients, timelines, plots=False,
                     max_rows_per_client=10)
    rows = [r for r in csv.DictReader((tmp_path / "clients.csv").open()) if r["client"] == "d0"]
    assert len(rows) == 10
    assert sum(int(r["steps"]) for r in rows) == 1000
    assert sum(int(r["decode_tokens"]) for r in rows) == sum(1 + i % 4 for i in range(1000))
    assert rows[-1]["kv_blocks_used"] == "999" and rows[0]["num_seqs"] == "2.5"
    p0_rows = [r for r in csv.DictReader((tmp_path / "clients.csv").open()) if r["client"] == "p0"]
    assert [r["num_seqs"] for r in p0_rows] == ["1", "2", "1"]


def test_trace_is_valid_chrome_trace(tmp_path: Path) -> None:
    clients, timelines = make_clients()
    write_run_folder(tmp_path, make_summary(), make_requests(), clients, timelines, plots=False)
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    steps = [e for e in events if e["ph"] == "X" and e.get("cat") == "step"]
    assert len(steps) == 5
    first = next(e for e in steps if e["pid"] == 1)  # p0 is the first client
    assert first == {"ph": "X", "cat": "step", "name": "prefill", "pid": 1, "tid": 1, "ts": 200000.0,
                     "dur": 800000.0, "args": {"num_seqs": 1, "prefill_tokens": 100, "decode_tokens": 0,
                                               "kv_blocks_used": 7, "num_waiting": 1}}
    decode0 = [e for e in events if e.get("cat") == "stage" and e["tid"] == 0 and e["name"] == "decode"]
    assert decode0[0]["ts"] == 1_200_000.0 and decode0[0]["dur"] == 400_000.0
    assert any(e.get("cat") == "transfer" and e["tid"] == 0 for e in events)
    open_slices = [e for e in events if e["ph"] == "B"]
    assert [(e["tid"], e["name"]) for e in open_slices] == [(3, "decode")]
    assert {e["name"] for e in events if e["ph"] == "C"} == {"kv_blocks_used", "num_waiting"}
    assert trace["otherData"]["truncated"] is False


def test_trace_is_capped(tmp_path: Path) -> None:
    clients, timelines = make_clients()
    write_run_folder(tmp_path, make_summary(), make_requests(), clients, timelines, plots=False,
                     max_trace_events=10)
    trace = json.loads((tmp_path / "trace.json").read_text())
    kept = [e for e in trace["traceEvents"] if e["ph"] != "M"]
    assert 0 < len(kept) <= 10
    assert trace["otherData"]["truncated"] is True
    # 5 steps x (slice + 2 counters) + 15 request spans (transfer, queue, stage).
    assert trace["otherData"]["events_dropped"] == 5 * 3 + 15 - len(kept)


def test_plots_are_written(tmp_path: Path) -> None:
    clients, timelines = make_clients()
    write_run_folder(tmp_path, make_summary(), make_requests(), clients, timelines)
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert names == ["batch_size.png", "breakdown.png", "kv_usage.png", "latency_cdf.png", "queue.png",
                     "throughput.png"]
    assert all((tmp_path / "plots" / n).read_bytes()[:4] == b"\x89PNG" for n in names)


def test_format_table_shows_key_metrics() -> None:
    table = format_table(make_summary())
    for text in ("TTFT", "TPOT", "E2E", "960.00", "ITL per token", "goodput", "33.3%", "MISSED", "preemptions", "d0",
                 "53.3%"):
        assert text in table, text


def test_progress_bar_updates_only_when_enabled() -> None:
    stream = io.StringIO()
    bar = ProgressBar(10, stream=stream)  # a StringIO is not a TTY
    bar.update(3, 2 * S)
    bar.close()
    assert not bar.is_enabled and stream.getvalue() == ""
    stream = io.StringIO()
    with ProgressBar(10, enabled=True, stream=stream) as bar:
        bar.update(3, 2 * S)
    assert "3/10" in stream.getvalue() and "sim 2.000s" in stream.getvalue()


def test_unrouted_request_is_submitted_but_nowhere_else(tmp_path: Path) -> None:
    """A request that never reached a client (the run stopped first) still gets a row."""
    requests = [*make_requests(), make_request(4, 2.9, 10, 5, -1, -1, [])]
    clients, timelines = make_clients()
    s = make_summary(requests)
    assert s["requests"]["submitted"] == 5 and s["requests"]["completed"] == 3
    assert sum(c["requests"]["submitted"] for c in s["clients"].values()) == 4
    write_run_folder(tmp_path, s, requests, clients, timelines, plots=False)
    row = list(csv.DictReader((tmp_path / "requests.csv").open()))[-1]
    assert (row["id"], row["ttft_s"], row["queue_s"], row["prefill_client"]) == ("4", "", "", "")


def test_step_events_are_the_text_the_encoder_writes_for_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """trace.json's step events are formatted by the core: the same text as the events' dicts, keys
    sorted and without spaces, as every other event is written (times with fractions of a µs too), a
    chunk of steps at a time."""
    from cosim.hub.metrics import trace

    def step_name(prefill: int, decode: int) -> str:
        return "mixed" if prefill and decode else "prefill" if prefill else "decode" if decode else "step"

    monkeypatch.setattr(trace, "CHUNK_STEPS", 7)
    rng = random.Random(7)
    timeline = ClientTimeline()
    start = 0
    for _ in range(200):
        end = start + rng.randint(1, 10**9)
        prefill, decode = rng.choice([(0, 1), (512, 0), (300, 12), (0, 0)])
        timeline.append(start, end, rng.randint(1, 256), prefill, decode, rng.randint(0, 10**5), rng.randint(0, 99))
        start = end + rng.randint(0, 5000)
    texts = ",\n".join(trace._step_events(3, timeline, None))
    cols = timeline.columns()
    expected = []
    for i in range(200):
        s, e = int(cols["start_ns"][i]), int(cols["end_ns"][i])
        p, d, kv, w = (int(cols[c][i]) for c in ("prefill_tokens", "decode_tokens", "kv_blocks_used", "num_waiting"))
        expected += [{"ph": "X", "cat": "step", "name": step_name(p, d), "pid": 3, "tid": 1, "ts": s / 1000,
                      "dur": (e - s) / 1000, "args": {"num_seqs": int(cols["num_seqs"][i]), "prefill_tokens": p,
                                                      "decode_tokens": d, "kv_blocks_used": kv, "num_waiting": w}},
                     {"ph": "C", "name": "kv_blocks_used", "pid": 3, "ts": s / 1000, "args": {"blocks": kv}},
                     {"ph": "C", "name": "num_waiting", "pid": 3, "ts": s / 1000, "args": {"requests": w}}]
    assert texts == ",\n".join(json.dumps(event, sort_keys=True, separators=(",", ":")) for event in expected)
