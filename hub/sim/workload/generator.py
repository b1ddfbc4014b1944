"""Turns a :class:`~cosim.hub.config.workload.WorkloadConfig` into requests.

:func:`generate_requests` returns the requests as columns (:class:`RequestSpecs`)
sorted by arrival with ids ``0..n-1``. The caller's generator is split into
independent child streams (arrivals, input lengths, output lengths,
prefixes, models, trace rows), so changing, say, the output distribution
leaves the arrival times of a seeded run unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from cosim.hub.config.bounds import MAX_TIME_NS, MAX_TIME_S, MAX_TOKENS
from cosim.hub.config.workload import (
    DEFAULT_LORA_RANK,
    MOONCAKE_BLOCK_TOKENS,
    LengthDist,
    TraceArrival,
    TraceLength,
    TraceSource,
    WorkloadConfig,
)
from cosim.hub.errors import ScenarioError
from cosim.hub.sim.workload.sampling import clip_lengths, sample_arrivals_ns, sample_lengths, sample_prefixes
from cosim.hub.sim.workload.token_ids import MAX_HASH_ID, SegmentIds, block_ids
from cosim.hub.sim.workload.traces import TraceTable, load_trace

logger = logging.getLogger(__name__)

_STREAMS = ("arrival", "input", "output", "prefix", "model", "rows")


NO_DEADLINE = 2**62  # a request without a deadline sorts after every one with one


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One generated request.

    ``input_tokens`` includes the ``prefix_tokens`` of its shared prefix.
    """

    id: int
    arrival_ns: int
    input_tokens: int
    output_tokens: int
    model: str | None = None
    prefix_id: str | None = None
    prefix_tokens: int = 0
    prompt_token_ids: np.ndarray | SegmentIds | None = None  # from the trace's token ids (or block hashes)
    source: str | None = None  # the trace row ("file:line") its lengths were read from, if any
    lora: str | None = None  # the LoRA adapter it names (None: the base model)
    lora_rank: int = 0  # that adapter's rank
    cls: str | None = None  # its request class (workload.classes), if any
    priority: int = 0  # its class's priority (lower first, as vLLM's)
    deadline_ns: int = NO_DEADLINE  # when its first token is due, under earliest-deadline-first


class RequestSpecs(Sequence[RequestSpec]):
    """Requests as columns, in id order: a run of a million requests holds a few arrays, not a
    million objects; ``specs[i]`` makes request ``i``'s :class:`RequestSpec` for the few readers that
    want one.

    Attributes:
        ints: the integer fields (:attr:`INTS`), an int64 array each.
        objects: the other fields (:attr:`OBJECTS`) that some request may set, a list each; a field
            missing here is None for every request.
    """

    INTS = ("id", "arrival_ns", "input_tokens", "output_tokens", "prefix_tokens", "lora_rank", "priority",
            "deadline_ns")
    OBJECTS = ("model", "prefix_id", "prompt_token_ids", "source", "lora", "cls")

    def __init__(self, ints: Mapping[str, np.ndarray], objects: Mapping[str, list[Any]]) -> None:
        self.ints = {name: np.asarray(ints[name], dtype=np.int64) for name in self.INTS}
        self.objects = dict(objects)

    @classmethod
    def of(cls, specs: Sequence[RequestSpec]) -> RequestSpecs:
        """The columns of ``specs``."""
        ints = {name: np.fromiter((getattr(spec, name) for spec in specs), np.int64, len(specs))
                for name in cls.INTS}
        objects = {name: [getattr(spec, name) for spec in specs] for name in cls.OBJECTS}
        return cls(ints, {name: column for name, column in objects.items() if any(v is not None for v in column)})

    def __len__(self) -> int:
        return len(self.ints["id"])

    @overload
    def __getitem__(self, index: int) -> RequestSpec: ...

    @overload
    def __getitem__(self, index: slice) -> list[RequestSpec]: ...

    def __getitem__(self, index: int | slice) -> RequestSpec | list[RequestSpec]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        fields: dict[str, Any] = {name: int(column[index]) for name, column in self.ints.items()}
        fields.update((name, column[index]) for name, column in self.objects.items())
        return RequestSpec(**fields)


def generate_requests(config: WorkloadConfig, rng: np.random.Generator, *, base_dir: Path) -> RequestSpecs:
    """Draw the requests of a workload.

    Deterministic for a given ``rng`` state; the result is sorted by arrival
    (ties keep generation order) and numbered 0..n-1.

    Args:
        config: the validated ``workload:`` section.
        rng: the scenario's generator; child streams are spawned from it.
        base_dir: folder that relative trace paths are read from (the scenario's).

    Raises:
        ScenarioError: a trace is missing, malformed, or too short for the requests asked.
    """
    streams = dict(zip(_STREAMS, rng.spawn(len(_STREAMS)), strict=True))
    tables = _TraceTables(base_dir)
    num = _num_requests(config, tables)
    rows = _select_rows(config, tables, num, streams["rows"])

    arrivals = _arrivals_ns(config, tables, rows, num, streams["arrival"])
    inputs = _lengths(config, "input_tokens", tables, rows, num, streams["input"])
    outputs = _lengths(config, "output_tokens", tables, rows, num, streams["output"])

    prefix_idx = np.full(num, -1)
    prefix_tokens = np.zeros(num, dtype=np.int64)
    if config.prefix is not None:
        prefix_idx = sample_prefixes(config.prefix, num, streams["prefix"])
        prefix_tokens = np.where(prefix_idx >= 0, config.prefix.tokens, 0)
        inputs = inputs + prefix_tokens
    models = _models(config, num, streams["model"])
    token_ids = _token_ids(config, tables, rows, inputs)
    sources = _row_sources(config, tables, rows, num)

    adapters = _adapters(config, tables, rows, num, rng)
    classes = _classes(config, num, rng)

    order = np.argsort(arrivals, kind="stable")
    picked = order.tolist()
    priorities, deadlines = _class_terms(config, classes, arrivals)
    ranks = np.array([rank for _, rank in adapters], dtype=np.int64) if adapters else np.zeros(num, dtype=np.int64)
    ints = {"arrival_ns": arrivals, "input_tokens": inputs, "output_tokens": outputs, "prefix_tokens": prefix_tokens,
            "lora_rank": ranks, "priority": priorities, "deadline_ns": deadlines}
    objects: dict[str, list[Any]] = {"model": models, "prompt_token_ids": token_ids, "source": sources,
                                     "lora": [name for name, _ in adapters], "cls": classes,
                                     "prefix_id": ([f"prefix-{k}" if k >= 0 else None for k in prefix_idx.tolist()]
                                                   if config.prefix is not None else [])}
    result = RequestSpecs({"id": np.arange(num), **{name: column[order] for name, column in ints.items()}},
                          {name: [column[i] for i in picked] for name, column in objects.items() if column})
    arrival_ns = result.ints["arrival_ns"]
    logger.info("generated %d requests over %.3f s", num, (arrival_ns[-1] - arrival_ns[0]) / 1e9)
    return result


class _TraceTables:
    """Trace files read once per call, shared by every part that names them."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self._tables: dict[tuple[str, str], TraceTable] = {}

    def get(self, source: TraceSource) -> TraceTable:
        key = (source.path, source.format)
        if key not in self._tables:
            self._tables[key] = load_trace(source, self.base_dir)
        return self._tables[key]


def _sources(config: WorkloadConfig) -> list[TraceSource]:
    """Distinct trace sources in use, in a fixed order (arrival, input, output)."""
    found: list[TraceSource] = []
    for field in ("arrival", "input_tokens", "output_tokens"):
        source = config.trace_source(field)
        if source is not None and source not in found:
            found.append(source)
    return found


def _num_requests(config: WorkloadConfig, tables: _TraceTables) -> int:
    if config.requests is not None:
        return config.requests
    # Validation guarantees a sequential source: take every row it has.
    counts = {tables.get(s).label: len(tables.get(s)) - s.start_row for s in _sources(config)
              if s.sample == "sequential"}
    label, num = min(counts.items(), key=lambda item: item[1])
    if num < 1:
        raise ScenarioError(label, "start_row skips every data row, so there are no requests")
    return num


def _select_rows(config: WorkloadConfig, tables: _TraceTables, num: int,
                 rng: np.random.Generator) -> dict[TraceSource, np.ndarray]:
    """Row indices each trace source contributes, one per request."""
    rows = {}
    for source in _sources(config):
        table = tables.get(source)
        available = len(table) - source.start_row
        if source.sample == "random":
            if available < 1:
                raise ScenarioError(table.label, f"start_row={source.start_row} skips all {len(table)} data rows")
            rows[source] = rng.integers(source.start_row, len(table), size=num)
        elif available < num:
            raise ScenarioError(table.label, f"has {max(available, 0)} data rows from start_row={source.start_row}, "
                                             f"fewer than the {num} requests asked; lower workload.requests "
                                             f"or set sample: random")
        else:
            rows[source] = np.arange(source.start_row, source.start_row + num)
    return rows


def _arrivals_ns(config: WorkloadConfig, tables: _TraceTables, rows: dict[TraceSource, np.ndarray],
                 num: int, rng: np.random.Generator) -> np.ndarray:
    process = config.arrival
    assert process is not None  # validated: independent requests have an arrival process
    if not isinstance(process, TraceArrival):
        return sample_arrivals_ns(process, num, rng, where="workload.arrival")
    source = config.trace_source("arrival")
    assert source is not None  # checked by WorkloadConfig
    column, unit = source.columns[0], source.columns[3]
    times = tables.get(source).times_ns(column, unit)[rows[source]]
    relative: np.ndarray = times - times.min()
    if process.speedup != 1.0:
        scaled = relative / process.speedup
        if scaled.max(initial=0) > MAX_TIME_NS:
            raise ScenarioError("workload.arrival.speedup", f"{process.speedup:g} stretches the trace's "
                                f"{relative.max() / 1e9:.4g} s to {scaled.max() / 1e9:.4g} s, past the "
                                f"{MAX_TIME_S:.0e} s cosim simulates")
        relative = np.rint(scaled).astype(np.int64)
    elif relative.max(initial=0) > MAX_TIME_NS:
        raise ScenarioError(_row_of(tables.get(source), rows[source], int(np.argmax(relative))),
                            f"arrives {relative.max() / 1e9:.4g} s after the first request, past the "
                            f"{MAX_TIME_S:.0e} s cosim simulates")
    return relative


def _lengths(config: WorkloadConfig, field: str, tables: _TraceTables, rows: dict[TraceSource, np.ndarray],
             num: int, rng: np.random.Generator) -> np.ndarray:
    dist: LengthDist = getattr(config, field)
    if isinstance(dist, TraceLength):
        source = config.trace_source(field)
        assert source is not None  # checked by WorkloadConfig
        column = dist.column or source.columns[1 if field == "input_tokens" else 2]
        table = tables.get(source)
        values = table.tokens(column)[rows[source]]
        if dist.max is None and values.max(initial=0) > MAX_TOKENS:
            raise ScenarioError(_row_of(table, rows[source], int(np.argmax(values))),
                                f"{column}={values.max()} is more than the {MAX_TOKENS:.0e} tokens cosim allows; "
                                f"set workload.{field}.max to clip lengths")
    else:
        values = sample_lengths(dist, num, rng)
    return clip_lengths(values, dist.min, dist.max, where=f"workload.{field}")


def _row_of(table: TraceTable, rows: np.ndarray, index: int) -> str:
    """``file:line`` of the trace row request ``index`` (in generation order) was read from."""
    return f"{table.label}:{table.line(int(rows[index]))}"


def _row_sources(config: WorkloadConfig, tables: _TraceTables, rows: dict[TraceSource, np.ndarray],
                 num: int) -> list[str]:
    """Per request (in generation order), the trace row its lengths came from (the input's source
    first); [] when neither length is read from a trace."""
    for field in ("input_tokens", "output_tokens"):
        source = config.trace_source(field)
        if source is not None:
            table = tables.get(source)
            return [f"{table.label}:{table.line(row)}" for row in rows[source].tolist()]
    return []


def _token_ids(config: WorkloadConfig, tables: _TraceTables, rows: dict[TraceSource, np.ndarray],
               inputs: np.ndarray) -> list[np.ndarray]:
    """Each request's prompt token ids, where the input lengths come from a trace that has them."""
    source = config.trace_source("input_tokens")
    if source is None or (source.token_ids_column is None and source.format != "mooncake"):
        return []
    table = tables.get(source)
    if source.token_ids_column is None:  # mooncake: ids from the prompt's block hashes
        return _block_token_ids(source, table, rows[source], inputs)
    every = table.token_ids(source.token_ids_column)
    picked = []
    for length, row in zip(inputs.tolist(), rows[source].tolist()):
        if len(every[row]) < length:
            raise ScenarioError(f"{table.label}:{table.line(row)}", f"{source.token_ids_column} has "
                                f"{len(every[row])} token ids, but the request's input is {length} tokens")
        picked.append(every[row][:length])  # a prompt clipped to the input's max keeps its first tokens
    return picked


def _block_token_ids(source: TraceSource, table: TraceTable, rows: np.ndarray, inputs: np.ndarray) -> list[Any]:
    """Each request's prompt ids from a Mooncake trace's ``hash_ids``: block k of the prompt is hash
    ``hash_ids[k]``'s 512 tokens (:func:`~cosim.hub.sim.workload.token_ids.block_ids`)."""
    hashes = table.token_ids("hash_ids")
    lengths = table.tokens(source.columns[1])
    picked: list[Any] = []
    for length, row in zip(inputs.tolist(), rows.tolist()):
        blocks, traced = hashes[row], int(lengths[row])
        where = f"{table.label}:{table.line(row)}"
        if len(blocks) * MOONCAKE_BLOCK_TOKENS < traced:
            raise ScenarioError(where, f"hash_ids has {len(blocks)} blocks of {MOONCAKE_BLOCK_TOKENS} tokens, "
                                       f"too few for its {source.columns[1]}={traced}")
        if (blocks >= MAX_HASH_ID).any():
            raise ScenarioError(where, f"hash_ids has {int(blocks.max())}, beyond the {MAX_HASH_ID} cosim maps")
        ids = block_ids(blocks.tolist()[:-(-traced // MOONCAKE_BLOCK_TOKENS)], traced, MOONCAKE_BLOCK_TOKENS)
        picked.append(ids.head(length) if length < traced else ids)
    return picked


def _models(config: WorkloadConfig, num: int, rng: np.random.Generator) -> list[str]:
    if not config.models:
        return []
    names = list(config.models)
    weights = np.array([config.models[name] for name in names], dtype=np.float64)
    picks = rng.choice(len(names), size=num, p=weights / weights.sum())
    return [names[k] for k in picks.tolist()]


def _classes(config: WorkloadConfig, num: int, rng: np.random.Generator) -> list[str]:
    """Each request's class (generation order), drawn by share from a stream of its own, spawned
    only when classes are configured (a workload without them draws what it did before)."""
    if not config.classes:
        return []
    names = list(config.classes)
    weights = np.array([config.classes[name].share for name in names], dtype=np.float64)
    picks = rng.spawn(1)[0].choice(len(names), size=num, p=weights / weights.sum())
    return [names[k] for k in picks.tolist()]


def _class_terms(config: WorkloadConfig, classes: list[str], arrivals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each request's priority and deadline (generation order) from its class: 0 and no deadline
    without classes."""
    if not classes:
        return np.zeros(len(arrivals), dtype=np.int64), np.full(len(arrivals), NO_DEADLINE, dtype=np.int64)
    assert config.classes is not None
    terms = {name: (cls.priority, -1 if cls.deadline_s is None else round(cls.deadline_s * 1e9))
             for name, cls in config.classes.items()}
    priorities, due_in = np.array([terms[name] for name in classes], dtype=np.int64).T
    return priorities, np.where(due_in < 0, NO_DEADLINE, arrivals + due_in)


def _adapters(config: WorkloadConfig, tables: _TraceTables, rows: dict[TraceSource, np.ndarray], num: int,
              rng: np.random.Generator) -> list[tuple[str | None, int]]:
    """Each request's LoRA adapter and rank (generation order): from the input source's
    ``lora_column``, else drawn by ``workload.lora``; [] when requests name none.

    The draws use a stream of their own, spawned only when LoRA is configured, so a workload
    without it draws exactly what it did before.
    """
    lora = config.lora
    source = config.trace_source("input_tokens")
    ranks = lora.ranks() if lora is not None else {}
    default_rank = lora.rank if lora is not None else DEFAULT_LORA_RANK
    if source is not None and source.lora_column is not None:
        names = tables.get(source).names(source.lora_column)
        return [(name, ranks.get(name, default_rank) if name else 0)
                for name in (names[row] for row in rows[source].tolist())]
    if lora is None:
        return []
    stream = rng.spawn(1)[0]
    has_adapter = stream.random(num) < lora.share
    listed = list(ranks)
    if lora.distribution == "zipf":
        weights = 1.0 / np.arange(1, len(listed) + 1) ** lora.zipf_s
        picks = stream.choice(len(listed), size=num, p=weights / weights.sum())
    else:
        picks = stream.integers(0, len(listed), size=num)
    return [(listed[k], ranks[listed[k]]) if has else (None, 0)
            for has, k in zip(has_adapter.tolist(), picks.tolist())]
