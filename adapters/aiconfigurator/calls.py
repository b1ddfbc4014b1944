"""The library's op-list evaluations for one compiled engine, each answer kept by what it depends on.

A step (:mod:`.step`) asks aiconfigurator-core's Rust engine for a few op lists at the batch's
shapes: the token-wise operators at the step's tokens, the LM head at its sequences, context
attention per chunk, generation attention at the decodes' count and mean KV length, or a decode
step's every generation operator. In a run most of these shapes recur (a run's steps hold a few
hundred token counts, a handful of chunk shapes, each decode shape's attention in a mixed and a
decode-only step) while the step as a whole does not. :class:`OpCalls` keeps each answer by every
argument of its call (the op list is fixed per method): the engine answers from its arguments and
its compiled tables alone.

A decode step is split in two calls whose answers are kept apart: its leading token-major
operators (:attr:`~.engine.OpIndex.num_token_major`), kept by the number of decodes alone, then the
rest (attention), kept by the decodes and their KV length. The split is exact as the library
defines the evaluation (its Rust core, ``aic-core/rust/aiconfigurator-core/src/`` in
github.com/ai-dynamo/aiconfigurator): it queries each operator of an index list on its own
(``query_generation_op``, ``session.rs``, at a context built from the call's arguments), a
generation query's token count is its batch size (``num_tokens = batch_size * beam_width``, beam
1), a token-major operator reads that count alone (``Op::query``, ``operators/op.rs``), and the
answers come back in list order, one per name (``PerOpFold``, ``engine/runtime.rs``; the two parts
share no name). ``tests/contract/test_aiconfigurator_calls.py`` holds the pinned version to it.

The calls go to the ``AicEngine`` behind the library's ``EngineHandle`` with the index lists built
once: the handle's methods only convert each argument again (``sdk/engine.py``), about a fifth of
a call.
"""

from __future__ import annotations

from typing import Any

PerOp = tuple[str, float, float, str]  # (name, latency ms, energy W*ms, source), as the library returns them
Entries = list[PerOp]  # one call's answer: kept and shared, so never changed in place

MAX_KEPT = 1 << 15  # answers kept per engine; past it the store starts again (a few MB at most)
NO_SCALE = 1.0  # the sequence-imbalance correction scale the library's wrapper passes by default

# Which op list a kept answer is for: the first field of its key.
_TOKEN_WISE, _LOGITS, _CONTEXT_ATTENTION, _GENERATION_ATTENTION, _DECODE_TOKEN_MAJOR = range(5)


class OpCalls:
    """The op-list evaluations a step makes, each computed once per argument set.

    Args:
        engine: the library's compiled ``AicEngine`` (``EngineHandle._engine``).
        context_token_wise, context_logits, context_attention: positions in the context op list.
        generation_all: a decode step's positions in the generation op list, its first
            ``num_token_major`` token-major, its last ``generation_attention``.
    """

    def __init__(self, engine: Any, *, context_token_wise: tuple[int, ...], context_logits: tuple[int, ...],
                 context_attention: tuple[int, ...], generation_all: tuple[int, ...],
                 generation_attention: tuple[int, ...], num_token_major: int) -> None:
        self._engine = engine
        self._token_wise = list(context_token_wise)
        self._logits = list(context_logits)
        self._context_attention = list(context_attention)
        self._generation_attention = list(generation_attention)
        self._decode_token_major = list(generation_all[:num_token_major])
        self._decode_rest = list(generation_all[num_token_major:])
        self._decode_rest_is_attention = self._decode_rest == self._generation_attention
        self._kept: dict[tuple[int, ...], Entries] = {}

    def token_wise(self, tokens: int) -> Entries:
        """The context phase's token-wise operators over one sequence of ``tokens`` tokens."""
        return self._context(_TOKEN_WISE, self._token_wise, 1, tokens, 0)

    def logits(self, num_sequences: int) -> Entries:
        """The LM head once for each of ``num_sequences`` sequences."""
        return self._context(_LOGITS, self._logits, num_sequences, 1, 0)

    def context_attention(self, count: int, new: int, context: int) -> Entries:
        """Context attention of ``count`` identical chunks of ``new`` tokens over ``context`` cached ones."""
        return self._context(_CONTEXT_ATTENTION, self._context_attention, count, new, context)

    def generation_attention(self, num_decodes: int, kv: int) -> Entries:
        """Generation attention of ``num_decodes`` sequences at ``kv`` keys each."""
        return self._generation(_GENERATION_ATTENTION, self._generation_attention, num_decodes, kv)

    def decode_step(self, num_decodes: int, kv: int) -> Entries:
        """Every generation operator at ``num_decodes`` sequences and ``kv`` keys: a decode-only step,
        in the library's order (the token-major operators' answers kept by ``num_decodes`` alone)."""
        leading = self._kept.get((_DECODE_TOKEN_MAJOR, num_decodes))
        if leading is None:
            # s=1: none of them reads the KV length, so the answer holds for every one
            leading = self._engine.evaluate_generation_ops(self._decode_token_major, num_decodes, 1, NO_SCALE, 0, None)
            self._keep((_DECODE_TOKEN_MAJOR, num_decodes), leading)
        if self._decode_rest_is_attention:  # most models': shared with the mixed steps' decodes
            rest = self.generation_attention(num_decodes, kv)
        else:  # other operators read the KV length too (MLA, ...): a run times each decode shape once
            rest = self._engine.evaluate_generation_ops(self._decode_rest, num_decodes, kv, NO_SCALE, 0, None)
        return [*leading, *rest]

    def _context(self, which: int, indices: list[int], batch_size: int, s: int, prefix: int) -> Entries:
        key = (which, batch_size, s, prefix)
        found = self._kept.get(key)
        if found is None:
            found = self._engine.evaluate_context_ops(indices, batch_size, s, prefix, NO_SCALE, None)
            self._keep(key, found)
        return found

    def _generation(self, which: int, indices: list[int], batch_size: int, s: int) -> Entries:
        key = (which, batch_size, s)
        found = self._kept.get(key)
        if found is None:
            found = self._engine.evaluate_generation_ops(indices, batch_size, s, NO_SCALE, 0, None)
            self._keep(key, found)
        return found

    def _keep(self, key: tuple[int, ...], entries: Entries) -> None:
        if len(self._kept) >= MAX_KEPT:
            self._kept.clear()
        self._kept[key] = entries
