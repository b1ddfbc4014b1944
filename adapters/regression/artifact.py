"""Versioned artifacts of the regression backend: plain JSON, no pickles.

Two kinds share one envelope (``format``, ``kind``, ``schema_version``,
``sources``, ``split``):

- ``operator``: per (device, model, TP) piecewise-linear tables of every
  non-attention operator (GEMMs tiled, see curves.py), attention grids per
  per-shard shape, all-reduce tables, and the engine-overhead terms.
- ``step``: per (device, model, TP) linear coefficients of whole-step time.

Main names: :class:`OperatorArtifact`, :class:`StepArtifact`, :func:`load_artifact`,
:func:`save_artifact`, :data:`DEFAULT_ARTIFACTS`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .curves import Grid, Table

log = logging.getLogger(__name__)

FORMAT = "cosim.regression"
SCHEMA_VERSION = 2  # 2: engine-overhead terms (OverheadEntry) replace linear coefficients
ARTIFACT_DIR = Path(__file__).parent / "artifacts"
DEFAULT_ARTIFACTS = {"operator": ARTIFACT_DIR / "operator.json", "step": ARTIFACT_DIR / "step.json"}


@dataclass
class OperatorEntry:
    """Operator tables of one (device, model, TP); times in ms per layer per shard."""

    device: str
    model: str
    tp: int
    shape: dict[str, int]
    table: Table


@dataclass
class AttentionEntry:
    """Measured attention of one per-shard shape on one device; times in ms per layer."""

    device: str
    q_heads: int    # query heads per shard
    kv_heads: int   # KV heads per shard
    head_dim: int
    source: str     # which model/TP it was measured with
    decode: Grid    # (batch size, mean context tokens) -> ms
    prefill: Grid   # (chunk tokens, context tokens) -> ms


@dataclass
class OverheadEntry:
    """How a serving engine's measured steps relate to the composed kernel time, fitted on whole steps.

    For a step of ``num_seqs`` sequences through ``num_layers`` layers whose
    composed kernels take ``kernels_ms``::

        step_ms = max(gpu_scale * kernels_ms + serial_ms, num_layers * floor_ms_per_layer)
                  + per_seq_ms * num_seqs

    ``gpu_scale`` (>= 1) is how much slower the engine runs the profiled
    kernels; the floor is the host-bound step time (the CPU issuing the
    layers' kernels), ``prefill_floor_ms_per_layer`` for a step with any
    prefill and ``decode_floor_ms_per_layer`` otherwise, shared by every TP of
    a device; ``serial_ms`` and ``per_seq_ms`` are per-step and per-sequence
    work that overlaps nothing (sampling, output processing).
    """

    device: str
    tp: int
    gpu_scale: float
    serial_ms: float
    per_seq_ms: float
    decode_floor_ms_per_layer: float
    prefill_floor_ms_per_layer: float
    source: str


@dataclass
class OperatorArtifact:
    """Everything the operator-level predictor needs (see module docstring)."""

    operators: list[OperatorEntry]
    attention: list[AttentionEntry]
    all_reduce: dict[tuple[str, int], Table]  # (device, TP) -> size_bytes -> ms
    overhead: list[OverheadEntry]
    meta: dict[str, Any] = field(default_factory=dict)
    kind: str = "operator"

    def to_json(self) -> dict[str, Any]:
        return {
            **_envelope(self.kind, self.meta),
            "operators": [{"device": e.device, "model": e.model, "tp": e.tp, "shape": e.shape,
                           "table": e.table.to_json()} for e in self.operators],
            "attention": [{"device": a.device, "q_heads": a.q_heads, "kv_heads": a.kv_heads,
                           "head_dim": a.head_dim, "source": a.source, "decode": a.decode.to_json(),
                           "prefill": a.prefill.to_json()} for a in self.attention],
            "all_reduce": [{"device": d, "tp": tp, "table": t.to_json()} for (d, tp), t in self.all_reduce.items()],
            "overhead": [vars(o) for o in self.overhead],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OperatorArtifact:
        return cls(
            operators=[OperatorEntry(e["device"], e["model"], int(e["tp"]), dict(e["shape"]),
                                     Table.from_json(e["table"])) for e in data["operators"]],
            attention=[AttentionEntry(a["device"], a["q_heads"], a["kv_heads"], a["head_dim"], a["source"],
                                      Grid.from_json(a["decode"]), Grid.from_json(a["prefill"]))
                       for a in data["attention"]],
            all_reduce={(r["device"], int(r["tp"])): Table.from_json(r["table"]) for r in data["all_reduce"]},
            overhead=[OverheadEntry(**o) for o in data["overhead"]],
            meta=_meta(data))


# Features of the whole-step linear model, in coefficient order (see step_model.py).
STEP_FEATURES = ("intercept", "num_seqs", "num_tokens", "tokens_over_256", "tokens_over_1024",
                 "tokens_over_4096", "has_prefill", "prefill_attn_work", "decode_kv_tokens")


@dataclass
class StepEntry:
    """Whole-step linear model of one (device, model, TP); ``ranges`` bound the training data."""

    device: str
    model: str
    tp: int
    coef_ms: list[float]
    ranges: dict[str, float]


@dataclass
class StepArtifact:
    """Whole-step predictors trained on measured step times."""

    entries: list[StepEntry]
    meta: dict[str, Any] = field(default_factory=dict)
    kind: str = "step"

    def to_json(self) -> dict[str, Any]:
        return {**_envelope(self.kind, self.meta), "features": list(STEP_FEATURES),
                "entries": [vars(e) for e in self.entries]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepArtifact:
        if list(data.get("features", [])) != list(STEP_FEATURES):
            raise ValueError(f"step artifact features {data.get('features')} differ from {list(STEP_FEATURES)}")
        return cls(entries=[StepEntry(**e) for e in data["entries"]], meta=_meta(data))


Artifact = OperatorArtifact | StepArtifact


def _envelope(kind: str, meta: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "kind": kind, "schema_version": SCHEMA_VERSION, **meta}


def _meta(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in ("sources", "split", "trained_with", "notes")}


def save_artifact(artifact: Artifact, path: Path) -> int:
    """Writes ``artifact`` as compact JSON; returns its size in bytes."""
    text = json.dumps(artifact.to_json(), separators=(",", ":"), sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    log.info("wrote %s artifact %s (%d bytes)", artifact.kind, path, len(text))
    return len(text)


_CACHE: dict[tuple[str, float], Artifact] = {}


def load_artifact(path: Path) -> Artifact:
    """Reads an artifact, checking format and schema version; cached per file version.

    Raises:
        ValueError: the file is not a cosim regression artifact of a known schema.
        OSError: the file cannot be read.
    """
    path = Path(path)
    key = (str(path.resolve()), path.stat().st_mtime)
    if key in _CACHE:
        return _CACHE[key]
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a cosim regression artifact (format={data.get('format')!r})")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path} has schema_version={data.get('schema_version')}; this cosim reads "
                         f"{SCHEMA_VERSION}; retrain with `cosim train regression`")
    kinds: dict[str, type[OperatorArtifact] | type[StepArtifact]] = {
        "operator": OperatorArtifact, "step": StepArtifact}
    if data.get("kind") not in kinds:
        raise ValueError(f"{path} has kind={data.get('kind')!r}; expected one of {sorted(kinds)}")
    artifact = kinds[data["kind"]].from_json(data)
    _CACHE[key] = artifact
    return artifact
