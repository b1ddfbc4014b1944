"""FlashAttention-2's varlen calls, timed from the CTAs they launch.

vLLM V1 runs a step's attention as one ``flash_attn_varlen_func`` call. On
GPUs that run FlashAttention-2 (vLLM picks FA3 on sm90 only,
``vllm/attention/utils/fa_utils.py``) a call whose longest query is one token
swaps each KV head's query group into the query rows and splits long KV
across SMs (``mha_varlen_fwd`` in vllm-project/flash-attention
``csrc/flash_attn/flash_api.cpp``: ``seqlenq_ngroups_swapped``, "Only apply
split-k for decoding"; :func:`decode_grid`). A call with a prefill chunk does
neither: with a paged KV cache it runs the split-KV kernel with one split
(``run_mha_fwd_splitkv_dispatch``: 64-row query tiles, 128-key blocks at
head_dim 128, 128 threads; grid = query tiles of the longest sequence x
sequences x query heads; :func:`grid`). So every decode gets one CTA per
*query* head that scans its whole KV alone and computes a full 64-row tile
for its one row, and every sequence launches as many tiles as the longest
one (the extra CTAs exit at once). A call's time::

    t = floor + max(work / SMs, longest CTA, bytes / (e x bandwidth))
    work = sum over CTAs of (cta_us + blocks x block_us) + empty CTAs x empty_us
    block_us = 4 x 64 x block keys x head_dim / (tile_eff x peak / SMs)

``blocks`` are a CTA's key blocks (a chunk's tile ``j`` attends to its cached
keys and the chunk's first ``64 (j + 1)``); ``bytes`` read each decode's KV
once per query head beside a chunk (``e = mem_eff``), once per KV head in a
decode-only call (``e = decode_mem_eff``). The six parameters are physical and
per device family (``fit.varlen`` fits them on LLMServingSim's vLLM 0.19
attention shots; ``profiles/varlen.yaml`` ships them with their
cross-validation).

Main names: :class:`VarlenParams`, :class:`Device`, :func:`grid`, :func:`decode_grid`,
:func:`grid_us`, :func:`call_us`, :func:`decode_only_us`, :func:`load_family`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cosim.adapters.sdk.yaml_files import safe_load

VARLEN_PATH = Path(__file__).with_name("profiles") / "varlen.yaml"
TILE_ROWS = 64  # kBlockM of the split-KV kernel, every head dim


@dataclasses.dataclass(frozen=True)
class VarlenParams:
    """One family's parameters.

    Attributes:
        tile_eff: a CTA's tensor-core rate on one 64 x 128 tile step, as a share of its SM's
            part of the dense peak (0, 1].
        cta_us: SM time of a CTA's start and end (loading its query tile, writing its output).
        empty_us: SM time of a CTA launched past its sequence's last query row.
        floor_us: the call's fixed cost (launch, tail).
        mem_eff: share of the bandwidth the CTAs' reads reach (above 1 where the query heads of
            one KV head hit in L2).
        decode_mem_eff: share of the bandwidth a decode-only call's CTAs reach (each KV read once).
    """

    tile_eff: float
    cta_us: float
    empty_us: float
    floor_us: float
    mem_eff: float
    decode_mem_eff: float


PARAM_KEYS = tuple(f.name for f in dataclasses.fields(VarlenParams))


@dataclasses.dataclass(frozen=True)
class Device:
    """The figures of one GPU the model reads."""

    num_sms: int
    peak_flops: float  # dense, the dtype's, FLOP/s
    mem_bw: float      # bytes/s


@dataclasses.dataclass(frozen=True)
class Grid:
    """What a call launches, per query head (see the module docstring)."""

    ctas: int         # CTAs with query rows: the chunks' 64-row tiles and one per decode
    blocks: int       # 128-key blocks those CTAs scan
    empty: int        # CTAs past their sequence's last row (every sequence gets the longest's tiles)
    longest: int      # blocks of the longest CTA
    read_keys: int    # keys the decode CTAs read (each query head reads its decode's KV again)
    chunk_keys: int   # keys of the chunks (read once per KV head)
    block_flops: float


def block_keys(head_dim: int) -> int:
    """Keys per block of the split-KV kernel (kBlockN; ``set_params_splitkv`` counts blocks alike)."""
    return 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64


def grid(chunks: Sequence[tuple[int, int]], decodes: Sequence[int], head_dim: int) -> Grid:
    """The grid of a call over ``chunks`` ((new, cached) of sequences with more than one query
    token) and ``decodes`` (cached tokens of one-token sequences, which attend to themselves too)."""
    keys_per_block = block_keys(head_dim)
    blocks = longest = tiles = chunk_keys = 0
    max_tiles = 1
    for new, cached in chunks:
        n_tiles = -(-new // TILE_ROWS)
        tiles += n_tiles
        max_tiles = max(max_tiles, n_tiles)
        for j in range(n_tiles):
            blocks += -(-(cached + min((j + 1) * TILE_ROWS, new)) // keys_per_block)
        longest = max(longest, -(-(cached + new) // keys_per_block))
        chunk_keys += cached + new
    read_keys = 0
    for cached in decodes:
        b = -(-(cached + 1) // keys_per_block)
        blocks += b
        longest = max(longest, b)
        read_keys += cached + 1
    ctas = tiles + len(decodes)
    return Grid(ctas, blocks, max_tiles * (len(chunks) + len(decodes)) - ctas, longest, read_keys, chunk_keys,
                4.0 * TILE_ROWS * keys_per_block * head_dim)


def decode_grid(decodes: Sequence[int], kv_heads: int, head_dim: int, num_sms: int) -> Grid:
    """The grid of a decode-only call, per KV head: one CTA holds a KV head's query group (its rows)
    for one sequence and one of the call's KV splits, chosen as FlashAttention-2 chooses them
    (:func:`num_splits`); a split past a short sequence's last key exits at once."""
    keys_per_block = block_keys(head_dim)
    blocks = [-(-(cached + 1) // keys_per_block) for cached in decodes]
    splits = num_splits(len(decodes) * kv_heads, num_sms, max(blocks))
    per_split = -(-max(blocks) // splits)
    ctas = sum(-(-b // per_split) for b in blocks)
    return Grid(ctas, sum(blocks), len(decodes) * splits - ctas, per_split, sum(decodes) + len(decodes), 0,
                4.0 * TILE_ROWS * keys_per_block * head_dim)


def num_splits(ctas: int, num_sms: int, num_blocks: int, max_splits: int = 128) -> int:
    """FlashAttention-2's KV splits of a decode-only call (``num_splits_heuristic`` of
    ``flash_api.cpp``, called with twice the SMs: 128-thread CTAs): none once the CTAs nearly fill
    the GPU, else the fewest splits within 85% of the best wave efficiency."""
    slots = 2 * num_sms
    if ctas >= 0.8 * slots:
        return 1
    top = min(max_splits, slots, num_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or -(-num_blocks // s) != -(-num_blocks // (s - 1))

    def efficiency(s: int) -> float:
        waves = ctas * s / slots
        return waves / -(-waves // 1) if eligible(s) else 0.0

    best = max(efficiency(s) for s in range(1, top + 1))
    return next((s for s in range(1, top + 1) if eligible(s) and efficiency(s) >= 0.85 * best), 1)


def grid_us(g: Grid, *, heads: int, kv_heads: int, head_dim: int, p: VarlenParams, device: Device,
            kv_bytes: float = 2.0, decode_only: bool = False) -> float:
    """Time of a call launching ``g`` (:func:`grid`) for ``heads`` query heads, in microseconds
    (``decode_only``: :func:`decode_grid` for ``kv_heads``; pass ``heads=kv_heads``)."""
    block_us = g.block_flops * device.num_sms / (p.tile_eff * device.peak_flops) * 1e6
    work = heads * (g.ctas * p.cta_us + g.blocks * block_us + g.empty * p.empty_us) / device.num_sms
    traffic = 2 * kv_bytes * head_dim * (heads * g.read_keys + kv_heads * g.chunk_keys)
    memory = traffic / ((p.decode_mem_eff if decode_only else p.mem_eff) * device.mem_bw) * 1e6
    return p.floor_us + max(work, p.cta_us + g.longest * block_us, memory)


def call_us(chunks: Sequence[tuple[int, int]], decodes: Sequence[int], *, heads: int, kv_heads: int,
            head_dim: int, p: VarlenParams, device: Device, kv_bytes: float = 2.0) -> float:
    """Time of one varlen call that holds at least one chunk, in microseconds.

    Args:
        chunks: (new tokens, cached tokens) of every sequence with more than one query token.
        decodes: cached tokens of every one-token sequence.
        heads, kv_heads, head_dim: the rank's attention shape.
        p: the family's parameters.
        device: the GPU's figures.
        kv_bytes: bytes per cached K or V element.
    """
    return grid_us(grid(chunks, decodes, head_dim), heads=heads, kv_heads=kv_heads, head_dim=head_dim, p=p,
                   device=device, kv_bytes=kv_bytes)


def decode_only_us(decodes: Sequence[int], *, kv_heads: int, head_dim: int, p: VarlenParams, device: Device,
                   kv_bytes: float = 2.0) -> float:
    """Time of a decode-only call over ``decodes`` (cached tokens of each), in microseconds."""
    return grid_us(decode_grid(decodes, kv_heads, head_dim, device.num_sms), heads=kv_heads, kv_heads=kv_heads,
                   head_dim=head_dim, p=p, device=device, kv_bytes=kv_bytes, decode_only=True)


@functools.cache
def _profile(path: Path = VARLEN_PATH) -> dict[str, Any]:
    data = safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def load_family(family: str, path: Path = VARLEN_PATH) -> VarlenParams | None:
    """The parameters of a family that runs FlashAttention-2's varlen kernel (those fitted on its
    own GPUs, else the ``fa2`` fit pooled over every measured one), or None where the family runs
    another kernel (FlashAttention-3 on Hopper, other vendors' attention)."""
    profile = _profile(path)
    if family not in profile.get("fa2_families", []):
        return None
    entry = profile.get("families", {}).get(family) or profile["families"]["fa2"]
    return VarlenParams(**{k: float(entry["params"][k]) for k in PARAM_KEYS})
