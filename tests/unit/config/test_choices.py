"""The tables of named choices: each name makes its class (or the compiled scheduler's policy or order),
the config takes exactly the table's names, and the speed hook of each batching policy."""

from __future__ import annotations

from typing import get_args

import pytest

from cosim.hub.backends.kinds import BUILTIN_KINDS
from cosim.hub.config.choices import BATCHING, LOAD_METRICS, PACKING, ROUTERS
from cosim.hub.config.loading import parse_config
from cosim.hub.config.scheduler import SchedulerConfig
from cosim.hub.config.sections import BackendConfig, RouterConfig
from cosim.hub.errors import ScenarioError
from cosim.hub.sim.records import RequestRecord, StageRecord
from cosim.hub.sim.registry import chosen
from cosim.hub.sim.routing import Router
from cosim.hub.sim.scheduling import BatchingPolicy, PackingOrder, Sequence
from tests.scenarios.helpers import client, scenario


@pytest.mark.parametrize("name", list(ROUTERS))
def test_every_router_name_makes_a_concrete_router(name: str) -> None:
    made = chosen(ROUTERS, name, Router)
    assert issubclass(made, Router) and not getattr(made, "__abstractmethods__", None), made


def test_every_batching_and_packing_name_makes_the_compiled_schedulers_own() -> None:
    assert {name: BatchingPolicy(SchedulerConfig(batching=name)).whole_prompts for name in BATCHING} == {
        "static": True, "continuous": True, "chunked": False, "mixed": True}
    assert {name: PackingOrder(name).arrival_order for name in PACKING} == {
        "fcfs": True, "least_work_left": False, "priority": False, "edf": False}
    with pytest.raises(ValueError, match='no packing order "lifo"'):
        PackingOrder("lifo")


def test_a_table_naming_the_wrong_kind_of_class_is_refused() -> None:
    with pytest.raises(TypeError, match="'random'.* is not a BatchingPolicy"):
        chosen(ROUTERS, "random", BatchingPolicy)


@pytest.mark.parametrize(("model", "field", "table"), [
    (RouterConfig, "policy", ROUTERS), (RouterConfig, "load_metric", LOAD_METRICS),
    (SchedulerConfig, "batching", BATCHING), (SchedulerConfig, "packing", PACKING),
    (BackendConfig, "kind", BUILTIN_KINDS)])
def test_the_config_takes_exactly_the_names_of_its_table_in_order(model: type, field: str, table: dict) -> None:
    names = [a for arg in get_args(model.model_fields[field].annotation) for a in (get_args(arg) or [arg])]
    assert [n for n in names if n is not type(None)] == list(table)


def test_a_wrapping_router_cannot_be_its_own_base() -> None:
    assert "sticky" not in get_args(RouterConfig.model_fields["sticky_base"].annotation)


def test_an_unknown_router_is_an_error_naming_the_path_and_the_choices() -> None:
    with pytest.raises(ScenarioError) as err:
        parse_config(scenario(clients=[client("c")], router={"policy": "fastest"}))
    assert "router.policy" in str(err.value) and "round_robin" in str(err.value)


def test_a_batching_policy_decodes_all_only_where_no_budget_caps_the_decodes() -> None:
    built_in = {name: BatchingPolicy(SchedulerConfig(batching=name, chunk_size=4)) for name in BATCHING}
    assert {name: policy.decodes_all(4) for name, policy in built_in.items()} == {
        "static": True, "continuous": True, "chunked": True, "mixed": True}
    assert built_in["chunked"].decodes_all(5) is False  # five decodes do not fit a budget of four


def sequence(rid: int, order: int, *, priority: int = 0, deadline_ns: int = 2**62, left: int = 10) -> Sequence:
    request = RequestRecord(id=rid, model="m", arrival_ns=0, input_tokens=left, output_tokens=1,
                            priority=priority, deadline_ns=deadline_ns)
    seq = Sequence(request, StageRecord(kind="prefill", client="c", enqueue_ns=0), num_tokens=left,
                   num_computed=0, target_generated=1)
    seq.order = order
    return seq


@pytest.mark.parametrize(("name", "queued", "victim"), [
    ("fcfs", [0, 1, 2, 3], 3),
    ("least_work_left", [3, 1, 2, 0], 3),  # 10 + 1 tokens left on 0, 5 + 1 on 3, 8 + 1 on 1 and 2 (by arrival)
    ("priority", [1, 3, 2, 0], 0),  # priorities 2, 0, 1, 0 of requests 0..3: lower first, then arrival
    ("edf", [2, 3, 1, 0], 0),  # deadlines 40, 30, 10, 20
])
def test_each_packing_order_queues_and_picks_its_victim(name: str, queued: list[int], victim: int) -> None:
    order = PackingOrder(name)
    seqs = [sequence(0, 0, priority=2, deadline_ns=40, left=10), sequence(1, 1, priority=0, deadline_ns=30, left=8),
            sequence(2, 2, priority=1, deadline_ns=10, left=8), sequence(3, 3, priority=0, deadline_ns=20, left=5)]
    waiting: list[Sequence] = []
    for seq in seqs:
        order.queue(waiting, seq, front=False)
    assert [s.request.id for s in waiting] == queued
    assert order.victim(seqs).request.id == victim
