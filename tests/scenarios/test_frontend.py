"""The API server in front of a client (``frontend``), timed by hand on the linear test backend."""

from __future__ import annotations

import pytest

import cosim.hub.studies.runner as runner
from cosim.hub.errors import ScenarioError
from tests.scenarios.helpers import client, run_with_trace, scenario

# Round figures, so that the arithmetic below is exact.
FRONTEND = {"tokenizer_batch_wait_s": 0.002, "tokenize_s_per_token": 1e-6, "output_s_per_step": 30e-6,
            "output_s_per_token": 15e-6}


def test_one_request_through_the_api_server(tmp_path) -> None:
    """Sent at 0: the tokenizer's batcher waits 2 ms for company, tokenizes 100 tokens in 100 us; the engine
    (1 us steps) has it at 2.1 ms. Each step's output takes the event loop 30 + 15 us, longer than a step,
    so the three tokens reach the client 45 us apart."""
    config = scenario(clients=[client(batching="chunked")], frontend=FRONTEND)
    (r,) = run_with_trace(config, [(0, 100, 3)], tmp_path)
    arrival = 2_000_000 + 100 * 1_000
    assert (r.client_send_ns, r.arrival_ns) == (0, arrival)
    assert (r.first_token_ns, r.finish_ns) == (arrival + 1_000, arrival + 3_000)  # engine side, as before
    first = arrival + 1_000 + 45_000
    assert r.client_first_token_ns == first
    assert r.client_last_token_ns == first + 2 * 45_000  # the loop is still busy when the next steps end


def test_summary_keeps_engine_and_client_latency_apart(tmp_path) -> None:
    config = scenario(clients=[client(batching="chunked")], frontend=dict(FRONTEND, network_latency_s=0.001))
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input,output\n0,100,3\n")
    config["workload"] = {"requests": 1, "trace": {"path": str(trace), "format": "csv", "arrival_column": "arrival_s",
                                                   "input_column": "input", "output_column": "output"},
                          "arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"},
                          "output_tokens": {"dist": "trace"}}
    summary = runner.run(config).summary
    # The request reaches the server after 1 ms, the engine at 3.1 ms; the client gets each token 1 ms after the
    # loop is done with it.
    assert summary["latency"]["ttft_s"]["mean"] == pytest.approx(1e-6, abs=1e-12)
    client_ttft = (3_100_000 + 1_000 + 45_000 + 1_000_000) / 1e9
    assert summary["client_latency"]["ttft_s"]["mean"] == pytest.approx(client_ttft, abs=1e-12)
    assert summary["client_latency"]["itl_s"]["mean"] == pytest.approx(45e-6, abs=1e-12)
    assert summary["benchmark"]["mean_ttft_ms"] == pytest.approx(client_ttft * 1000, abs=1e-9)
    assert summary["frontend"]["c0"]["tokenizer_batches"] == 1
    # The client's TTFT, part by part: 3.1 ms in, the engine's 1 us, and 45 us + 1 ms out.
    frontend = summary["frontend"]["c0"]
    assert frontend["mean_ingress_s"] == pytest.approx(3.1e-3, abs=1e-12)
    assert frontend["mean_first_token_egress_s"] == pytest.approx(45e-6 + 1e-3, abs=1e-12)
    assert frontend["mean_ingress_s"] + summary["latency"]["ttft_s"]["mean"] + \
        frontend["mean_first_token_egress_s"] == pytest.approx(client_ttft, abs=1e-12)


def test_prompts_sent_within_the_wait_are_tokenized_together(tmp_path) -> None:
    """r0 opens a batch at 0 and r1 joins it at 1 ms: both are tokenized from 2 ms (200 us); r2, sent at 3 ms,
    opens the next (the thread is free by then): 5 ms + 100 us."""
    config = scenario(clients=[client(batching="chunked")], frontend=FRONTEND)
    r = run_with_trace(config, [(0, 100, 2), (0.001, 100, 2), (0.003, 100, 2)], tmp_path)
    assert [x.arrival_ns for x in r] == [2_200_000, 2_200_000, 5_100_000]


def test_a_full_tokenizer_batch_goes_at_once(tmp_path) -> None:
    config = scenario(clients=[client(batching="chunked")], frontend=dict(FRONTEND, tokenizer_max_batch=2))
    r = run_with_trace(config, [(0, 100, 2), (0.001, 100, 2), (0.0015, 100, 2)], tmp_path)
    # r0 and r1 fill the batch at 1 ms: done at 1.2 ms; r2 opens the next at 1.5 ms, closes at 3.5 ms
    assert [x.arrival_ns for x in r] == [1_200_000, 1_200_000, 3_600_000]


def test_without_a_frontend_latencies_end_at_the_engine(tmp_path) -> None:
    config = scenario(clients=[client(batching="chunked")])
    (r,) = run_with_trace(config, [(0, 100, 3)], tmp_path)
    assert (r.client_send_ns, r.client_first_token_ns, r.arrival_ns) == (-1, -1, 0)
    summary = runner.run(config).summary
    assert "client_latency" not in summary and "frontend" not in summary


def test_a_bad_frontend_figure_is_named() -> None:
    config = scenario(frontend={"tokenize_s_per_token": -1})
    with pytest.raises(ScenarioError, match="frontend.tokenize_s_per_token"):
        runner.run(config)
