"""Reading an LLMServingSim v2 profile bundle (``profiler/perf/<HW>/<org>/<model>/<variant>/``).

A bundle holds ``meta.yaml`` and, per TP degree, ``tp<N>/dense.csv``,
``per_sequence.csv``, ``attention.csv`` and optionally ``moe.csv`` and
``skew_fit.csv``. The per-iteration layer order comes from the architecture
catalog ``profiler/models/<architecture>.yaml`` that ``meta.yaml`` names,
found by walking up from the bundle. :func:`load_bundle` returns a
:class:`ProfileTables` for one TP degree; results are cached per path.
"""

from __future__ import annotations

import csv
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .tables import AttentionTable, Curve, MoETable, SkewFit

log = logging.getLogger(__name__)


class BundleError(ValueError):
    """The bundle is missing a file, a layer or the requested TP degree."""


@dataclass(frozen=True)
class LayerOrder:
    """Layer names of one iteration, from the architecture catalog's ``sequence``."""

    prologue: tuple[str, ...]
    block: tuple[str, ...]  # pre_attn + post_attn + mlp (dense or moe), attention included
    head: tuple[str, ...]
    categories: dict[str, str]  # layer -> dense | per_sequence | attention | moe


@dataclass
class ProfileTables:
    """The lookups of one bundle at one TP degree (times in microseconds)."""

    path: Path
    tp: int
    hardware: str
    model: str
    order: LayerOrder
    dense: dict[str, Curve]
    per_sequence: dict[str, Curve]
    attention: AttentionTable
    moe: MoETable | None
    skew: SkewFit | None
    max_num_batched_tokens: int
    max_num_seqs: int


def _rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError as err:
        raise BundleError(f"cannot read {path}: {err.strerror}") from err


def _curves(path: Path, key: str) -> dict[str, Curve]:
    points: dict[str, tuple[list[float], list[float]]] = {}
    for row in _rows(path):
        xs, ys = points.setdefault(row["layer"], ([], []))
        xs.append(float(row[key]))
        ys.append(float(row["time_us"]))
    return {layer: Curve(xs, ys) for layer, (xs, ys) in points.items()}


def find_architecture(bundle: Path, name: str) -> Path:
    """``models/<name>.yaml`` in the nearest ancestor of ``bundle`` that has one."""
    for parent in bundle.resolve().parents:
        candidate = parent / "models" / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    raise BundleError(f"architecture catalog models/{name}.yaml not found above {bundle}")


def read_layer_order(path: Path) -> LayerOrder:
    """The layer order of one iteration from an architecture catalog."""
    data = yaml.safe_load(path.read_text())
    seq = data["sequence"]
    categories = {layer: category for category, layers in data["catalog"].items() for layer in layers}
    mlp = tuple(seq.get("mlp_moe") or ()) or tuple(seq.get("mlp_dense") or ())
    block = tuple(seq.get("pre_attn") or ()) + tuple(seq.get("post_attn") or ()) + mlp
    return LayerOrder(tuple(seq.get("prologue") or ()), block, tuple(seq.get("head") or ()), categories)


def _skew_fit(meta: dict[str, Any], folder: Path, tp: int) -> SkewFit | None:
    fit = meta.get("skew_fit") or {}
    if not fit.get("enabled"):
        return None  # upstream applies no skew correction to such bundles
    per_tp = (fit.get("per_tp") or {}).get(tp) or (fit.get("per_tp") or {}).get(str(tp)) or {}
    table: dict[str, float] = {}
    if (folder / "skew_fit.csv").is_file():
        for row in _rows(folder / "skew_fit.csv"):
            key = "|".join((f"pc={row['pc']}", row["n_label"], row["skew_rate_label"], row["kv_big_label"],
                            row["kp_label"]))
            table[key] = float(row["alpha"])
    return SkewFit(fit["bucket_axes"], table, float(per_tp.get("alpha_default", 0.0)))


@functools.lru_cache(maxsize=16)
def load_bundle(path: str, tp: int) -> ProfileTables:
    """Loads the tables of ``path`` (a bundle folder) for TP degree ``tp``.

    Raises:
        BundleError: no such folder, TP degree or layer; unreadable file.
    """
    root = Path(path).expanduser()
    meta_path = root / "meta.yaml"
    if not meta_path.is_file():
        raise BundleError(f"{root} is not a profile bundle (no meta.yaml)")
    meta = yaml.safe_load(meta_path.read_text())
    folder = root / f"tp{tp}"
    if not folder.is_dir():
        raise BundleError(f"{root} has no tp{tp}/ (profiled TP degrees: {meta.get('tp_degrees')})")
    order = read_layer_order(find_architecture(root, str(meta["architecture"])))
    dense = _curves(folder / "dense.csv", "tokens")
    per_sequence = _curves(folder / "per_sequence.csv", "sequences")
    attention = AttentionTable((int(r["prefill_chunk"]), int(r["kv_prefill"]), int(r["n_decode"]),
                                int(r["kv_decode"]), float(r["time_us"])) for r in _rows(folder / "attention.csv"))
    moe = None
    if any(order.categories.get(layer) == "moe" for layer in order.block):
        moe_path = folder / "moe.csv" if (folder / "moe.csv").is_file() else root / "tp1" / "moe.csv"
        moe = MoETable((int(r["tokens"]), int(r["activated_experts"]), float(r["time_us"]))
                       for r in _rows(moe_path))  # MoE is profiled at TP1 only; EP picks tokens/experts
    for layer in order.prologue + order.block + order.head:
        table = {"dense": dense, "per_sequence": per_sequence}.get(order.categories.get(layer, ""))
        if table is not None and layer not in table:
            raise BundleError(f"{folder} has no times for layer {layer!r}")
    engine = meta.get("engine_effective") or {}
    log.info("profile bundle %s tp%d: %d dense layers, %d attention slices", root, tp, len(dense),
             len(attention.slices))
    return ProfileTables(path=root, tp=tp, hardware=str(meta.get("hardware", "")), model=str(meta.get("model", "")),
                         order=order, dense=dense, per_sequence=per_sequence, attention=attention, moe=moe,
                         skew=_skew_fit(meta, folder, tp),
                         max_num_batched_tokens=int(engine.get("max_num_batched_tokens", 2048)),
                         max_num_seqs=int(engine.get("max_num_seqs", 256)))
