"""A mixed step's decodes on FlashAttention-2 GPUs (adapters/aiconfigurator/mixed.py), against the library's
own composition elsewhere."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed: pip install "
                    "'cosim[aiconfigurator]' (the dev extra includes it)")

from cosim.adapters.aiconfigurator.mixed import MixedAttention
from cosim.adapters.aiconfigurator.step import time_step
from tests.contract.test_aiconfigurator_contract import BACKEND, make_spec

MIXED = ([512] + [1] * 64, [0] + [512] * 64)  # a 512-token chunk beside 64 decodes at 512 keys


def test_a_gqa_group_of_8_pays_more_per_decode_than_one_of_4() -> None:
    """Each decode gets a CTA per query head: Qwen3-32B (64 heads over 8 KV heads) re-reads each KV head 8
    times, Llama-3.1-8B (32 over 8) 4 times; the bundles' median alpha is ~2.5 against ~1.4."""
    llama, qwen = (MixedAttention.of(make_spec(model, "RTX-PRO-6000"))
                   for model in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-32B"))
    assert llama is not None and qwen is not None
    alphas = [m.decode_scale([(512, 0)], [512] * 64) for m in (llama, qwen)]
    assert alphas[1] > 1.5 * alphas[0] > 1.5, alphas


def test_hopper_runs_the_librarys_composition_unchanged() -> None:
    spec = make_spec()
    assert MixedAttention.of(spec) is None
    engine = BACKEND.open_session(spec).engine(1)
    assert engine.mixed is None
    unchanged = dataclasses.replace(engine, mixed=None)
    assert time_step(engine, *MIXED) == time_step(unchanged, *MIXED)


def test_rtx_pro_6000_decodes_beside_a_chunk_cost_more_than_alone() -> None:
    engine = BACKEND.open_session(make_spec(device="RTX-PRO-6000")).engine(1)
    assert engine.mixed is not None
    composed = time_step(dataclasses.replace(engine, mixed=None), *MIXED).duration_ns
    assert time_step(engine, *MIXED).duration_ns > composed


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-32B"])
def test_adding_a_decode_to_a_mixed_step_never_shortens_it_unless_the_tables_do(model: str) -> None:
    """The library's composition itself may fall as a decode joins (Qwen3-32B's 64-token chunk beside 45
    decodes at 100 keys takes 57.42 ms, beside 50 56.90 ms: its tables); the varlen scaling adds no fall.
    (What it adds may be negative: a few short decodes run on SMs the chunk leaves idle, alpha < 1.)"""
    engine = BACKEND.open_session(make_spec(model, "RTX-PRO-6000")).engine(1)
    composed = dataclasses.replace(engine, mixed=None)
    for chunk, context in ((64, 0), (512, 1024), (2048, 0)):
        for keys in (100, 1000, 8000):
            batches = [([chunk] + [1] * n, [context] + [keys] * n) for n in range(0, 200, 5)]
            ours = [time_step(engine, *b).duration_ns for b in batches]
            theirs = [time_step(composed, *b).duration_ns for b in batches]
            for i in range(len(batches) - 1):
                assert ours[i + 1] - ours[i] >= min(0, theirs[i + 1] - theirs[i]), (chunk, context, keys, i)
