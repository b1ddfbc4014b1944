"""Readers for the measurement files the regression backend trains on.

Plain ``csv`` and numpy only, so training needs no pandas. Every reader
returns simple records with times converted to milliseconds as in the
sources (see ``shared/data/README.md``); callers convert to nanoseconds.

Main names: :func:`read_mlp_profiles`, :func:`read_attention_profile`,
:func:`read_all_reduce`, :func:`read_splitwise`, :func:`read_step_csv`,
:func:`holdout_mask`, :data:`OPERATORS`.
"""

from __future__ import annotations

import csv
import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

# Non-attention operators of one layer in Vidur's mlp.csv, in execution order.
OPERATORS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
             "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")

# Seed of the fixed train/held-out split every report uses.
SPLIT_SEED = 20240604
HOLDOUT_FRACTION = 0.2


@dataclass
class OperatorProfile:
    """Measured per-layer operator medians of one (device, model, TP), ms.

    Attributes:
        device: device folder name (``h100``, ``a100``).
        model: Hugging Face id, e.g. ``meta-llama/Llama-2-70b-hf``.
        tp: tensor-parallel degree.
        shape: full-model shape columns (n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size, gated).
        num_tokens: token count of each row.
        times_ms: operator name -> median per row (NaN where the operator is absent).
        min_ms: operator name -> fastest of the row's repeats (same layout).
    """

    device: str
    model: str
    tp: int
    shape: dict[str, int]
    num_tokens: np.ndarray
    times_ms: dict[str, np.ndarray] = field(default_factory=dict)
    min_ms: dict[str, np.ndarray] = field(default_factory=dict)


def _floats(rows: list[dict[str, str]], column: str) -> np.ndarray:
    return np.array([float(r[column]) if r.get(column, "") not in ("", None) else np.nan for r in rows])


def read_mlp_profiles(root: Path) -> list[OperatorProfile]:
    """Reads every ``vidur/profiling/compute/<device>/<org>/<model>/mlp.csv`` under ``root``.

    Args:
        root: the data folder (``shared/data``).

    Returns:
        One profile per (device, model, TP), sorted by key.
    """
    profiles = []
    for path in sorted((root / "vidur" / "profiling" / "compute").glob("*/*/*/mlp.csv")):
        device, model = path.parts[-4], f"{path.parts[-3]}/{path.parts[-2]}"
        with path.open() as fh:
            rows = list(csv.DictReader(fh))
        for tp in sorted({int(r["num_tensor_parallel_workers"]) for r in rows}):
            sel = [r for r in rows if int(r["num_tensor_parallel_workers"]) == tp]
            first = sel[0]
            shape = {k: int(first[k]) for k in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size")}
            shape["gated"] = int(first["use_gated_mlp"] == "True")
            times = {op: _floats(sel, f"time_stats.{op}.median") for op in OPERATORS}
            mins = {op: _floats(sel, f"time_stats.{op}.min") for op in OPERATORS}
            profiles.append(OperatorProfile(device=device, model=model, tp=tp, shape=shape,
                                            num_tokens=_floats(sel, "num_tokens"), times_ms=times, min_ms=mins))
    log.info("read %d operator profiles under %s", len(profiles), root)
    return profiles


@dataclass
class AttentionProfile:
    """Measured attention kernel medians of one per-shard shape, ms.

    Decode rows: (batch_size, kv_cache_size) -> time. Prefill rows (batch 1):
    (prefill_chunk_size, kv_cache_size) -> time.
    """

    device: str
    n_q_head: int
    n_kv_head: int
    n_embd: int
    tp: int
    decode: np.ndarray   # columns: batch_size, kv_cache_size, time_ms
    prefill: np.ndarray  # columns: chunk, kv_cache_size, time_ms


def read_attention_profile(path: Path, device: str = "a100") -> AttentionProfile:
    """Reads a Vidur attention.csv holding one shape (the legacy A100 file)."""
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    first = rows[0]
    dec = [r for r in rows if r["is_prefill"] == "False" and r.get("time_stats.attn_decode.median")]
    pre = [r for r in rows if r["is_prefill"] == "True" and r.get("time_stats.attn_prefill.median")]
    decode = np.column_stack([_floats(dec, "batch_size"), _floats(dec, "kv_cache_size"),
                              _floats(dec, "time_stats.attn_decode.median")])
    prefill = np.column_stack([_floats(pre, "prefill_chunk_size"), _floats(pre, "kv_cache_size"),
                               _floats(pre, "time_stats.attn_prefill.median")])
    return AttentionProfile(device=device, n_q_head=int(first["n_q_head"]), n_kv_head=int(first["n_kv_head"]),
                            n_embd=int(first["n_embd"]), tp=int(first["num_tensor_parallel_workers"]),
                            decode=decode, prefill=prefill)


def read_all_reduce(root: Path) -> dict[tuple[str, int], np.ndarray]:
    """Intra-node all-reduce times from ``vidur/profiling/network/<device>_dgx``.

    Returns:
        (device, num_workers) -> array of (size_bytes, median_ms, min_ms) rows, sorted by
        size; median and fastest of the timed regions.
    """
    out: dict[tuple[str, int], np.ndarray] = {}
    for path in sorted((root / "vidur" / "profiling" / "network").glob("*_dgx/all_reduce.csv")):
        device = path.parent.name.split("_")[0]
        with path.open() as fh:
            rows = [r for r in csv.DictReader(fh) if r["num_workers"] == r["devices_per_node"]]
        for workers in sorted({int(r["num_workers"]) for r in rows}):
            sel = [r for r in rows if int(r["num_workers"]) == workers]
            table = np.column_stack([_floats(sel, "size"), _floats(sel, "time_stats.all_reduce.median"),
                                     _floats(sel, "time_stats.all_reduce.min")])
            out[(device, workers)] = table[np.argsort(table[:, 0], kind="stable")]
    return out


@dataclass
class StepRecord:
    """One measured whole step (one row of the generic step CSV format, docs/regression.md)."""

    device: str
    model: str
    tp: int
    new_tokens: list[int]
    context_tokens: list[int]
    step_ms: float
    config: str = ""  # configuration id: repeats of one configuration share it (split unit)


# Splitwise names a device by its DGX SKU; cosim device keys are short.
SPLITWISE_DEVICES = {"a100-80gb": "a100", "h100-80gb": "h100", "h100-80gb-pcap": "h100-pcap"}


def _inconsistent_batches(rows: list[dict[str, str]]) -> set[tuple[str, str, str, str]]:
    """Batch-sweep configurations whose median prefill time drops below the next smaller batch's.

    Prefill time of ``batch x 512`` tokens cannot fall as the batch doubles;
    the Llama-2-70B TP2 batch-64 rows do (e.g. 361 ms vs 2398 ms at batch 32
    on H100), most likely runs that did not fit in memory. They are dropped.
    """
    med: dict[tuple[str, str, str], dict[int, list[float]]] = {}
    for r in rows:
        if r["prompt_size"] == "512" and r["token_size"] == "128":
            key = (r["model"], r["hardware"], r["tensor_parallel"])
            med.setdefault(key, {}).setdefault(int(r["batch_size"]), []).append(float(r["prompt_time"]))
    bad = set()
    for key, by_batch in med.items():
        prev = 0.0
        for batch in sorted(by_batch):
            value = float(np.median(by_batch[batch]))
            if value < prev:
                bad.add((*key, str(batch)))
            prev = max(prev, value)
    return bad


def read_splitwise(path: Path, *, drop_inconsistent: bool = True) -> list[StepRecord]:
    """Turns ``splitwise/perf_model.csv`` into step records.

    Each row yields a prefill step (``batch_size`` sequences of ``prompt_size``
    new tokens, no context, ``prompt_time``) and a decode step (``batch_size``
    sequences of one new token at the mean context over the generation,
    ``prompt_size + token_size / 2``, ``token_time``, which is the mean
    decode step time). Configurations failing :func:`_inconsistent_batches`
    are dropped unless ``drop_inconsistent`` is False.
    """
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    bad = _inconsistent_batches(rows) if drop_inconsistent else set()
    if bad:
        log.info("dropping inconsistent splitwise configurations (model, hardware, TP, batch): %s", sorted(bad))
    out = []
    for r in rows:
        if (r["model"], r["hardware"], r["tensor_parallel"], r["batch_size"]) in bad:
            continue
        device = SPLITWISE_DEVICES.get(r["hardware"], r["hardware"])
        tp, batch = int(r["tensor_parallel"]), int(r["batch_size"])
        prompt, gen = int(r["prompt_size"]), int(r["token_size"])
        config = f"{r['model']}|{device}|{tp}|{prompt}|{batch}|{gen}"
        out.append(StepRecord(device, r["model"], tp, [prompt] * batch, [0] * batch,
                              float(r["prompt_time"]), config + "|prefill"))
        ctx = prompt + gen // 2
        out.append(StepRecord(device, r["model"], tp, [1] * batch, [ctx] * batch,
                              float(r["token_time"]), config + "|decode"))
    return out


def _ints(text: str, column: str, line: int) -> list[int]:
    try:
        return [int(x) for x in text.split(";") if x.strip()]
    except ValueError as err:
        raise ValueError(f"line {line}: column {column!r} must hold integers separated by ';', got {text!r}") from err


STEP_CSV_COLUMNS = ("device", "model", "tensor_parallel", "new_tokens", "context_tokens", "step_time_ms")


def read_step_csv(path: Path) -> list[StepRecord]:
    """Reads the generic step-trace CSV format (docs/regression.md).

    Required columns: ``device, model, tensor_parallel, new_tokens,
    context_tokens, step_time_ms``; ``new_tokens`` and ``context_tokens`` hold
    one integer per sequence separated by ``;``. Optional ``config`` groups
    repeats of one configuration (they stay on one side of the split).

    Raises:
        ValueError: a column is missing or a value is malformed (names the line).
    """
    with path.open() as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in STEP_CSV_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing columns {missing}; required: {list(STEP_CSV_COLUMNS)}")
        out = []
        for line, r in enumerate(reader, start=2):
            new, ctx = _ints(r["new_tokens"], "new_tokens", line), _ints(r["context_tokens"], "context_tokens", line)
            if not new or len(new) != len(ctx):
                raise ValueError(f"{path} line {line}: new_tokens and context_tokens must list the same "
                                 f"number (> 0) of sequences, got {len(new)} and {len(ctx)}")
            out.append(StepRecord(r["device"].strip().lower(), r["model"].strip(), int(r["tensor_parallel"]),
                                  new, ctx, float(r["step_time_ms"]), r.get("config") or f"row{line}"))
    return out


def holdout_mask(keys: list[str], *, seed: int = SPLIT_SEED, fraction: float = HOLDOUT_FRACTION) -> np.ndarray:
    """Fixed seeded split: True for rows held out.

    Rows sharing a key (e.g. repeats of one configuration) land on the same
    side. The choice depends only on the key and the seed, not on row order.
    """
    def draw(key: str) -> float:
        digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    return np.array([draw(k) < fraction for k in keys], dtype=bool)


def file_digest(path: Path) -> str:
    """First 16 hex digits of the file's SHA-256 (recorded in artifacts)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
