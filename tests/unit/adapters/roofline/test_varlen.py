"""FlashAttention-2's varlen call timed from its CTAs (adapters/roofline/varlen.py) and its fit's array form."""

from __future__ import annotations

import dataclasses

import numpy as np

from cosim.adapters.roofline import varlen
from cosim.adapters.roofline.fit import varlen as fit_varlen

PARAMS = varlen.VarlenParams(tile_eff=0.5, cta_us=2.0, empty_us=0.4, floor_us=3.0, mem_eff=1.7, decode_mem_eff=0.8)
PRO_6000 = varlen.Device(num_sms=188, peak_flops=500e12, mem_bw=1792e9)
LLAMA_8B = {"heads": 32, "kv_heads": 8, "head_dim": 128}


def call(chunks: list[tuple[int, int]], decodes: list[int]) -> float:
    return varlen.call_us(chunks, decodes, **LLAMA_8B, p=PARAMS, device=PRO_6000)


def test_the_grid_counts_tiles_blocks_and_the_ctas_that_exit_at_once() -> None:
    """A 256-token chunk after 64 cached keys: 4 tiles scanning 128, 192, 256 and 320 keys (1 + 2 + 2 + 3
    blocks); two decodes at 127 and 128 cached keys (1 and 2 blocks); every sequence gets 4 tiles."""
    g = varlen.grid([(256, 64)], [127, 128], 128)
    assert (g.ctas, g.blocks, g.empty, g.longest) == (6, 11, 6, 3)
    assert (g.read_keys, g.chunk_keys) == (128 + 129, 320)


def test_adding_a_decode_never_shortens_the_call() -> None:
    for chunk in ((16, 0), (512, 0), (2048, 4096)):
        for context in (16, 500, 4000, 16000):
            times = [call([chunk], [context] * n) for n in range(0, 300, 7)]
            assert times == sorted(times), (chunk, context)


def test_decodes_beside_a_chunk_cost_more_than_their_share_of_one_wave() -> None:
    """64 decodes at 8192 keys: 64 x 32 CTAs of 65 blocks each, 11 waves on 188 SMs; far above one CTA."""
    alone = call([(16, 0)], [])
    assert call([(16, 0)], [8192] * 64) > 10 * (call([(16, 0)], [8192]) - alone)


def test_the_fits_array_form_is_the_models() -> None:
    shapes = [((16, 0), 1, 512), ((512, 2048), 64, 512), ((2048, 0), 256, 16384), ((64, 16), 4, 16)]
    grids = [varlen.grid([chunk], [kd] * n, 128) for chunk, n, kd in shapes]
    cols = {f.name: np.array([getattr(g, f.name) for g in grids]) for f in dataclasses.fields(varlen.Grid)}
    ones = np.ones(len(shapes))
    shots = fit_varlen.Shots(device=np.array(["d"] * len(shapes)), model=np.array(["m"] * len(shapes)),
                             bundle=np.array(["b"] * len(shapes)),
                             heads=32 * ones, kv_heads=8 * ones, head_dim=128 * ones, **cols,
                             num_sms=188 * ones, peak_flops=500e12 * ones, mem_bw=1792e9 * ones,
                             measured_us=ones, shape=np.zeros((len(shapes), 4)),
                             kind=np.full(len(shapes), fit_varlen.MIXED))
    expected = [call([chunk], [kd] * n) for chunk, n, kd in shapes]
    np.testing.assert_allclose(fit_varlen.predict_us(shots, PARAMS), expected, rtol=1e-12)


def test_fa2_families_have_parameters_and_hopper_has_none() -> None:
    for family in ("ampere", "ada", "ada-geforce", "blackwell-rtx"):
        assert varlen.load_family(family) is not None, family
    for family in ("hopper", "blackwell", "generic"):
        assert varlen.load_family(family) is None, family


def test_a_decode_only_call_splits_the_kv_of_few_sequences_as_flashattention_2_does() -> None:
    """One decode of 8192 keys on 8 KV heads: 8 CTAs on 376 slots, 64 blocks. Only splits that change the
    blocks per split are eligible (..., 22, 32, 64); 32 and 64 fill the slots best (256 / 376 and 512 / 752),
    and the fewest within 85% of that is 32, of 2 blocks each."""
    assert varlen.num_splits(8, 188, 64) == 32
    assert varlen.num_splits(512, 188, 64) == 1  # 512 CTAs fill 0.8 of the slots: no split
    g = varlen.decode_grid([8191], 8, 128, 188)
    assert (g.ctas, g.blocks, g.longest) == (32, 64, 2)


def test_the_decodes_cost_more_beside_a_chunk_than_alone() -> None:
    decodes = [512] * 64
    alone = varlen.decode_only_us(decodes, kv_heads=8, head_dim=128, p=PARAMS, device=PRO_6000)
    assert call([(512, 0)], decodes) - call([(512, 0)], []) > 1.2 * alone
