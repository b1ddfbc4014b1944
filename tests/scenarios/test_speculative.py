"""Speculative decoding: drafts verified in one target step, hand-computed on the linear backend."""

from __future__ import annotations

from typing import Any

import pytest

import cosim
from cosim.hub.errors import ScenarioError
from tests.scenarios.helpers import client, run_with_trace, scenario

# Linear backend: step = 1000 ns + 10 ns per new token. One request of 100 prompt and 9 output tokens.
PREFILL = 1000 + 10 * 100
DECODE = 1000 + 10


def run(tmp_path: Any, speculative: dict[str, Any] | None, rows=((0, 100, 9),)) -> list:
    cfg = client("c0", batching="chunked")
    if speculative is not None:
        cfg["speculative"] = speculative
    config = scenario(clients=[cfg], per_token_ns=10)
    config["models"]["draft"] = {"preset": "meta-llama/Llama-3.2-1B"}
    tmp_path.mkdir(parents=True, exist_ok=True)
    return run_with_trace(config, list(rows), tmp_path)


def ngram(rate: float | list[float], k: int = 3) -> dict[str, Any]:
    return {"method": "ngram", "num_speculative_tokens": k, "acceptance_rate": rate, "propose_ns_per_seq": 0}


def test_without_speculation_each_step_decodes_one_token(tmp_path) -> None:
    (r,) = run(tmp_path, None)
    assert (r.first_token_ns, r.finish_ns) == (PREFILL, PREFILL + 8 * DECODE)


def test_acceptance_one_gives_k_plus_one_tokens_per_target_step(tmp_path) -> None:
    """Each verification computes 1 + 3 tokens (1040 ns) and keeps all: TPOT is the step's quarter."""
    (r,) = run(tmp_path, ngram(1.0))
    verify = 1000 + 10 * 4
    assert (r.first_token_ns, r.finish_ns, r.generated_tokens) == (PREFILL, PREFILL + 2 * verify, 9)
    assert (r.finish_ns - r.first_token_ns) / 8 == verify / 4


def test_acceptance_zero_is_strictly_slower_than_no_speculation(tmp_path) -> None:
    (plain,) = run(tmp_path / "plain", None)
    (rejected,) = run(tmp_path / "spec", ngram(0.0))
    assert rejected.finish_ns == PREFILL + 8 * (1000 + 10 * 4)  # every step verifies 3 drafts, keeps none
    assert rejected.finish_ns > plain.finish_ns


def test_ngram_proposals_cost_host_time_per_sequence(tmp_path) -> None:
    (r,) = run(tmp_path, {**ngram(1.0), "propose_ns_per_seq": 500})
    assert (r.first_token_ns, r.finish_ns) == (PREFILL + 500, PREFILL + 500 + 2 * (1040 + 500))


def test_a_draft_model_is_timed_by_the_same_backend(tmp_path) -> None:
    """The drafter runs the step's tokens once, then k - 1 single tokens: 3 forwards per step."""
    spec = {"method": "draft_model", "draft_model": "draft", "num_speculative_tokens": 3, "acceptance_rate": 1.0}
    (r,) = run(tmp_path, spec)
    first = PREFILL + PREFILL + 2 * DECODE  # target prefill, drafter over the prompt, 2 more drafts
    verify = 1040 + 1040 + 2 * DECODE
    assert (r.first_token_ns, r.finish_ns) == (first, first + 2 * verify)


def test_partial_acceptance_follows_the_per_position_rates(tmp_path) -> None:
    """Rates [1, 1, 0]: the first two drafts always pass, the third never: 3 tokens per step."""
    (r,) = run(tmp_path, ngram([1.0, 1.0, 0.0]))
    assert r.finish_ns == PREFILL + 3 * 1040  # 1 + 3 + 3 + 2 (the last step's extra is dropped)
    assert r.generated_tokens == 9


def test_summary_reports_acceptance_and_mean_accepted_length(tmp_path) -> None:
    cfg = client("c0", batching="chunked")
    cfg["speculative"] = ngram(0.6)
    config = scenario(clients=[cfg], per_token_ns=10,
                      workload={"requests": 200, "arrival": {"process": "poisson", "rate_per_s": 1e5},
                                "input_tokens": {"dist": "uniform", "low": 20, "high": 200},
                                "output_tokens": {"dist": "uniform", "low": 20, "high": 200}})
    result = cosim.run(config)
    spec = result.summary["clients"]["c0"]["speculative"]
    # P(accepted >= i) = 0.6^i: mean drafts accepted of 3 = 0.6 + 0.36 + 0.216 = 1.176 (up to the last
    # step's dropped extras and sampling noise)
    assert spec["mean_accepted_length"] == pytest.approx(2.176, abs=0.06)
    assert spec["acceptance_rate"] == pytest.approx(1.176 / 3, abs=0.02)
    assert all(r.generated_tokens == r.output_tokens for r in result.requests)
    again = cosim.run(config)
    assert again.summary["clients"]["c0"]["speculative"] == spec  # seeded: the same draws


def busy(speculative: dict[str, Any] | None, rate_per_s: float, num_gpu_blocks: int = 80) -> dict[str, Any]:
    """60 requests of 20-300 prompt and output tokens on the linear backend, every context counting
    (3 ns a token), so that no two steps of different contexts share a time."""
    cfg = client("c0", batching="chunked", num_gpu_blocks=num_gpu_blocks, block_size=16)
    if speculative is not None:
        cfg["speculative"] = speculative
    config = scenario(clients=[cfg], per_token_ns=10,
                      workload={"requests": 60, "arrival": {"process": "poisson", "rate_per_s": rate_per_s},
                                "input_tokens": {"dist": "uniform", "low": 20, "high": 300},
                                "output_tokens": {"dist": "uniform", "low": 20, "high": 300}})
    config["models"]["draft"] = {"preset": "meta-llama/Llama-3.2-1B"}
    config["backends"]["lin"]["options"]["per_context_ns"] = 3
    return config


DRAFT_MODEL = {"method": "draft_model", "draft_model": "draft", "num_speculative_tokens": 4,
               "acceptance_rate": [0.9, 0.7, 0.5, 0.3]}


@pytest.mark.parametrize("speculative", [ngram([0.9, 0.7, 0.5]), DRAFT_MODEL], ids=["ngram", "draft_model"])
def test_lookahead_and_decode_runs_do_not_change_speculative_runs(tmp_path, speculative) -> None:
    """A draft model's forwards are timed ahead with the target's predicted steps: the same run."""
    config = busy(speculative, 2e5)
    fast = cosim.run(config, output_dir=tmp_path / "fast").output_dir
    config["backends"]["lin"]["lookahead"] = False
    slow = cosim.run(config, output_dir=tmp_path / "slow").output_dir
    for name in ("requests.csv", "clients.csv"):
        assert (fast / name).read_bytes() == (slow / name).read_bytes(), name


@pytest.mark.parametrize("rate_per_s", [200, 2e5], ids=["spread", "burst"])
def test_a_draft_model_adds_about_its_targets_backend_calls(rate_per_s: float) -> None:
    """The drafter's session misses where the target's does (an arrival changes the steps of both),
    and a miss asks for the step's k forwards and those of the predicted steps in one call, so
    speculation at most about doubles the calls: 128 against 59 at 200 requests/s, 22 against 17
    in a burst. Asked a forward at a time, it made 1,772 and 1,209."""
    plain = cosim.run(busy(None, rate_per_s, num_gpu_blocks=200)).summary["backends"]
    spec = cosim.run(busy(DRAFT_MODEL, rate_per_s, num_gpu_blocks=200)).summary["backends"]
    assert spec["steps_timed"] > 1.5 * plain["steps_timed"]  # 1 + 4 forwards a step, about half the steps
    assert spec["rpcs"] <= 2.5 * plain["rpcs"]


def test_prompts_chunked_under_the_budget_verify_no_drafts(tmp_path) -> None:
    """A 300-token prompt in 128-token chunks beside a decoding request: the chunks carry no
    drafts (a partial prefill samples nothing), and both requests finish with what they asked."""
    cfg = client("c0", batching="chunked", max_num_batched_tokens=128)
    cfg["speculative"] = ngram(1.0)
    config = scenario(clients=[cfg], per_token_ns=10)
    requests = run_with_trace(config, [(0, 20, 30), (1e-6, 300, 5)], tmp_path)
    assert [r.generated_tokens for r in requests] == [30, 5]
    # the long prompt: chunks of 128 - 4 (the decode's token and drafts), then its last chunk with a decode
    assert requests[1].first_token_ns > requests[1].arrival_ns + 2 * (1000 + 10 * 128)


def test_a_draft_model_that_is_not_in_models_is_named(tmp_path) -> None:
    spec = {"method": "draft_model", "draft_model": "nope", "num_speculative_tokens": 2, "acceptance_rate": 0.5}
    with pytest.raises(ScenarioError, match=r"clients\[0\]\.speculative\.draft_model"):
        run(tmp_path, spec)


def test_rates_must_match_the_draft_count(tmp_path) -> None:
    with pytest.raises(ScenarioError, match="acceptance_rate has 2 values for 3"):
        run(tmp_path, ngram([0.5, 0.5]))
