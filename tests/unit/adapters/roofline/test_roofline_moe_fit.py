"""The MoE floor's fit on aiconfigurator-core's fused MoE tables: routing, timing and fit by hand."""

from __future__ import annotations

import dataclasses

import pytest

from cosim.adapters.roofline.fit import moe as M
from cosim.adapters.roofline.kernels import KernelParams

SCOUT_FP8_TP2 = M.MoeRow(device="H100-SXM", model="llama-4-scout-17b-16e", dtype="fp8_block", hidden=5120,
                         inter=8192, experts=16, top_k=1, tp=2, tokens=1, touched=1, measured_ns=79_829.0)
K = KernelParams(gemm_eff=0.5, gemm_m_half=64.0, gemm_mem_eff=0.8, gemm_floor_us=4.0, elem_mem_eff=0.5,
                 elem_floor_us=2.0, moe_floor_us=20.0)


@pytest.mark.parametrize(("tokens", "experts", "top_k", "touched"), [
    (1, 16, 1, 1),    # one token, one expert
    (4, 16, 1, 4),    # fewer tokens than the stride 16: experts 0, 4, 8, 12
    (20, 16, 1, 16),  # more tokens than experts: all of them
    (2, 8, 2, 4),     # stride 4: token 0 picks 0 and 4, token 1 picks 2 and 6
    (8, 8, 2, 8),     # (t + 4 i) mod 8 over 8 tokens: all 8
    (1, 128, 8, 8),   # Qwen3-30B-A3B's one token: its 8 picks
])
def test_balanced_routing_touches_the_experts_the_collector_picks(tokens: int, experts: int, top_k: int,
                                                                  touched: int) -> None:
    assert M.balanced_experts(tokens, experts, top_k) == touched


def test_one_scout_token_by_hand() -> None:
    """One token through one FP8 expert of Scout at TP2 on an H100 (1978.9 TFLOP/s FP8, 3350 GB/s):
    gate_up and down stream their weights, SiLU-and-mul is a floor, and the call's floor is added."""
    gate_up = (2 * (5120 + 8192) + 5120 * 8192) / (0.8 * 3350e9) * 1e9 + 4000      # 41.97 MB: 15.66 us + floor
    act = 3 * 2 * 4096 / (0.5 * 3350e9) * 1e9 + 2000                             # 24.6 kB
    down = (2 * (4096 + 5120) + 4096 * 5120) / (0.8 * 3350e9) * 1e9 + 4000       # 20.99 MB: 7.83 us + floor
    assert M.moe_ns(SCOUT_FP8_TP2, K) == pytest.approx(gate_up + act + down + 20_000, rel=1e-9)
    # M = 1 keeps both GEMMs memory bound: 2 x 5120 x 8192 x 65 / (0.5 x 1978.9e12) = 5.5 us < 15.7 us
    assert M.moe_ns(SCOUT_FP8_TP2, K) == pytest.approx(53_508, abs=1)


def test_fit_floor_recovers_the_floor_that_made_the_rows() -> None:
    rows = []
    for tokens in (1, 2, 4, 8, 16, 64, 256):
        row = dataclasses.replace(SCOUT_FP8_TP2, tokens=tokens, touched=M.balanced_experts(tokens, 16, 1))
        rows.append(dataclasses.replace(row, measured_ns=M.moe_ns(row, dataclasses.replace(K, moe_floor_us=25.0))))
    assert M.fit_floor(rows, lambda _: K) == pytest.approx(25.0, abs=1e-3)
    assert M.fit_floor([], lambda _: K) is None
    assert max(abs(e) for e in M.errors_pct(rows, lambda _: dataclasses.replace(K, moe_floor_us=25.0))) < 1e-9
