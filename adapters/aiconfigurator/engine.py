"""One compiled aiconfigurator engine: the library's model, perf database and ``EngineHandle``.

:func:`compile_engine` builds them the way the library's own ``compile_engine``
does (``build_model_config`` -> ``get_model`` -> ``get_database`` ->
``build_engine_spec_json`` -> ``EngineHandle``), but keeps the model, so that
its operator lists can be split by kind (:class:`OpIndex`): the step timer
evaluates the non-attention operators, the prefill chunks' attention and the
decodes' attention separately, at the shapes of the batch, through the
engine's own op-list evaluation (``evaluate_context_ops`` /
``evaluate_generation_ops``), each answer kept by what it depends on
(:mod:`.calls`). Every latency comes from the library's Rust core and its
measured tables; nothing here computes one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

from cosim.adapters.sdk import InvalidArgument
from cosim.v1 import types_pb2 as pb

from .calls import OpCalls
from .libyaml import libyaml_reads
from .mapping import SCRATCH, write_once
from .mixed import MixedAttention
from .untabled import UntabledKernels

log = logging.getLogger(__name__)

# Operator classes (aiconfigurator_core.sdk.operations) that move data between devices.
COMMUNICATION_OPS = frozenset({"CustomAllReduce", "NCCL", "P2P", "MoEDispatch", "MoEAllToAll"})
ATTENTION_OPS = {"context": "ContextAttention", "generation": "GenerationAttention"}
LOGITS_OP = "logits_gemm"  # the LM head runs once per sequence, not per token


@contextlib.contextmanager
def _quiet_table_loading() -> Iterator[None]:
    """Silences the library's warnings while it loads a database and compiles an engine: it loads every
    operator family of the system (MLA, sparse attention, ...) and warns about their fallback rows
    whatever the model, and warns that it pins no default attention kernel for some GPU generations
    (RTX PRO 6000's sm_120 on vLLM 0.24), then takes its own default table."""
    loggers = [logging.getLogger(f"aiconfigurator_core.sdk.{name}") for name in ("perf_database", "attention_lanes")]
    levels = [logger.level for logger in loggers]
    for logger, level in zip(loggers, levels):
        logger.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@dataclasses.dataclass(frozen=True)
class OpIndex:
    """Positions of one phase's operators in the compiled op list, by role.

    ``attention`` holds every attention operator of the phase, each over its share of the layers:
    one for most models, two for gpt-oss (its banded layers with a 128-token window, and its global
    ones), all evaluated at a chunk's or the decodes' shape.
    """

    attention: tuple[int, ...]
    logits: tuple[int, ...]
    token_wise: tuple[int, ...]  # every other operator: runs once per token of the step
    communication: frozenset[str]  # names of the collective / point-to-point operators
    num_token_major: int = 0  # how many leading operators of all_ops read the token count alone

    @functools.cached_property
    def all_ops(self) -> tuple[int, ...]:
        """The token-wise operators, the LM head and attention, in that order (a decode step's)."""
        return (*self.token_wise, *self.logits, *self.attention)

    @classmethod
    def of(cls, ops: list[Any], phase: str) -> OpIndex:
        kinds = [type(op).__name__ for op in ops]
        names = [op._name for op in ops]
        attention = tuple(i for i, k in enumerate(kinds) if k == ATTENTION_OPS[phase])
        logits = tuple(i for i, n in enumerate(names) if n.endswith(LOGITS_OP))
        if not attention:
            raise InvalidArgument("spec.model", phase, f"aiconfigurator's {phase} operators hold no "
                                  f"{ATTENTION_OPS[phase]} operator ({names}); the backend needs one at least")
        rest = tuple(i for i in range(len(ops)) if i not in attention and i not in logits)
        return cls(attention=attention, logits=logits, token_wise=rest,
                   communication=frozenset(n for n, k in zip(names, kinds) if k in COMMUNICATION_OPS),
                   num_token_major=_num_token_major(ops, (*rest, *logits, *attention)))


def _num_token_major(ops: list[Any], order: tuple[int, ...]) -> int:
    """How many leading operators of ``order`` the library times from the step's token count alone: its
    token-major classes (``_ENGINE_QUERY_SHAPE == "tokens"``: GEMM, element-wise, embedding, MoE, the
    collectives), whose engine query reads nothing else (``Op::query`` in its ``src/operators/op.rs``
    passes them ``ctx.num_tokens`` only). None where one of their names recurs further on: the
    library folds a name's entries into one, so they could not be evaluated apart."""
    count = 0
    while count < len(order) and getattr(type(ops[order[count]]), "_ENGINE_QUERY_SHAPE", None) == "tokens":
        count += 1
    leading = {ops[i]._name for i in order[:count]}
    return 0 if any(ops[i]._name in leading for i in order[count:]) else count


@dataclasses.dataclass
class Engine:
    """A compiled engine, the op indices of its two phases and its evaluations of them (``calls``)."""

    handle: Any
    context: OpIndex
    generation: OpIndex
    calls: OpCalls
    label: str  # e.g. "Qwen/Qwen3-32B on h100_sxm, vllm 0.24.0, tp2" (for errors)
    untabled: UntabledKernels | None = None  # the layers' kernels the library has no operator for
    mixed: MixedAttention | None = None  # FA2's varlen call: what decodes cost beside a chunk

    @functools.cached_property
    def communication(self) -> frozenset[str]:
        """Names of both phases' collective / point-to-point operators."""
        return self.context.communication | self.generation.communication


@dataclasses.dataclass(frozen=True)
class SharedExperts:
    """A model's shared experts (``ModelSpec.shared_experts``): every token runs them unrouted, a gated MLP
    of the experts' size beside the routed ones (Llama 4's ``shared_expert``, DeepSeek's)."""

    count: int
    hidden_size: int
    intermediate_size: int
    num_layers: int

    @classmethod
    def of(cls, model: pb.ModelSpec) -> SharedExperts | None:
        """The ModelSpec's shared experts, or None when it has none."""
        if model.num_experts <= 1 or model.shared_experts <= 0:
            return None
        return cls(model.shared_experts, model.hidden_size, model.intermediate_size, model.num_layers)


def _add_shared_experts(model: Any, shared: SharedExperts) -> None:
    """Adds the shared experts to the library's MoE model, which has no span for them (its ``MOEModel``
    leaves shared experts out, a redesign its docstring defers, and times Mixtral and Llama 4 as routed
    experts alone). The span is the
    library's own, as its MoE block builder emits it for a model with shared experts
    (``models/blocks/moe.py``, from its DeepSeek model): gate and up projections in one GEMM, the
    activation, the down projection, each split over the TP ranks and timed from the GEMM tables at
    the weights' quantization, placed after the router in both phases."""
    from aiconfigurator_core.sdk import operations as ops

    tp, quant = model.config.tp_size, model.config.gemm_quant_mode
    inter, layers, hidden = shared.count * shared.intermediate_size, shared.num_layers, shared.hidden_size
    for phase_ops in (model.context_ops, model.generation_ops):
        router = next(i for i, op in enumerate(phase_ops) if op._name.endswith("_router_gemm"))
        phase = phase_ops[router]._name.removesuffix("_router_gemm")
        phase_ops[router + 1:router + 1] = [
            ops.GEMM(f"{phase}_shared_gate_up_gemm", layers, 2 * inter // tp, hidden, quant),
            ops.ElementWise(f"{phase}_shared_act_gate", layers, 2 * inter // tp, inter // tp, 0.8),
            ops.GEMM(f"{phase}_shared_ffn2_gemm", layers, hidden, inter // tp, quant),
        ]


# How aiconfigurator-core's model builder says no to a shape, parallelism or quantization it has no
# model for: its checks are asserts and lookups (KeyError for an unknown quantization, ValueError
# for a bad split, NotImplementedError for an architecture); each becomes a named InvalidArgument.
LIBRARY_REFUSALS = (AssertionError, ValueError, KeyError, NotImplementedError)


def compile_engine(*, model_path: str, system: str, engine: str, version: str, database_mode: str,
                   quant: dict[str, str], sizes: dict[str, int], label: str,
                   shared: SharedExperts | None = None, untabled: UntabledKernels | None = None,
                   mixed: MixedAttention | None = None) -> Engine:
    """Builds the library's model and perf database and compiles them into an engine.

    ``shared``: the model's shared experts, added where the library's model family has none
    (:func:`_add_shared_experts`); ``untabled``: the layers' kernels no table holds (:mod:`.untabled`),
    added to every step; ``mixed``: the decodes' share of a varlen call with a chunk (:mod:`.mixed`).

    Raises:
        InvalidArgument: the library rejects the model, parallelism or quantization, or has no
            database for the system, engine and version.
    """
    from aiconfigurator_core.sdk import perf_database
    from aiconfigurator_core.sdk.config_builders import apply_nextn, build_model_config
    from aiconfigurator_core.sdk.engine import EngineHandle
    from aiconfigurator_core.sdk.models import get_model

    try:
        config = build_model_config(
            tp_size=sizes["tp_size"], pp_size=sizes["pp_size"], attention_dp_size=sizes["attention_dp_size"],
            moe_tp_size=sizes["moe_tp_size"], moe_ep_size=sizes["moe_ep_size"],
            gemm_quant_mode=quant["gemm_quant_mode"], moe_quant_mode=quant["moe_quant_mode"],
            kvcache_quant_mode=quant["kvcache_quant_mode"], fmha_quant_mode=quant["fmha_quant_mode"])
        apply_nextn(config, 0)
        model = get_model(model_path, config, engine)
    except LIBRARY_REFUSALS as err:
        raise InvalidArgument("spec", label, f"is refused by aiconfigurator's model builder: {err}") from err
    if shared is not None and model.model_family == "MOE":
        _add_shared_experts(model, shared)
    with _quiet_table_loading(), libyaml_reads():
        database = perf_database.get_database(system, engine, version, database_mode=database_mode)
        if database is None:
            raise InvalidArgument("spec.options.engine_version", version,
                                  f"aiconfigurator could not load its {engine} {version} tables for {system}")
        handle = EngineHandle(_compiled_spec(model, model_path=model_path, system=system, engine=engine,
                                             database=database, database_mode=database_mode),
                              systems_path=database.systems_root)
    log.info("aiconfigurator engine compiled: %s", label)
    context, generation = OpIndex.of(model.context_ops, "context"), OpIndex.of(model.generation_ops, "generation")
    calls = OpCalls(handle._engine, context_token_wise=context.token_wise, context_logits=context.logits,
                    context_attention=context.attention, generation_all=generation.all_ops,
                    generation_attention=generation.attention, num_token_major=generation.num_token_major)
    return Engine(handle=handle, context=context, generation=generation, calls=calls, label=label,
                  untabled=untabled, mixed=mixed)


# Bumped when what a compiled spec's file name stands for changes.
SPEC_CACHE_FORMAT = 1


def _compiled_spec(model: Any, *, model_path: str, system: str, engine: str, database: Any,
                   database_mode: str) -> bytes:
    """The library's engine spec for ``model`` on ``database``, bincode-encoded, as its ``compile_engine``
    builds it; read back from :data:`~.mapping.SCRATCH` where a session (in any process) built it before.

    Building it is most of a session's open (0.4 s of about 1.2 s of CPU, mostly the library ranking its
    attention tables' kernel lanes, on a second copy of them); the file is named by everything the
    spec is made of (:func:`_spec_key`), and none is written or read where that cannot be told.
    """
    import aiconfigurator_core
    from aiconfigurator_core.sdk.engine import build_engine_spec_json

    key = _spec_key(model, model_path=model_path, system=system, engine=engine, database=database,
                    database_mode=database_mode)
    path = os.path.join(SCRATCH, "specs", f"{key}.bin") if key is not None else None
    if path is not None and os.path.exists(path):
        with open(path, "rb") as file:
            return file.read()
    spec_json = build_engine_spec_json(model, model_path=model_path, system=system, backend=engine,
                                       backend_version=database.version, kv_block_size=None,
                                       systems_path=database.systems_root, nextn=0, database=database)
    spec = bytes(aiconfigurator_core.engine_spec_bincode_from_json(spec_json))
    if path is not None:
        with contextlib.suppress(OSError):  # a read-only temp folder: compiled each time, as before
            write_once(path, spec)
    return spec


def _spec_key(model: Any, *, model_path: str, system: str, engine: str, database: Any,
              database_mode: str) -> str | None:
    """A name for the spec :func:`_compiled_spec` builds, from all it is made of: the library's own files
    (:func:`_library_fingerprint`: its code and its tables), its settings from the environment, the
    model's operators and configuration, and the database chosen; None where the tables are not all
    the library's own (another systems path), or the library is not installed from a wheel."""
    from aiconfigurator_core.sdk import perf_database
    from aiconfigurator_core.sdk.engine import build_ops_json

    library = _library_fingerprint()
    if library is None or any(not _inside(path, library[1]) for path in perf_database.get_systems_paths()):
        return None
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith(("AIC_", "AICONFIGURATOR_")))
    parts = [SPEC_CACHE_FORMAT, library[0], settings, model_path, system, engine, database.version, database_mode,
             database.systems_root, repr(model.config), getattr(model, "_nextn", None),
             build_ops_json(model.context_ops), build_ops_json(model.generation_ops)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _inside(path: str, folder: str) -> bool:
    return os.path.realpath(path).startswith(folder + os.sep)


@functools.cache
def _library_fingerprint() -> tuple[str, str] | None:
    """The sha256 of aiconfigurator-core's installed RECORD (each of its files' own sha256, the tables'
    too) and the library's folder; None where the RECORD does not list the library's files (an
    editable install, whose files change without a new version)."""
    from importlib import metadata

    import aiconfigurator_core

    try:
        record = metadata.distribution("aiconfigurator-core").read_text("RECORD") or ""
    except metadata.PackageNotFoundError:
        return None
    if "aiconfigurator_core/systems/" not in record:
        return None
    return hashlib.sha256(record.encode()).hexdigest(), os.path.realpath(os.path.dirname(aiconfigurator_core.__file__))
