"""Invariants over random scenarios (hypothesis): every request finishes once with the tokens it asked
for, KV blocks stay within capacity and are all free at the end, runs are deterministic, and decode
runs with lookahead give exactly what stepping one by one gives."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cosim.hub.config.choices import BATCHING, LOAD_METRICS, PACKING, ROUTERS
from cosim.hub.config.loading import parse_config
from cosim.hub.metrics import summary_json
from cosim.hub.sim.clients import llm
from cosim.hub.sim.kernel import Kernel
from cosim.hub.sim.scheduling import ScheduledBatch
from cosim.hub.studies import simulation
from cosim.hub.studies.runner import started_backends
from cosim.hub.studies.simulation import Simulation
from cosim.hub.timing.step_timer import StepTimer
from tests.scenarios.helpers import client, scenario


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    block_size = draw(st.sampled_from([4, 16]))
    max_in, max_out = 200, 40
    blocks = draw(st.integers(min_value=-(-(max_in + max_out) // block_size) + 1, max_value=400))
    # swap needs swap space (refused without it); recompute ignores any it is given
    preemption, swap_space_bytes = draw(st.sampled_from([("recompute", 0), ("recompute", 10**9), ("swap", 10**9)]))
    common = dict(block_size=block_size, num_gpu_blocks=blocks,
                  max_num_seqs=draw(st.integers(1, 16)), max_num_batched_tokens=draw(st.sampled_from([256, 2048])),
                  preemption=preemption, swap_space_bytes=swap_space_bytes,
                  enable_prefix_caching=draw(st.booleans()), packing=draw(st.sampled_from(list(PACKING))))
    batching = draw(st.sampled_from(list(BATCHING)))
    if draw(st.booleans()):
        clients = [client("p", role="prefill", batching=batching, **common),
                   client("d", role="decode", batching=batching, **common)]
    else:
        clients = [client(f"c{i}", batching=batching, **common) for i in range(draw(st.integers(1, 3)))]
    workload = {"requests": draw(st.integers(1, 25)),
                "arrival": {"process": "poisson", "rate_per_s": draw(st.sampled_from([1e5, 1e6, 1e7]))},
                "input_tokens": {"dist": "uniform", "low": 1, "high": max_in},
                "output_tokens": {"dist": "uniform", "low": 1, "high": max_out}}
    if draw(st.booleans()):
        workload["prefix"] = {"num_prefixes": 2, "tokens": 64, "share": 0.5}
        workload["input_tokens"]["high"] = max_in - 64
    templates = {}
    if draw(st.booleans()):  # a mix with multi-path reasoning (branches share the prompt's KV)
        branches = draw(st.integers(1, 3))
        templates = {"think": {"stages": ["prefill", "reason"], "reasoning": {"branches": branches}}}
        workload["templates"] = {"chat": 1, "think": 1}
        workload["output_tokens"]["high"] = max_out // branches
    policy = draw(st.sampled_from(list(ROUTERS)))
    metric = draw(st.sampled_from(list(LOAD_METRICS)))
    raw = scenario(clients=clients, per_token_ns=draw(st.sampled_from([0, 7])), workload=workload,
                   router={"policy": policy, "load_metric": metric, "heavy_threshold_tokens": 100},
                   seed=draw(st.integers(0, 5)), templates=templates)
    raw["backends"]["lin"]["options"]["per_context_ns"] = draw(st.sampled_from([0, 3]))
    return raw


def simulate(raw: dict) -> Simulation:
    config = parse_config(raw)
    with started_backends(config, ["lin"]) as backends:
        sim = Simulation(config, Path("."), backends)
        assert sim.run() is None
    return sim


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_for_random_scenarios(raw: dict) -> None:
    sim = simulate(raw)
    requests = sim.coordinator.requests
    assert sim.coordinator.num_finished == len(requests) == raw["workload"]["requests"]
    for r in requests:
        assert r.generated_tokens == r.output_tokens
        assert r.arrival_ns <= r.first_token_ns <= r.finish_ns
        assert all(s.enqueue_ns <= s.start_ns <= s.end_ns for s in r.stages)
    for c in sim.clients:
        kv = c.scheduler.kv
        used = c.timeline.columns()["kv_blocks_used"]
        assert used.size == 0 or used.max() <= kv.num_blocks
        assert kv.num_used == 0 and not any(kv.holder_counts()), "every block is free at the end"
        if kv.enable_prefix_caching:
            assert sum(kv.free_queue_blocks()) == kv.num_blocks, "the free queue holds every block"
        kv.check()  # the pool's own invariants: its counts, and its free queue's links
        assert not c.timer.settled().running and not c.scheduler.waiting
        ends = c.timeline.columns()["end_ns"]
        assert (ends[1:] >= ends[:-1]).all(), "a client's steps never go back in time"


@settings(max_examples=5, deadline=None)
@given(scenarios())
def test_same_config_and_seed_give_identical_summary(raw: dict) -> None:
    first, second = simulate(raw), simulate(raw)
    assert summary_json(first.summarize(0.0)) == summary_json(second.summarize(0.0))


def _example(clients: list[dict], workload: dict, *, policy: str, seed: int, templates: dict | None = None) -> dict:
    """A scenario as :func:`scenarios` draws them (linear backend, no per-token or context time)."""
    workload = {"arrival": {"process": "poisson", "rate_per_s": 1e7}, **workload}
    raw = scenario(clients=clients, per_token_ns=0, workload=workload, seed=seed, templates=templates or {},
                   router={"policy": policy, "load_metric": "input_tokens", "heavy_threshold_tokens": 100})
    raw["backends"]["lin"]["options"]["per_context_ns"] = 0
    return raw


def _swap_with_prefix_caching() -> dict:
    """Hypothesis found it: a sequence preempted at the end of a decode run was swapped out, where
    stepping one by one recomputes it (with prefix caching its full blocks are cached; the run's
    steps left them uncached until it ended)."""
    sched = dict(batching="static", block_size=16, num_gpu_blocks=16, max_num_seqs=2, max_num_batched_tokens=256,
                 preemption="swap", swap_space_bytes=10**9, enable_prefix_caching=True)
    return _example([client(f"c{i}", **sched) for i in range(3)],
                    {"requests": 13, "input_tokens": {"dist": "uniform", "low": 1, "high": 200},
                     "output_tokens": {"dist": "uniform", "low": 1, "high": 40}}, policy="load_based", seed=3)


def _forks_preempting_everyone() -> dict:
    """Hypothesis found it: static batches whose reasoning branches fork into a full KV cache; the step
    that preempts every running sequence admits no one, and the client, idle, was never woken again."""
    sched = dict(batching="static", block_size=4, num_gpu_blocks=62, max_num_seqs=3, max_num_batched_tokens=256,
                 preemption="recompute", swap_space_bytes=0, enable_prefix_caching=False)
    return _example([client("c0", **sched)],
                    {"requests": 10, "arrival": {"process": "poisson", "rate_per_s": 1e5},
                     "input_tokens": {"dist": "uniform", "low": 1, "high": 136},
                     "output_tokens": {"dist": "uniform", "low": 1, "high": 20},
                     "prefix": {"num_prefixes": 2, "tokens": 64, "share": 0.5}, "templates": {"chat": 1, "think": 1}},
                    policy="round_robin", seed=0,
                    templates={"think": {"stages": ["prefill", "reason"], "reasoning": {"branches": 2}}})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
@example(_swap_with_prefix_caching())
@example(_forks_preempting_everyone())
def test_decode_runs_and_lookahead_change_no_result(raw: dict) -> None:
    """Bulk decode runs (with lookahead) against per-step updates of every sequence (without)."""
    bulk = simulate(raw)
    raw["backends"]["lin"]["lookahead"] = False
    stepwise = simulate(raw)
    assert bulk.coordinator.requests == stepwise.coordinator.requests
    for a, b in zip(bulk.clients, stepwise.clients):
        assert all((a.timeline.columns()[k] == b.timeline.columns()[k]).all() for k in a.timeline.COLUMNS)
    summaries = [sim.summarize(0.0) for sim in (bulk, stepwise)]
    for summary in summaries:
        summary.pop("backends")  # how often the backend was asked differs, by design
    assert summary_json(summaries[0]) == summary_json(summaries[1])


@st.composite
def multistage_scenarios(draw: st.DrawFn) -> dict:
    """Random scenarios with pre/post-processing stages and multi-path reasoning around the LLM stages."""
    raw = draw(scenarios())
    branches = draw(st.integers(1, 4))
    raw["clients"] += [{"name": "pre", "kind": "preprocess", "servers": draw(st.integers(1, 2)),
                        "service": {"base_s": 1e-6}},
                       {"name": "post", "kind": "postprocess", "service": {"per_token_s": 1e-8}}]
    raw["templates"] = {"think": {"stages": ["preprocess", "prefill", "reason", "postprocess"],
                                  "reasoning": {"branches": branches}}}
    raw["workload"]["templates"] = {"chat": 1, "think": 2}
    raw["workload"]["output_tokens"]["high"] = 40 // branches
    return raw


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(multistage_scenarios())
def test_router_loads_never_go_negative_and_return_to_zero(raw: dict) -> None:
    """Every client's load, by every metric, checked after each of its steps (branches used to
    drive ``input_tokens`` negative: each finished branch subtracted its request's prompt). Every
    step ends through the kernel's heap (none in place): a lone client's at its clock's ``step_done``,
    a lock-step group's member's at its ``end_step``."""
    config = parse_config(raw)
    lowest: dict[str, int] = {}

    def check(c: llm.LLMClient) -> None:
        for metric in llm.LOAD_METRICS:
            lowest[metric] = min(lowest.get(metric, 0), c.load(metric))

    def checked_step_done(timer: StepTimer, c: llm.LLMClient, batch: ScheduledBatch, start_ns: int,
                          step_done: Any = StepTimer.step_done) -> None:
        step_done(timer, c, batch, start_ns)
        check(c)

    with started_backends(config, ["lin"]) as backends, \
            mock.patch.object(simulation, "Kernel", functools.partial(Kernel, in_place=False)), \
            mock.patch.object(StepTimer, "step_done", checked_step_done):
        sim = Simulation(config, Path("."), backends)
        for c in sim.clients:
            def checked(batch, start_ns, c=c, end_step=c.end_step) -> None:
                end_step(batch, start_ns)
                check(c)
            c.end_step = checked  # type: ignore[method-assign]
        assert sim.run() is None
    assert lowest and min(lowest.values()) == 0
    for c in sim.clients:
        assert [c.load(m) for m in ("stages", "input_tokens", "remaining_tokens")] == [0, 0, 0], c.name
    assert all(s.load("stages") == 0 for s in sim.services)
