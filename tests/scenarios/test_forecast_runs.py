"""In whole runs, every prediction a client's kept forecast gives (top-ups, misses) is what a fresh
copy of its scheduler would predict at that moment: keeping it changes no call to a backend."""

from __future__ import annotations

from typing import Any

import pytest
from cosim_core import predict
from hypothesis import HealthCheck, given, settings

import cosim
from cosim.adapters.sdk import Session
from cosim.adapters.sdk.testing import LinearBackend
from cosim.hub.sim.scheduling import ScheduledBatch, Signature
from cosim.hub.timing.step_timer import StepTimer
from cosim.v1 import types_pb2 as pb
from tests.scenarios.helpers import client, scenario
from tests.scenarios.test_properties import scenarios, simulate


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Checks every lookahead against a fresh prediction; counts those a kept forecast answered."""
    counts = {"calls": 0, "kept": 0}
    lookahead = StepTimer._lookahead

    def check(self: StepTimer, batch: ScheduledBatch, depth: int) -> list[Signature]:
        before = self._forecast
        got = lookahead(self, batch, depth)
        self.settled()  # as the fresh copy needs (settling earlier changes no result)
        assert got == predict(self.scheduler, batch, depth)
        counts["calls"] += 1
        counts["kept"] += self._forecast is before
        return got

    monkeypatch.setattr(StepTimer, "_lookahead", check)
    return counts


@pytest.fixture
def checked_unheld(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """As `checked`, holding no forecast (which would keep its KV blocks from the next one): counts
    the calls made with a dropped forecast's KV blocks kept to be brought up to date."""
    counts = {"calls": 0, "spare": 0}
    lookahead = StepTimer._lookahead

    def check(self: StepTimer, batch: ScheduledBatch, depth: int) -> list[Signature]:
        counts["spare"] += self._spare is not None
        got = lookahead(self, batch, depth)
        self.settled()
        assert got == predict(self.scheduler, batch, depth)
        counts["calls"] += 1
        return got

    monkeypatch.setattr(StepTimer, "_lookahead", check)
    return counts


def test_a_new_forecast_on_the_last_ones_kv_blocks_predicts_as_a_fresh_copy(checked_unheld: dict[str, int]) -> None:
    sched: dict[str, Any] = {"batching": "chunked", "block_size": 16, "num_gpu_blocks": 300,
                             "enable_prefix_caching": True, "max_num_batched_tokens": 256}
    raw = scenario(clients=[client("a", **sched), client("b", **sched)], per_token_ns=11,
                   workload={"requests": 80, "arrival": {"process": "poisson", "rate_per_s": 50_000},
                             "input_tokens": {"dist": "uniform", "low": 20, "high": 400},
                             "output_tokens": {"dist": "uniform", "low": 20, "high": 200},
                             "prefix": {"num_prefixes": 2, "tokens": 64}},
                   router={"policy": "least_outstanding"})
    simulate(raw)
    assert checked_unheld["calls"] > 50 and checked_unheld["spare"] > 10, checked_unheld


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(scenarios())
def test_forecasts_on_kept_kv_blocks_predict_as_fresh_copies_in_random_scenarios(checked_unheld: dict[str, int],
                                                                                 raw: dict) -> None:
    simulate(raw)


def shared_session() -> dict[str, Any]:
    """Three clients of one session under a burst of arrivals: misses, top-ups and kept forecasts."""
    sched: dict[str, Any] = {"batching": "continuous", "block_size": 16, "num_gpu_blocks": 400}
    return scenario(clients=[client("a", **sched), client("b", **sched), client("c", **sched)], per_token_ns=11,
                    workload={"requests": 60, "arrival": {"process": "poisson", "rate_per_s": 200_000},
                              "input_tokens": {"dist": "uniform", "low": 20, "high": 300},
                              "output_tokens": {"dist": "uniform", "low": 20, "high": 200}},
                    router={"policy": "least_outstanding"})


def test_shared_session_top_ups_continue_the_forecast(checked: dict[str, int]) -> None:
    simulate(shared_session())
    assert checked["calls"] > 100 and checked["kept"] > checked["calls"] // 4


class BatchRecorder(LinearBackend):
    """Linear, recording the batches the hub has it time, in order."""

    batches: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        BatchRecorder.batches.append((tuple(batch.new_tokens), tuple(batch.context_tokens)))
        return super().predict(session, batch)


def test_predictions_handed_over_natively_are_those_lookahead_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step timer hands its forecast's keys to the session directly, and is asked through
    ``_lookahead`` (its signatures) only where a subclass replaces it: either way the backend times
    the same batches in the same calls."""
    raw = shared_session()
    raw["backends"]["lin"]["python"] = "tests.scenarios.test_forecast_runs:BatchRecorder"

    def timed() -> tuple[list[tuple[tuple[int, ...], tuple[int, ...]]], dict[str, Any]]:
        BatchRecorder.batches = []
        return BatchRecorder.batches, cosim.run(raw).summary["backends"]

    natively = timed()
    lookahead = StepTimer._lookahead
    monkeypatch.setattr(StepTimer, "_lookahead", lambda self, batch, depth: lookahead(self, batch, depth))
    assert timed() == natively
    assert len(natively[0]) > 1000 and natively[1]["rpcs"] > 20, natively[1]



def test_a_forecast_frees_what_finished_before_a_decode_run(checked: dict[str, int]) -> None:
    # Found by the random test below: under async scheduling a finished sequence's blocks are freed
    # when the next step begins; a forecast that took the decode run after it in bulk kept them, and
    # predicted a preemption (a re-prefill of 177 tokens) where the client decodes on.
    sched: dict[str, Any] = {"batching": "chunked", "block_size": 16, "num_gpu_blocks": 19, "max_num_seqs": 2,
                             "max_num_batched_tokens": 256, "preemption": "recompute"}
    workload = {"requests": 4, "arrival": {"process": "poisson", "rate_per_s": 1e6},
                "input_tokens": {"dist": "uniform", "low": 1, "high": 136},
                "output_tokens": {"dist": "uniform", "low": 1, "high": 40},
                "prefix": {"num_prefixes": 2, "tokens": 64, "share": 0.5}}
    simulate(scenario(clients=[client(f"c{i}", **sched) for i in range(3)], seed=0, workload=workload,
                      router={"policy": "round_robin"}))
    assert checked["kept"] >= 5


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(scenarios())
def test_kept_forecasts_predict_as_fresh_copies_in_random_scenarios(checked: dict[str, int], raw: dict) -> None:
    simulate(raw)
