"""The library's op-list answers kept per engine (adapters/aiconfigurator/calls.py): each is the library's own
call's, whatever was asked before it."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed: pip install "
                    "'cosim[aiconfigurator]' (the dev extra includes it)")

from cosim.adapters.aiconfigurator import calls as calls_module
from cosim.adapters.aiconfigurator.engine import Engine, _num_token_major
from cosim.adapters.aiconfigurator.mapping import MXFP4_BYTES
from cosim.adapters.aiconfigurator.step import _timing, time_step
from tests.contract.test_aiconfigurator_contract import BACKEND, make_spec

SPECS = {
    "llama-8b": make_spec(),
    "qwen3-30b-a3b-tp2-ep2": make_spec("Qwen/Qwen3-30B-A3B", tp=2, ep=2),
    "gpt-oss-20b": make_spec("openai/gpt-oss-20b"),
}
SPECS["gpt-oss-20b"].model.bytes_per_param = MXFP4_BYTES  # the library measured its experts in MXFP4 only
SHAPES = [(1, 17), (8, 17), (8, 4000), (1, 4000), (200, 1025), (8, 17)]  # (sequences, KV length); repeats


def fresh_engine(name: str) -> Engine:
    return BACKEND.open_session(SPECS[name]).engine(1)


@pytest.mark.parametrize("name", SPECS)
def test_a_decode_step_is_the_librarys_all_operator_call_at_every_kv_length(name: str) -> None:
    """Its token-major operators are kept by the number of decodes alone: the same answers at 17 and 4,000 keys."""
    engine = fresh_engine(name)
    assert 0 < engine.generation.num_token_major < len(engine.generation.all_ops)
    for decodes, kv in SHAPES:
        expected = engine.handle.evaluate_generation_ops(list(engine.generation.all_ops), batch_size=decodes, s=kv)
        assert engine.calls.decode_step(decodes, kv) == expected, (decodes, kv)


@pytest.mark.parametrize("name", SPECS)
def test_each_kept_answer_is_the_librarys_call_with_the_same_arguments(name: str) -> None:
    engine = fresh_engine(name)
    handle, ctx, gen, calls = engine.handle, engine.context, engine.generation, engine.calls
    for decodes, kv in SHAPES:
        calls.decode_step(decodes, kv)  # a decode step's attention, kept, is the mixed steps' too
        assert calls.generation_attention(decodes, kv) == handle.evaluate_generation_ops(
            list(gen.attention), batch_size=decodes, s=kv)
    for tokens in (16, 512, 16):
        assert calls.token_wise(tokens) == handle.evaluate_context_ops(list(ctx.token_wise), batch_size=1, s=tokens)
        assert calls.logits(tokens) == handle.evaluate_context_ops(list(ctx.logits), batch_size=tokens, s=1)
    for count, new, context in ((1, 512, 0), (2, 512, 256), (1, 512, 256), (1, 512, 0)):
        assert calls.context_attention(count, new, context) == handle.evaluate_context_ops(
            list(ctx.attention), batch_size=count, s=new, prefix=context)


def test_steps_time_the_same_in_any_order_and_past_the_store_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's time depends on its batch alone, not on what the store holds (here at most 3 answers)."""
    batches = [([1] * 8, [1000] * 8), ([512] + [1] * 8, [0] + [1000] * 8), ([768, 768], [256, 0]),
               ([1] * 8, [2000] * 8), ([64] + [1] * 3, [0, 5, 500, 90])]
    alone = [time_step(fresh_engine("llama-8b"), *batch) for batch in batches]
    monkeypatch.setattr(calls_module, "MAX_KEPT", 3)
    engine = fresh_engine("llama-8b")
    for _ in range(2):
        assert [time_step(engine, *batch) for batch in reversed(batches)] == alone[::-1]
    assert len(engine.calls._kept) <= 3


class FakeOp:
    def __init__(self, name: str, shape: str) -> None:
        self._name = name
        self.shape = shape


def fake_ops(*ops: tuple[str, str]) -> list[Any]:
    """Ops whose classes carry the library's query-shape label, as its operation classes do."""
    made = []
    for name, shape in ops:
        kind = type(f"Fake{shape.title()}", (FakeOp,), {"_ENGINE_QUERY_SHAPE": shape})
        made.append(kind(name, shape))
    return made


def test_the_token_major_run_stops_at_the_first_operator_that_reads_more() -> None:
    ops = fake_ops(("gemm", "tokens"), ("mla", "module"), ("norm", "tokens"), ("attention", "generation"))
    assert _num_token_major(ops, (0, 1, 2, 3)) == 1
    assert _num_token_major(ops, (0, 2, 3, 1)) == 2
    assert _num_token_major(ops, (3, 0, 2)) == 0


def test_no_token_major_run_where_its_names_recur_after_it() -> None:
    """The library folds a name's entries into one: the two parts could not be evaluated apart."""
    ops = fake_ops(("gemm", "tokens"), ("attention", "generation"), ("gemm", "generation"))
    assert _num_token_major(ops, (0, 1, 2)) == 0


@pytest.mark.parametrize("breakdown", [False, True])
def test_a_step_adds_its_entries_in_the_librarys_order(breakdown: bool) -> None:
    """In floating point 1e16 + 1 - 1e16 is 0 when added left to right (1 is lost beside 1e16), 1 otherwise:
    both sums (with and without the breakdown) add the entries in order, whichever call they came from."""
    entries = [("a", 1e10, 0.0, "x"), ("ar", 1e-6, 0.0, "x"), ("b", -1e10, 0.0, "x")]  # 1e16 ns, 1 ns, -1e16 ns
    timing = _timing(entries, frozenset({"ar"}), breakdown)
    assert (timing.duration_ns, timing.communication_ns, timing.compute_ns) == (0, 1, -1)
