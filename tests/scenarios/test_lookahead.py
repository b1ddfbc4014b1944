"""Exact lookahead and the timing cache change how often backends are asked, never the results."""

from __future__ import annotations

import functools
import gc
import weakref
from pathlib import Path
from typing import Any

import pytest

import cosim
from cosim.adapters.roofline.backend import RooflineBackend
from cosim.adapters.sdk import Session
from cosim.adapters.sdk.testing import LinearBackend
from cosim.hub.config.choices import BATCHING
from cosim.hub.errors import ScenarioError
from cosim.hub.sim.kernel import Kernel
from cosim.hub.studies import simulation
from cosim.hub.timing.step_timer import StepTimer
from cosim.v1 import types_pb2 as pb
from tests.scenarios.helpers import client, scenario


def config(**backend: bool) -> dict:
    raw = scenario(
        clients=[client("a", batching="continuous", num_gpu_blocks=400),
                 client("b", batching="chunked", chunk_size=256), client("p", role="prefill"),
                 client("d", role="decode", num_gpu_blocks=300)],
        per_token_ns=37,
        workload={"requests": 120, "arrival": {"process": "poisson", "rate_per_s": 4000},
                  "input_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.8},
                  "output_tokens": {"dist": "uniform", "low": 1, "high": 120}},
        router={"policy": "least_outstanding"})
    raw["backends"]["lin"]["options"]["per_context_ns"] = 3  # step times depend on every context length
    raw["backends"]["lin"].update(backend)
    return raw


def test_lookahead_and_cache_give_byte_identical_runs(tmp_path: Path) -> None:
    folders = {name: cosim.run(config(**flags), output_dir=tmp_path / name).output_dir
               for name, flags in {"lookahead": {}, "step_by_step": {"lookahead": False},
                                   "no_cache": {"cache": False, "lookahead": False}}.items()}
    reference = (folders["lookahead"] / "requests.csv").read_bytes()
    assert reference.count(b"\n") == 121
    for name in ("step_by_step", "no_cache"):
        assert (folders[name] / "requests.csv").read_bytes() == reference, name
        assert (folders[name] / "clients.csv").read_bytes() == (folders["lookahead"] / "clients.csv").read_bytes()


def test_lookahead_sends_fewer_rpcs_than_steps() -> None:
    with_lookahead = cosim.run(config()).summary["backends"]
    step_by_step = cosim.run(config(lookahead=False)).summary["backends"]
    assert with_lookahead["steps_timed"] == step_by_step["steps_timed"]
    assert with_lookahead["rpcs"] < 0.5 * step_by_step["rpcs"]


def test_a_runs_step_timers_are_collected_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timer, its session (whose riders include it) and its client's callbacks form cycles through
    the core's objects; the garbage collector frees them once the run is done."""
    timers: list[weakref.ref[StepTimer]] = []
    init = StepTimer.__init__

    def tracked(self: StepTimer, **kwargs: Any) -> None:
        init(self, **kwargs)
        timers.append(weakref.ref(self))

    monkeypatch.setattr(StepTimer, "__init__", tracked)
    cosim.run(config())
    gc.collect()
    assert len(timers) == 4 and all(timer() is None for timer in timers)


@pytest.mark.parametrize("rate", [20, 4000], ids=["mostly_alone", "bursty"])
def test_steps_handled_without_the_heap_are_the_same_events(tmp_path: Path, rate: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's step end and wake-up, handled in place when nothing comes before them
    (before Kernel.peek), and a decode run's steps taken in one go while nothing else happens
    (StepTimer.take_steps, core/src/stepping.rs), are the events and steps the heap would have
    handled, in order."""
    raw = config()
    raw["workload"]["arrival"]["rate_per_s"] = rate

    summaries = []

    def run(name: str) -> tuple[Path, list[tuple[int, str]], int]:
        result = cosim.run(raw, output_dir=tmp_path / name, log_events=10**6)
        summaries.append({k: v for k, v in result.summary.items() if k != "wall_time_s"})
        return result.output_dir, result.events, len(result.events)

    heap_ends, timed = [0], [0]  # step ends the heap handled; steps timed one by one (not in bulk)
    step_done, duration_ns = StepTimer.step_done, StepTimer.duration_ns

    def counted_step_done(self: StepTimer, *args: Any) -> None:
        heap_ends[0] += 1
        step_done(self, *args)

    def counted_duration(self: StepTimer, *args: Any) -> Any:
        timed[0] += 1
        return duration_ns(self, *args)

    monkeypatch.setattr(StepTimer, "step_done", counted_step_done)
    monkeypatch.setattr(StepTimer, "duration_ns", counted_duration)
    inline, inline_events, inline_count = run("inline")
    inline_heap_ends, inline_timed = heap_ends[0], timed[0]
    heap_ends[0] = timed[0] = 0
    # something always comes next (Kernel.peek is now): the heap's way
    monkeypatch.setattr(simulation, "Kernel", functools.partial(Kernel, in_place=False))
    heap, heap_events, heap_count = run("heap")
    assert inline_count == heap_count > 2 * 120
    assert heap_ends[0] == timed[0]  # every step through the heap, timed one by one
    # most of the steps when they are alone, some when bursty (a step's end and wake-up: two events)
    assert 2 * (heap_ends[0] - inline_heap_ends) > inline_count / 4
    assert timed[0] - inline_timed > inline_count / 20  # a decode run's steps taken in bulk
    assert inline_events == heap_events
    assert summaries[0] == summaries[1]  # energy, cache hits and lookups included
    for name in ("requests.csv", "clients.csv", "trace.json"):
        assert (inline / name).read_bytes() == (heap / name).read_bytes(), name


class JitteryBackend(LinearBackend):
    """Linear, plus a deterministic jitter in the contexts, so the longest gap between
    tokens falls anywhere in a decode run rather than at its (longest-context) end."""

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        timing = super().predict(session, batch)
        timing.duration_ns += sum(batch.context_tokens) * 7919 % 5000
        return timing


@pytest.mark.parametrize("host_time", [False, True], ids=["sync", "async_scheduling"])
@pytest.mark.parametrize("batching", list(BATCHING))
def test_decode_runs_match_stepping_one_by_one(tmp_path: Path, batching: str, host_time: bool) -> None:
    """Long decodes cut by arrivals, KV block boundaries and finishes, routed by remaining work
    (with host time, steps are formed one step ahead, as vLLM's async scheduling does)."""
    def run(name: str, **flags: bool) -> Path:
        sched = {"batching": batching, "block_size": 16, "num_gpu_blocks": 60, "chunk_size": 64,
                 "host_time": host_time}
        raw = scenario(
            clients=[client("a", **sched), client("b", **sched)],
            per_token_ns=11,
            workload={"requests": 40, "arrival": {"process": "poisson", "rate_per_s": 2000},
                      "input_tokens": {"dist": "uniform", "low": 20, "high": 200},
                      "output_tokens": {"dist": "uniform", "low": 50, "high": 300}},
            router={"policy": "load_based", "load_metric": "remaining_tokens"})
        raw["backends"]["lin"]["python"] = "tests.scenarios.test_lookahead:JitteryBackend"
        raw["backends"]["lin"].update(flags)
        return cosim.run(raw, output_dir=tmp_path / name).output_dir

    runs, stepwise = run("runs"), run("stepwise", lookahead=False)
    for name in ("requests.csv", "clients.csv"):
        assert (runs / name).read_bytes() == (stepwise / name).read_bytes(), name


class BucketSafeRecorder(LinearBackend):
    """Linear, declaring bucketed_cache_safe, and remembering every context it was asked about."""

    capabilities = ("bucketed_cache_safe",)
    contexts: set[int] = set()

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        BucketSafeRecorder.contexts.update(batch.context_tokens)
        return super().predict(session, batch)


def test_bucketed_cache_rounds_contexts_for_backends_that_declare_it_safe() -> None:
    raw = config(cache_bucket_tokens=64)
    raw["backends"]["lin"]["python"] = "tests.scenarios.test_lookahead:BucketSafeRecorder"
    BucketSafeRecorder.contexts.clear()
    bucketed = cosim.run(raw).summary
    assert bucketed["requests"]["completed"] == 120
    assert BucketSafeRecorder.contexts and all(c % 64 == 0 for c in BucketSafeRecorder.contexts)
    exact = cosim.run(config()).summary
    assert bucketed["backends"]["rpcs"] < exact["backends"]["rpcs"]
    assert bucketed["backends"]["cache_hit_rate"] > exact["backends"]["cache_hit_rate"]


def test_bucketed_cache_is_refused_for_a_backend_that_does_not_declare_it() -> None:
    with pytest.raises(ScenarioError, match=r"backends\.lin\.cache_bucket_tokens: 64: backend 'linear' does not "
                                            r"declare 'bucketed_cache_safe'"):
        cosim.run(config(cache_bucket_tokens=64))


class DecodeRecorder(LinearBackend):
    """Linear, remembering the decodes' contexts of every batch it times, in the batch's order."""

    decodes: list[list[int]] = []

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        DecodeRecorder.decodes.append([c if n == 1 else -1 for n, c in zip(batch.new_tokens, batch.context_tokens)])
        return super().predict(session, batch)


class PooledRecorder(DecodeRecorder):
    """Declaring pooled_decodes for each session it opens (not in Describe)."""

    def session_capabilities(self, session: Session[pb.SessionSpec]) -> tuple[str, ...]:
        return ("pooled_decodes",)


def representative(batch: list[int]) -> bool:
    """Whether a batch DecodeRecorder saw has its decodes last, all at one context."""
    decodes = [c for c in batch if c >= 0]
    return batch[len(batch) - len(decodes):] == decodes and len(set(decodes)) <= 1


@pytest.mark.parametrize("in_process", [False, True], ids=["grpc", "in-process"])
def test_the_hub_pools_decodes_only_for_sessions_that_declare_it(in_process: bool) -> None:
    """A pooled session's batches reach the backend as representative ones; an unpooled one's as formed.
    Pooling merges batches, so the backend times fewer."""
    timed = {}
    for name in ("DecodeRecorder", "PooledRecorder"):
        raw = config()
        raw["backends"]["lin"]["python"] = f"tests.scenarios.test_lookahead:{name}"
        DecodeRecorder.decodes.clear()
        assert cosim.run(raw, in_process=in_process).summary["requests"]["completed"] == 120
        assert all(map(representative, DecodeRecorder.decodes)) == (name == "PooledRecorder"), name
        timed[name] = len(DecodeRecorder.decodes)
    assert timed["PooledRecorder"] < timed["DecodeRecorder"]


def test_bucketed_roofline_keeps_time_per_output_token_within_half_a_percent() -> None:
    """Per step the rounding changes little; TTFT, which hangs on where arrivals fall between
    steps, moves more (a few percent here), which is why exact keys stay the default."""
    base = {"seed": 2, "models": {"m": {"preset": "meta-llama/Meta-Llama-3-8B"}},
            "hardware": {"h": {"preset": "H100-SXM"}},
            "clients": [{"name": "c0", "model": "m", "backend": "r", "hardware": {"device": "h"}}],
            "workload": {"requests": 30, "arrival": {"process": "poisson", "rate_per_s": 0.5},
                         "input_tokens": {"dist": "uniform", "low": 1000, "high": 8000},
                         "output_tokens": {"dist": "uniform", "low": 500, "high": 2000}}}
    exact, approx = (cosim.run({**base, "backends": {"r": {"kind": "roofline", "cache_bucket_tokens": bucket}}})
                     .summary["latency"]["tpot_s"]["mean"] for bucket in (0, 16))
    assert approx != exact and approx == pytest.approx(exact, rel=0.005)


class PythonRoofline(RooflineBackend):
    """The roofline timed through its Python ``predict``: a subclass hands the hub no compiled model."""


def test_a_session_timed_natively_predicts_nothing_and_takes_decode_runs_in_bulk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process roofline's compiled model times a miss for less than a forecast costs: no step
    timer forecasts, and a decode run's step that misses is timed where the run goes on in bulk.
    The same bytes and steps as the roofline's Python path, which looks ahead."""
    timers: list[StepTimer] = []
    timed = [0]  # steps timed one by one (not in bulk)
    init, duration_ns = StepTimer.__init__, StepTimer.duration_ns

    def tracked(self: StepTimer, **kwargs: Any) -> None:
        init(self, **kwargs)
        timers.append(self)

    def counted_duration(self: StepTimer, *args: Any) -> Any:
        timed[0] += 1
        return duration_ns(self, *args)

    monkeypatch.setattr(StepTimer, "__init__", tracked)
    monkeypatch.setattr(StepTimer, "duration_ns", counted_duration)

    def run(name: str, backend: dict[str, Any]) -> tuple[Path, dict[str, Any], int, bool]:
        timers.clear()
        timed[0] = 0
        raw = {"seed": 3, "models": {"m": {"preset": "meta-llama/Meta-Llama-3-8B"}},
               "hardware": {"h": {"preset": "H100-SXM"}}, "backends": {"r": backend},
               "clients": [{"name": "c0", "model": "m", "backend": "r", "hardware": {"device": "h"}}],
               "workload": {"requests": 20, "arrival": {"process": "poisson", "rate_per_s": 1},
                            "input_tokens": {"dist": "uniform", "low": 100, "high": 2000},
                            "output_tokens": {"dist": "uniform", "low": 50, "high": 400}}}
        result = cosim.run(raw, output_dir=tmp_path / name, in_process=True)
        forecast = any(timer._forecast is not None or timer.max_lookahead for timer in timers)
        return result.output_dir, result.summary, timed[0], forecast

    native, native_summary, native_timed, native_forecast = run("native", {"kind": "roofline"})
    python, python_summary, python_timed, python_forecast = run(
        "python", {"python": "tests.scenarios.test_lookahead:PythonRoofline"})
    assert not native_forecast and python_forecast
    steps = native_summary["backends"]["steps_timed"]
    assert steps == python_summary["backends"]["steps_timed"]
    assert native_timed <= python_timed and 10 * native_timed < steps  # misses too: most steps in bulk
    for name in ("requests.csv", "clients.csv", "trace.json"):
        assert (native / name).read_bytes() == (python / name).read_bytes(), name


def test_lookahead_admits_the_queue_head_at_a_departure() -> None:
    """A full client (4 seats, 40 prompts waiting): each departure admits the next prompt, which
    lookahead predicts, departure after departure while the queue lasts."""
    raw = scenario(clients=[client("c0", batching="continuous", max_num_seqs=4)], per_token_ns=7,
                   workload={"requests": 40, "arrival": {"process": "poisson", "rate_per_s": 1e6},
                             "input_tokens": {"dist": "uniform", "low": 20, "high": 200},
                             "output_tokens": {"dist": "uniform", "low": 20, "high": 60}})
    raw["backends"]["lin"]["options"]["per_context_ns"] = 3
    backends = cosim.run(raw).summary["backends"]
    assert backends["steps_timed"] == 450
    assert backends["rpcs"] <= 9  # 35 when it predicts one admission ahead, 53 when it stops at a departure


def test_lookahead_predicts_a_backlog_of_prompts_on_a_prefill_client() -> None:
    """40 prompts wait on a prefill-only client taking about two per step: each next step
    takes the queue's head as far as the token budget allows, which arrivals (at the tail)
    cannot change, so lookahead predicts the steps while the backlog lasts."""
    raw = scenario(clients=[client("p", role="prefill", max_num_batched_tokens=256), client("d", role="decode")],
                   per_token_ns=7,
                   workload={"requests": 40, "arrival": {"process": "poisson", "rate_per_s": 1e9},
                             "input_tokens": {"dist": "uniform", "low": 20, "high": 200},
                             "output_tokens": {"dist": "fixed", "value": 1}})
    backends = cosim.run(raw).summary["backends"]
    assert backends["steps_timed"] == 23
    assert backends["rpcs"] <= 5  # two sessions opened, then 3 step calls; 25 when each step was a surprise


class SessionCounter(LinearBackend):
    """Linear, counting the sessions the hub opens."""

    opened = 0

    def open_session(self, spec: pb.SessionSpec) -> tuple[int, int, int, int]:
        SessionCounter.opened += 1
        return super().open_session(spec)


def test_clients_of_one_spec_share_a_session_and_top_up_each_other() -> None:
    """Four identical clients under Poisson load: each arrival's admission is a miss. Sharing one
    session, each miss also predicts the other clients' next steps where theirs fall short (after
    an admission the cache answered, or a forecast arrival that went elsewhere), so those clients'
    own misses mostly never happen. A fifth client on two GPUs gets a session of its own."""
    clients = [client(f"c{i}", batching="continuous") for i in range(4)]
    raw = scenario(clients=clients, step_ns=10_000_000, per_token_ns=20_000,
                   workload={"requests": 400, "arrival": {"process": "poisson", "rate_per_s": 48},
                             "input_tokens": {"dist": "lognormal", "mean": 600, "sigma": 0.8},
                             "output_tokens": {"dist": "uniform", "low": 20, "high": 200}},
                   router={"policy": "least_outstanding"})
    raw["backends"]["lin"]["options"]["per_context_ns"] = 3
    backends = cosim.run(raw).summary["backends"]
    assert backends["steps_timed"] == 3356
    # 478 when each client asks for its own steps only; a few more than with two steps predicted past
    # each forecast arrival (under 300), which were mostly unused
    assert backends["rpcs"] <= 320

    raw["backends"]["lin"]["python"] = "tests.scenarios.test_lookahead:SessionCounter"
    raw["clients"].append(client("tp2"))
    raw["clients"][-1]["hardware"].update(count=2, tensor_parallel=2)
    SessionCounter.opened = 0
    cosim.run(raw)
    assert SessionCounter.opened == 2


class BatchCounter(LinearBackend):
    """Linear, counting the batches the hub has it time."""

    batches = 0

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        BatchCounter.batches += 1
        return super().predict(session, batch)


def test_decode_clients_predict_up_to_their_next_kv_transfer() -> None:
    """Decode clients get their requests from prefill clients, so no arrival schedule bounds their
    lookahead: the KV transfers to them do (the first in flight to land, else the median gap between
    them), so their predictions are mostly used, with no more calls."""
    raw = scenario(clients=[client("p0", role="prefill"), client("p1", role="prefill"),
                            client("d0", role="decode"), client("d1", role="decode")],
                   step_ns=10_000_000, per_token_ns=20_000,
                   workload={"requests": 200, "arrival": {"process": "poisson", "rate_per_s": 4},
                             "input_tokens": {"dist": "fixed", "value": 1000},
                             "output_tokens": {"dist": "fixed", "value": 300}},
                   network={"link": {"bandwidth_gbps": 1, "latency_s": 1e-5}})
    raw["backends"]["lin"]["options"]["per_context_ns"] = 3
    raw["backends"]["lin"]["python"] = "tests.scenarios.test_lookahead:BatchCounter"
    BatchCounter.batches = 0
    backends = cosim.run(raw).summary["backends"]
    assert backends["steps_timed"] == 10674
    assert BatchCounter.batches <= 1.2 * backends["steps_timed"]  # 1.82 when each decode client's depth was
    assert backends["rpcs"] <= 290  # twice the predictions it used since its last miss: 306 calls
