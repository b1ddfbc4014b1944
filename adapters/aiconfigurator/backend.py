"""``AiconfiguratorBackend``: step times from aiconfigurator's silicon-measured operator tables.

A session maps its spec onto the library (:mod:`.mapping`), compiles one
engine per number of data-parallel ranks it sees (:mod:`.engine`; the first,
without DP, when it opens, so that a spec without data fails there), and
times each batch from the engine's tables (:mod:`.step`), caching the timing
per batch signature. A session whose mixed steps take no FA2 varlen scaling
declares ``pooled_decodes``: the hub then sends each batch's decodes at their
mean context, which times it the same.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.json_format import MessageToDict

from cosim.adapters.sdk import InvalidArgument, PlainBatch, RuntimeBackend, Session
from cosim.adapters.sdk.cache import LRUCache
from cosim.adapters.sdk.extras import require_extra
from cosim.v1 import types_pb2 as pb

from .engine import Engine, SharedExperts, compile_engine
from .libyaml import libyaml_reads
from .mapping import (
    AicOptions,
    ModelSource,
    engine_version,
    model_source,
    moe_quant_candidates,
    parallel_sizes,
    parse_options,
    quant_modes,
    system_name,
)
from .mixed import MixedAttention
from .step import time_step
from .untabled import UntabledKernels

log = logging.getLogger(__name__)

# Without the library, loading this backend answers with the pip command that installs it.
require_extra("aiconfigurator")

CACHE_SIZE = 8192  # step timings kept per session
MOE_MISS = "MoE data missing"  # the library's table-miss message for an expert shape and quant mode


@dataclass
class AicState:
    """A session's mapping, its engines (by number of DP ranks) and its timing cache."""

    spec: pb.SessionSpec
    options: AicOptions
    system: str
    version: str
    model: ModelSource
    quant: dict[str, str]
    engines: dict[int, Engine] = field(default_factory=dict)
    by_ranks: dict[int, Engine] = field(default_factory=dict)  # engines by num_dp_ranks, as steps ask
    cache: LRUCache[tuple[Any, ...], pb.StepTiming] = field(default_factory=lambda: LRUCache(CACHE_SIZE))

    def engine(self, num_dp_ranks: int) -> Engine:
        """The engine for batches in lock-step with ``num_dp_ranks`` ranks (1: none), compiled once."""
        found = self.by_ranks.get(num_dp_ranks)
        if found is None:
            found = self.by_ranks[num_dp_ranks] = self._engine(num_dp_ranks)
        return found

    def _engine(self, num_dp_ranks: int) -> Engine:
        """The engine for ``num_dp_ranks`` ranks' attention DP size, compiled where no number of ranks
        asked for it before.

        An MoE model's experts take the first of their candidate quant modes
        (:func:`~.mapping.moe_quant_candidates`) the tables hold for the shape.
        """
        sizes = parallel_sizes(self.spec, num_dp_ranks)
        key = sizes["attention_dp_size"]
        found = self.engines.get(key)
        if found is not None:
            return found
        parts = [f"tp{sizes['tp_size']}", f"pp{sizes['pp_size']}"]
        if self.spec.model.num_experts > 1:
            parts += [f"moe_tp{sizes['moe_tp_size']}", f"ep{sizes['moe_ep_size']}", f"dp{key}"]
        candidates = moe_quant_candidates(self.spec.model, self.options, self.quant)
        shared = SharedExperts.of(self.spec.model)
        for index, moe_mode in enumerate(candidates):
            quant = {**self.quant, "moe_quant_mode": moe_mode}
            experts = f", experts {moe_mode}" if self.spec.model.num_experts > 1 else ""
            if shared is not None:
                experts += f" + {shared.count} shared"
            label = (f"{self.spec.model.name} ({self.model.origin} config) on {self.system}, {self.options.engine} "
                     f"{self.version}, {self.options.database_mode}, {' '.join(parts)}{experts}")
            try:
                found = compile_engine(
                    model_path=self.model.path, system=self.system, engine=self.options.engine,
                    version=self.version, database_mode=self.options.database_mode, quant=quant, sizes=sizes,
                    label=label, shared=shared, untabled=UntabledKernels.of(self.spec),
                    mixed=MixedAttention.of(self.spec))
                _probe(found)
            except InvalidArgument as err:
                if index + 1 == len(candidates) or MOE_MISS not in err.reason:
                    raise
                log.info("no %s expert tables for %s; trying %s", moe_mode, label, candidates[index + 1])
                continue
            self.engines[key] = found
            return found
        raise AssertionError("unreachable: the last candidate returns or raises")


def _probe(engine: Engine) -> None:
    """Times a small decode and a small prefill, so that a table the model lacks at its quantization
    (gpt-oss's experts in bf16: the library measured them in MXFP4 only) fails when the session
    opens, naming the spec, rather than at the run's first step."""
    try:
        time_step(engine, [1], [16])
        time_step(engine, [16], [0])
    except InvalidArgument as err:
        raise InvalidArgument("spec", engine.label, f"{err.reason.replace(f' ({engine.label})', '')} (a one-token "
                              "decode or a 16-token prefill)") from err


def supported_versions(system: str, engine: str) -> list[str]:
    """``get_supported_databases()[system][engine]``, or [] where the library lists none, read for one
    system and engine.

    The library's whole list parses every system's YAML files and, for each of its engines, derives
    the version slots from all of them again (0.15 s of a session's open); this is its own loop,
    narrowed to the one pair a session asks for, over the same helpers
    (``tests/contract/test_aiconfigurator_contract.py`` checks it on every system and engine).
    """
    from aiconfigurator_core.sdk import common, perf_database

    if engine not in {backend.value for backend in common.BackendName}:
        return []
    declared: set[str] = set()
    for root in perf_database.get_systems_paths():
        path = os.path.join(root, f"{system}.yaml")
        if not os.path.isfile(path):
            continue
        try:
            with open(path) as file:
                data_dir = os.path.join(root, perf_database.yaml.safe_load(file).get("data_dir", ""))
            if os.path.isdir(data_dir):
                declared |= perf_database._declared_versions(data_dir, engine)
        except Exception:  # noqa: BLE001 - the library's loop skips such a file too (it warns)
            continue
    if not declared:
        return []
    slots = perf_database.get_version_slots(system, engine)
    if slots is not None:
        return sorted(set(slots.values()), key=perf_database._version_sort_tuple)
    return sorted(declared)


class AiconfiguratorBackend(RuntimeBackend):
    """NVIDIA aiconfigurator (PyPI ``aiconfigurator-core``) behind the runtime contract."""

    name = "aiconfigurator"
    version = "0.1.0"
    fidelity = pb.FIDELITY_EMPIRICAL
    description = ("aiconfigurator-core: per-operator latency tables measured on silicon (GEMM, attention, MoE, "
                   "NCCL/custom all-reduce) per system, serving engine and version")
    capabilities = ("mixed_batches", "moe", "tensor_parallel", "pipeline_parallel", "expert_parallel")
    plain_batches = True  # predict reads the token fields alone: in-process calls build no StepBatch

    def __init__(self) -> None:
        self._supported: dict[str, dict[str, list[str]]] | None = None

    def supported(self) -> dict[str, dict[str, list[str]]]:
        """The library's systems, engines and versions with data (read once: it scans the tables)."""
        if self._supported is None:
            from aiconfigurator_core.sdk.perf_database import get_supported_databases

            with libyaml_reads():
                self._supported = {s: dict(e) for s, e in get_supported_databases().items()}
        return self._supported

    def open_session(self, spec: pb.SessionSpec) -> AicState:
        from aiconfigurator_core.sdk.common import DefaultHFModels
        from aiconfigurator_core.sdk.perf_database import get_version_slots

        options = parse_options(MessageToDict(spec.options) if spec.HasField("options") else {})
        with libyaml_reads():
            system, versions = system_name(spec, options, lambda name: supported_versions(name, options.engine),
                                           self.supported)
            slots = get_version_slots(system, options.engine)
        version = engine_version(system, options, slots, versions)
        state = AicState(spec=spec, options=options, system=system, version=version,
                         model=model_source(spec.model, options, set(DefaultHFModels)), quant=quant_modes(spec.model))
        par = spec.parallelism
        if spec.model.num_experts <= 1 or (par.expert or 1) <= (par.tensor or 1):
            state.engine(1)  # fail at open, not at the first step, when the spec has no data
        return state

    def session_capabilities(self, session: Session[pb.SessionSpec]) -> tuple[str, ...]:
        # pooled_decodes: a step reads its decodes only through their number and their mean context
        # rounded (step.py's kv), unless the device's FA2 varlen call reads each one in mixed steps.
        return ("pooled_decodes",) if MixedAttention.of(session.spec) is None else ()

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch | PlainBatch) -> pb.StepTiming:
        state: AicState = session.state
        ranks = len(batch.dp_rank_tokens) or 1
        padded = max(batch.dp_rank_tokens, default=0)
        slim = session.omit_breakdown  # a timing cached without its breakdown serves only such calls
        key = (tuple(batch.new_tokens), tuple(batch.context_tokens), ranks, padded, slim)
        timing = state.cache.lookup(key)
        if timing is None:
            timing = time_step(state.engine(ranks), key[0], key[1], padded, breakdown=not slim)
            state.cache.store(key, timing)
        return timing
