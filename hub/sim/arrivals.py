"""Requests that have not arrived yet, kept as compact columns until they do.

A run of a million requests cannot hold a record (and a heap event) per request from the start:
:class:`PendingRequests` keeps the generated specs as numpy columns (and the few distinct pipelines
once each), and makes each request's :class:`~cosim.hub.sim.records.RequestRecord` only when its
arrival is scheduled, one at a time, in id (= arrival) order. :func:`scenario_requests` draws them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..config.scenario import ScenarioConfig
from ..config.templates import resolve_templates
from .conversations import SessionSource
from .pipelines import Pipeline, assign_pipelines, distinct_pipelines, session_pipeline
from .records import RequestRecord
from .workload import RequestSpecs, generate_requests
from .workload.inference_perf import InferencePerfSessions


class PendingRequests:
    """The requests of a run not yet handed out, in id order.

    Args:
        specs: the generated requests, sorted by arrival (ids in that order).
        pipelines: each request's pipeline.
    """

    # The object fields of a spec that a record takes.
    OBJECT_FIELDS = ("prefix_id", "prompt_token_ids", "lora", "cls")
    # Requests whose rows pop() converts to Python ints at once: numpy's per-call cost, paid per block.
    BLOCK = 1024

    def __init__(self, specs: RequestSpecs, pipelines: Sequence[Pipeline]) -> None:
        # One row per request (the fields of RequestSpecs.INTS), so that a record's integers come out as
        # Python ints in one call.
        self._ints = np.column_stack([specs.ints[name] for name in RequestSpecs.INTS])
        # The object fields a record takes that some request may set (a record's others keep their default, None).
        self._objects = {name: column for name, column in specs.objects.items() if name in self.OBJECT_FIELDS}
        self._pipeline_index, self._pipelines = distinct_pipelines(pipelines)
        self._next = 0
        # The block pop() takes from: each request's integers and pipeline index, from request _block_start on.
        self._block: list[tuple[list[int], int]] = []
        self._block_start = 0

    def __len__(self) -> int:
        """Requests not yet handed out."""
        return len(self._pipeline_index) - self._next

    def record(self, index: int) -> RequestRecord:
        """A new record of request ``index`` (its position in the specs)."""
        return self._record(index, self._ints[index].tolist(), int(self._pipeline_index[index]))

    def _record(self, index: int, ints: list[int], pipeline_index: int) -> RequestRecord:
        """The record of request ``index``, given its integers (:attr:`RequestSpecs.INTS`, the order
        :meth:`RequestRecord.arriving` takes them in) and pipeline index."""
        pipeline = self._pipelines[pipeline_index]
        record = RequestRecord.arriving(ints, pipeline.model, pipeline.template, pipeline.stages, pipeline.branches)
        for name, column in self._objects.items():  # set after: most runs have none to pass (nor a dict to build)
            setattr(record, name, column[index])
        return record

    def pop(self) -> RequestRecord | None:
        """The next request's record (None when none is left); it is no longer pending."""
        index = self._next
        if index >= len(self._pipeline_index):
            return None
        offset = index - self._block_start
        if offset >= len(self._block):
            end = index + self.BLOCK
            self._block = list(zip(self._ints[index:end].tolist(), self._pipeline_index[index:end].tolist()))
            self._block_start, offset = index, 0
        self._next = index + 1
        return self._record(index, *self._block[offset])

    def remaining(self) -> Iterator[RequestRecord]:
        """Fresh records of the requests not yet handed out (a partial run reports them unstarted)."""
        return (self.record(i) for i in range(self._next, len(self._pipeline_index)))

    def arrival_times(self, model: str) -> np.ndarray:
        """Every arrival time of ``model``'s requests, sorted."""
        models = np.array([p.model == model for p in self._pipelines], dtype=bool)
        arrivals = self._ints[:, RequestSpecs.INTS.index("arrival_ns")]
        times = arrivals[models[self._pipeline_index]] if len(self._pipelines) else \
            np.zeros(0, np.int64)
        return np.sort(times, kind="stable")


def scenario_requests(config: ScenarioConfig, rng: np.random.Generator,
                      base_dir: Path) -> tuple[RequestSpecs, list[Pipeline]]:
    """A scenario's requests and their pipelines, as a run draws them from ``rng`` (the generator
    seeded with ``config.seed``): the workload, then a template per request by weight. With
    ``workload.sessions``, every turn known before the run (at arrival 0: the admission checks'
    list; :mod:`cosim.hub.sim.conversations` releases them).

    Raises:
        ScenarioError: see :func:`cosim.hub.sim.workload.generate_requests`.
    """
    default_model = next(c.model for c in config.clients if c.kind == "llm")
    workload = config.workload
    if workload.inference_perf is not None:  # staged turns (hub/sim/workload/inference_perf.py)
        turns = InferencePerfSessions(workload.inference_perf, config.seed).check_specs()
        return turns, [session_pipeline(str(default_model))] * len(turns)
    if workload.sessions is not None:  # every turn known ahead (hub/sim/conversations.py runs them)
        turns = SessionSource(workload, config.seed, base_dir).check_specs()
        return turns, [session_pipeline(str(default_model))] * len(turns)
    specs = generate_requests(config.workload, rng, base_dir=base_dir)
    weights = config.workload.templates or {"chat": 1.0}
    return assign_pipelines(specs, weights, resolve_templates(config.templates), rng, default_model=str(default_model))
