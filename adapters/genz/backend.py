"""``GenzBackend``: step times from GenZ's chunked-batch operator model.

Every step, prefill, decode or mixed, is one GenZ *chunked* model
(``create_full_chunked_model``): sequences with ``new_tokens > 1`` are
prefill chunks ``(context, new)``, the rest are decodes at ``context``
past tokens. GenZ builds the layer table (embedding, attention per
sequence, FFN, TP/EP collectives, PP message passes), writes it as a CSV
into a temporary folder (removed right after) and times every operator on its
roofline (``get_model_df``); the summary's latency is the step's duration.
This is exactly what ``GenZ.chunked_moddeling`` does, minus its memory-fit
check (the hub manages KV memory). A pure prefill ``(0, n)`` gives GenZ's
``prefill_moddeling`` latency, a pure decode batch its ``decode_moddeling``
latency (the tests check both).
"""

from __future__ import annotations

import logging
import math
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.json_format import MessageToDict

from cosim.adapters.sdk import RuntimeBackend, Session
from cosim.adapters.sdk.cache import LRUCache
from cosim.adapters.sdk.extras import require_extra
from cosim.v1 import types_pb2 as pb

from .mapping import GenzOptions, bits_of, model_config, parse_options, system

log = logging.getLogger(__name__)

# GenZ itself is imported when a session opens (it takes seconds); without it, loading this backend
# answers with the pip command that installs it.
require_extra("genz")

CACHE_SIZE = 8192  # step timings kept per session


@dataclass
class GenzState:
    """A session's GenZ model and system and its timing cache."""

    model: Any
    system: Any
    options: GenzOptions
    parallelism: dict[str, int]
    cache: LRUCache[tuple[tuple[int, ...], tuple[int, ...]], pb.StepTiming] = field(
        default_factory=lambda: LRUCache(CACHE_SIZE))
    num_evaluations: int = 0


def genz_step_ms(state: GenzState, new_tokens: list[int], context_tokens: list[int]) -> tuple[float, Any]:
    """GenZ's latency (ms) and summary row of one step (see the module docstring)."""
    from GenZ.analyse_model import get_model_df, get_summary_table
    from GenZ.Models import create_full_chunked_model
    from GenZ.unit import Unit

    prefill = [(c, n) for n, c in zip(new_tokens, context_tokens) if n > 1]
    decode = [c for n, c in zip(new_tokens, context_tokens) if n == 1]
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="cosim-genz-") as folder:
        warnings.simplefilter("ignore")
        name = create_full_chunked_model(name=state.model, prefill_kv_sizes=prefill, decode_kv_sizes=decode,
                                         data_path=folder, **state.parallelism)
        frame = get_model_df(name, state.system, Unit(), 1, data_path=folder, intermediate_on_chip=True)
        summary = get_summary_table(frame, Unit())
    return float(summary["Latency (msec)"].values[0]), summary


class GenzBackend(RuntimeBackend):
    """GenZ (PyPI ``genz-llm``) behind the runtime contract."""

    name = "genz"
    version = "0.1.0"
    fidelity = pb.FIDELITY_EXTERNAL_ANALYTICAL
    description = "GenZ LLM analytical model (genz-llm): per-operator roofline, chunked/mixed batches"
    # bucketed_cache_safe: an analytical model, smooth in each context (it buckets them itself on request).
    capabilities = ("mixed_batches", "moe", "tensor_parallel", "pipeline_parallel", "expert_parallel",
                    "bucketed_cache_safe")

    def open_session(self, spec: pb.SessionSpec) -> GenzState:
        options = parse_options(MessageToDict(spec.options) if spec.HasField("options") else {})
        bits = bits_of(spec, options)
        par = spec.parallelism
        state = GenzState(model=model_config(spec.model), system=system(spec, options, bits), options=options,
                          parallelism={"tensor_parallel": par.tensor or 1, "pipeline_parallel": par.pipeline or 1,
                                       "expert_parallel": par.expert or 1})
        log.info("genz session for %s on %s (%s): %s", spec.model.name, spec.hardware.device, bits, options)
        return state

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        state: GenzState = session.state
        bucket = state.options.bucket_tokens
        contexts = [math.ceil(c / bucket) * bucket for c in batch.context_tokens] if bucket else \
            list(batch.context_tokens)
        key = (tuple(batch.new_tokens), tuple(contexts))
        timing = state.cache.lookup(key)
        if timing is None:
            timing = self._evaluate(state, list(key[0]), contexts)
            state.cache.store(key, timing)
        return timing

    @staticmethod
    def _evaluate(state: GenzState, new_tokens: list[int], contexts: list[int]) -> pb.StepTiming:
        state.num_evaluations += 1
        latency_ms, summary = genz_step_ms(state, new_tokens, contexts)
        part = {key: float(summary[f"{key} (msec)"].values[0]) * 1e6
                for key in ("Attn Latency", "Linear Latency", "Comm Latency")}
        return pb.StepTiming(duration_ns=math.ceil(latency_ms * 1e6),
                             compute_ns=round(part["Attn Latency"] + part["Linear Latency"]),
                             communication_ns=round(part["Comm Latency"]),
                             breakdown={"attention_ns": part["Attn Latency"], "linear_ns": part["Linear Latency"],
                                        "communication_ns": part["Comm Latency"]})
