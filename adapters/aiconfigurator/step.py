"""Times one StepBatch from aiconfigurator's per-operator tables.

The composition is the library's own for a mixed step (its
``mixed_step_latency``: the non-attention operators over all the step's
tokens, then context attention, then decode attention, summed), with the
attention taken per sequence instead of for one average request:

* token-wise operators (embedding, norms, QKV/O/MLP GEMMs, MoE, the TP
  all-reduces and MoE dispatch) at ``x`` = the step's tokens, or the most
  tokens of any data-parallel rank when the batch is in lock-step
  (``dp_rank_tokens``: vLLM pads every rank's forward to it);
* the LM head once per sequence;
* context attention for each prefill chunk (and each speculative verify):
  ``new`` query tokens over ``context`` cached ones (identical chunks share one
  query with ``batch_size`` = their count);
* decode attention for the ``new = 1`` sequences together, at their mean KV
  length (the kernel reads every sequence's KV; a memory-bound cost linear in
  the total, as the library's own decode step and its forward-pass model assume).
  Where the device runs FlashAttention-2's varlen kernel (A100, Ada, Blackwell
  RTX), vLLM's one call over chunks and decodes costs the decodes more than
  their decode-only kernel: that time is scaled by the varlen model's alpha
  at the step's shapes (:mod:`.mixed`).

A decode-only step without padding is the library's decode step: its
generation operators at ``batch_size`` = the decodes. The step's duration is
the sum of the operators (the library serializes them too); the collectives
are ``communication_ns``, the rest ``compute_ns``, and ``memory_ns`` stays 0
since the tables hold measured times, not a compute/memory split (the hub
splits the busy time by arithmetic intensity, docs/energy.md).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Iterable, Sequence

from cosim.adapters.sdk import InvalidArgument
from cosim.v1 import types_pb2 as pb

from .calls import PerOp
from .engine import Engine

_PREFIXES = ("context_", "generation_")
PERF_MISS = "perf database error: "  # the prefix of the library's table-miss errors


@functools.cache
def _op_name(name: str) -> str:
    """A phase-free operator name, so prefill and decode steps share breakdown keys (a model's few
    operator names, each worked out once)."""
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _evaluate(engine: Engine, new_tokens: Sequence[int], context_tokens: Sequence[int],
              padded_tokens: int) -> list[PerOp]:
    calls = engine.calls
    num_sequences = len(new_tokens)
    # The hub's decode-only batches hold hundreds of sequences: tell them apart without a Python loop.
    if new_tokens.count(1) == num_sequences:
        decodes: Sequence[int] = context_tokens
        tokens = max(num_sequences, padded_tokens)
    else:
        decodes = [c for n, c in zip(new_tokens, context_tokens) if n == 1]
        tokens = max(sum(new_tokens), padded_tokens)
    kv = round(sum(decodes) / len(decodes)) + 1 if decodes else 0  # the new token attends to itself too
    untabled = engine.untabled.entries(tokens) if engine.untabled is not None else []
    if tokens == len(decodes):  # every sequence decodes: no chunk
        return [*calls.decode_step(len(decodes), kv), *untabled]
    chunks: dict[tuple[int, int], int] = {}  # count by (new, context): a Counter's, without its set-up
    for chunk in [(n, c) for n, c in zip(new_tokens, context_tokens) if n > 1]:
        chunks[chunk] = chunks.get(chunk, 0) + 1
    entries = [*calls.token_wise(tokens), *calls.logits(num_sequences)]
    for (new, context), count in sorted(chunks.items()):
        entries += calls.context_attention(count, new, context)
    if decodes:
        decoding = calls.generation_attention(len(decodes), kv)
        if engine.mixed is not None and chunks:  # one FA2 varlen call: the decodes pay for sitting beside chunks
            each = [chunk for chunk, count in chunks.items() for _ in range(count)]  # as Counter.elements()
            alpha = engine.mixed.decode_scale(each, decodes)
            decoding = [(name, ms * alpha, energy * alpha, source) for name, ms, energy, source in decoding]
        entries += decoding
    return entries + untabled


def _timing(entries: Iterable[PerOp], communication: frozenset[str], breakdown: bool) -> pb.StepTiming:
    total = comm = 0.0
    if not breakdown:  # the hub's calls: the sums alone, added in the same order
        for name, latency_ms, _energy, _source in entries:
            ns = latency_ms * 1e6
            total += ns
            if name in communication:
                comm += ns
        return pb.StepTiming(duration_ns=round(total), compute_ns=round(total - comm), communication_ns=round(comm))
    parts: dict[str, float] = collections.defaultdict(float)
    for name, latency_ms, _energy, _source in entries:
        ns = latency_ms * 1e6
        parts[_op_name(name)] += ns
        total += ns
        if name in communication:
            comm += ns
    return pb.StepTiming(duration_ns=round(total), compute_ns=round(total - comm), communication_ns=round(comm),
                         breakdown=parts)


def time_step(engine: Engine, new_tokens: Sequence[int], context_tokens: Sequence[int],
              padded_tokens: int = 0, *, breakdown: bool = True) -> pb.StepTiming:
    """Times one step (see the module docstring).

    Args:
        engine: the session's compiled engine (for the batch's number of DP ranks).
        new_tokens, context_tokens: per sequence, as in ``StepBatch``.
        padded_tokens: the most tokens of any DP rank in lock-step (0: none).
        breakdown: with the per-operator breakdown (the hub asks for none: ``omit_breakdown``).

    Raises:
        InvalidArgument: the library has no measured data for an operator at the batch's shape.
    """
    try:
        entries = _evaluate(engine, new_tokens, context_tokens, padded_tokens)
    except (ValueError, RuntimeError) as err:  # the library's PerfDataNotAvailableError is a RuntimeError
        if not str(err).startswith(PERF_MISS):
            raise
        shape = f"new_tokens={list(new_tokens)[:8]}, context_tokens={list(context_tokens)[:8]}"
        raise InvalidArgument("batch", shape, f"has no aiconfigurator data ({engine.label}): "
                              f"{str(err)[len(PERF_MISS):]}") from err
    return _timing(entries, engine.communication, breakdown)
