"""Training both artifact kinds and measuring their held-out error.

``train_operator(root)`` fits the operator-level artifact from Vidur's
profiles under ``root`` (``shared/data``) and, where Splitwise whole-step
measurements exist, the per-step overhead term; ``train_step(paths)`` fits
the whole-step artifact from Splitwise's perf_model.csv or generic step CSVs.
Both return the artifact and an :class:`Evaluation` for the markdown report.

Every split is the fixed seeded one of :func:`data.holdout_mask`; held-out
rows never reach a fit, and the committed artifacts are the train-split fits,
so the report describes exactly what ships.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sklearn

from cosim.v1 import types_pb2 as pb

from . import data
from .artifact import AttentionEntry, OperatorArtifact, OperatorEntry, OverheadEntry, StepArtifact
from .curves import Table, fit_grid, fit_table
from .matching import build_operator_model
from .operator_model import overhead_features
from .step_model import StepLinearModel, train_step_entries

log = logging.getLogger(__name__)

# Splitwise model names and the shapes the operator tables are matched by.
SPLITWISE_MODELS = {"llama2-70b": pb.ModelSpec(
    name="meta-llama/Llama-2-70b-hf", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
    head_dim=128, intermediate_size=28672, vocab_size=32000, bytes_per_param=2, bytes_per_kv_element=2,
    gated_mlp=True)}
# Half the whole-step configurations calibrate the overhead term; the rest are held out.
OVERHEAD_HOLDOUT = 0.5


@dataclass
class ErrorRow:
    """Error of one group on held-out rows."""

    key: tuple[str, ...]
    num_rows: int
    mape: float
    p90_ape: float
    num_out_of_range: int = 0


@dataclass
class Evaluation:
    """What the report prints: error tables, by section title."""

    sections: dict[str, list[ErrorRow]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _errors(key: tuple[str, ...], predicted: np.ndarray, actual: np.ndarray, out: int = 0) -> ErrorRow:
    ape = np.abs(predicted - actual) / np.abs(actual)
    return ErrorRow(key, len(ape), float(np.mean(ape)), float(np.percentile(ape, 90)), out)


def _meta(sources: list[Path], notes: str) -> dict[str, object]:
    return {"sources": {p.name if p.parent.name == "data" else str(p.relative_to(p.parents[3])): data.file_digest(p)
                        for p in sources},
            "split": {"seed": data.SPLIT_SEED, "holdout_fraction": data.HOLDOUT_FRACTION},
            "trained_with": {"numpy": np.__version__, "scikit-learn": sklearn.__version__}, "notes": notes}


def _fit_operators(root: Path, ev: Evaluation) -> list[OperatorEntry]:
    rows, entries = [], []
    for prof in data.read_mlp_profiles(root):
        keys = [f"{prof.device}|{prof.model}|{prof.tp}|{i}" for i in range(len(prof.num_tokens))]
        held = data.holdout_mask(keys)
        # The ends stay in training, so held-out rows test interpolation.
        held[(prof.num_tokens == prof.num_tokens.min()) | (prof.num_tokens == prof.num_tokens.max())] = False
        y = np.column_stack([prof.times_ms[op] for op in data.OPERATORS])
        table = fit_table(prof.num_tokens[~held], y[~held], data.OPERATORS)
        predicted = table.evaluate(prof.num_tokens[held])
        for j, op in enumerate(data.OPERATORS):
            ok = ~np.isnan(y[held, j])
            if ok.any():
                rows.append(_errors((prof.device, prof.model, f"TP{prof.tp}", op), predicted[ok, j], y[held][ok, j]))
        entries.append(OperatorEntry(prof.device, prof.model, prof.tp, prof.shape, table))
    ev.sections["operators"] = rows
    return entries


def _fit_attention(root: Path, ev: Evaluation) -> list[AttentionEntry]:
    path = root / "vidur" / "legacy" / "profiling" / "a100" / "attention.csv"
    prof = data.read_attention_profile(path)
    grids, rows = {}, []
    for phase, arr in (("decode", prof.decode), ("prefill", prof.prefill)):
        held = data.holdout_mask([f"{phase}|{i}" for i in range(len(arr))])
        grid = fit_grid(arr[~held, 0], arr[~held, 1], arr[~held, 2])
        predicted = np.array([grid(x, z) for x, z in arr[held, :2]])
        rows.append(_errors((prof.device, f"{prof.n_q_head}q/{prof.n_kv_head}kv TP{prof.tp}", phase),
                            predicted, arr[held, 2]))
        grids[phase] = grid
    ev.sections["attention"] = rows
    return [AttentionEntry(prof.device, prof.n_q_head // prof.tp, prof.n_kv_head // prof.tp,
                           prof.n_embd // prof.n_q_head, f"vidur legacy a100 attention.csv "
                           f"({prof.n_q_head}q/{prof.n_kv_head}kv, TP{prof.tp})", grids["decode"], grids["prefill"])]


def _fit_all_reduce(root: Path, ev: Evaluation) -> dict[tuple[str, int], Table]:
    tables, rows = {}, []
    for (device, workers), arr in data.read_all_reduce(root).items():
        held = data.holdout_mask([f"ar|{device}|{workers}|{i}" for i in range(len(arr))])
        held[(arr[:, 0] == arr[:, 0].min()) | (arr[:, 0] == arr[:, 0].max())] = False
        table = fit_table(arr[~held, 0], arr[~held, 1:], ("all_reduce",))
        rows.append(_errors((device, f"TP{workers}", "all_reduce"), table.evaluate(arr[held, 0])[:, 0], arr[held, 1]))
        tables[(device, workers)] = table
    ev.sections["all_reduce"] = rows
    return tables


def _spec(model: pb.ModelSpec, device: str, tp: int) -> pb.SessionSpec:
    return pb.SessionSpec(model=model, hardware=pb.HardwareSpec(device=device, count=tp),
                          parallelism=pb.Parallelism(tensor=tp))


def _fit_overhead(root: Path, artifact: OperatorArtifact, ev: Evaluation) -> None:
    """Fits overhead on half of the Splitwise configurations; reports the other half."""
    records = [r for r in data.read_splitwise(root / "splitwise" / "perf_model.csv")
               if r.model in SPLITWISE_MODELS and r.device in {e.device for e in artifact.operators}]
    held = data.holdout_mask([r.config.rsplit("|", 1)[0] for r in records], fraction=OVERHEAD_HOLDOUT)
    groups: dict[tuple[str, int], list[tuple[data.StepRecord, bool]]] = defaultdict(list)
    for r, h in zip(records, held):
        groups[(r.device, r.tp)].append((r, bool(h)))
    results: dict[tuple[str, str, str], list[tuple[float, float, bool]]] = defaultdict(list)
    for (device, tp), items in sorted(groups.items()):
        model = build_operator_model(artifact, _spec(SPLITWISE_MODELS[items[0][0].model], device, tp))
        x, resid, kept = [], [], []
        for r, h in items:
            t = model.predict(r.new_tokens, r.context_tokens)
            kept.append((r, h, t.duration_ns / 1e6, t.out_of_range))
            if not h and not t.out_of_range:
                x.append(overhead_features(r.new_tokens))
                resid.append(r.step_ms - t.duration_ns / 1e6)
        # Relative-error weighting, as for every other fit.
        w = 1.0 / np.array([r.step_ms for r, h, _, o in kept if not h and not o])
        coef, *_ = np.linalg.lstsq(np.array(x) * w[:, None], np.array(resid) * w, rcond=None)
        entry = OverheadEntry(device, tp, [float(f"{c:.6g}") for c in coef],
                              source="splitwise perf_model.csv llama2-70b, calibration half")
        artifact.overhead.append(entry)
        for r, h, ms, out in kept:
            if h:
                phase = r.config.rsplit("|", 1)[1]
                over = float(np.dot(coef, overhead_features(r.new_tokens)))
                results[(device, f"TP{tp}", phase)].append((ms + over, r.step_ms, out))
    rows = []
    for key, vals in sorted(results.items()):
        arr = np.array([(p, a) for p, a, o in vals if not o])
        if len(arr):
            rows.append(_errors(key, arr[:, 0], arr[:, 1], sum(o for *_, o in vals)))
    ev.sections["composed"] = rows


def train_operator(root: Path) -> tuple[OperatorArtifact, Evaluation]:
    """Fits the operator-level artifact from the data folder ``root``.

    Raises:
        FileNotFoundError: a required file is missing under ``root``.
    """
    root = Path(root)
    ev = Evaluation()
    sources = sorted((root / "vidur" / "profiling").glob("compute/*/*/*/mlp.csv"))
    if not sources:
        raise FileNotFoundError(f"no vidur/profiling/compute/*/*/*/mlp.csv under {root}")
    artifact = OperatorArtifact(
        operators=_fit_operators(root, ev), attention=_fit_attention(root, ev),
        all_reduce=_fit_all_reduce(root, ev), overhead=[])
    if (root / "splitwise" / "perf_model.csv").exists():
        _fit_overhead(root, artifact, ev)
        sources.append(root / "splitwise" / "perf_model.csv")
    else:
        ev.notes.append("splitwise/perf_model.csv absent: no per-step overhead term fitted")
    sources += [root / "vidur" / "legacy" / "profiling" / "a100" / "attention.csv"]
    sources += sorted((root / "vidur" / "profiling" / "network").glob("*_dgx/all_reduce.csv"))
    artifact.meta = _meta(sources, "operator tables, attention grids and all-reduce tables are fits on the "
                                   "train split; overhead on the calibration half of Splitwise configurations")
    return artifact, ev


def load_step_records(paths: list[Path]) -> list[data.StepRecord]:
    """Reads Splitwise's perf_model.csv (by its columns) or generic step CSVs."""
    records: list[data.StepRecord] = []
    for path in paths:
        with Path(path).open() as fh:
            header = fh.readline()
        reader = data.read_splitwise if "prompt_time" in header else data.read_step_csv
        records += reader(Path(path))
    return records


def train_step(paths: list[Path]) -> tuple[StepArtifact, Evaluation]:
    """Fits the whole-step artifact on the train split of step records from ``paths``."""
    records = load_step_records(paths)
    if not records:
        raise ValueError(f"no step records in {[str(p) for p in paths]}")
    held = data.holdout_mask([r.config.rsplit("|", 1)[0] for r in records])
    train = [r for r, h in zip(records, held) if not h]
    entries = train_step_entries(train)
    models = {(e.device, e.model, e.tp): StepLinearModel(e) for e in entries}
    results: dict[tuple[str, ...], list[tuple[float, float, bool]]] = defaultdict(list)
    for r, h in zip(records, held):
        model = models.get((r.device, r.model, r.tp))
        if h and model is not None:
            ms, out = model.predict_ms(r.new_tokens, r.context_tokens)
            phase = r.config.rsplit("|", 1)[1] if r.config.endswith(("|prefill", "|decode")) else "step"
            results[(r.device, r.model, f"TP{r.tp}", phase)].append((ms, r.step_ms, out))
    ev = Evaluation()
    ev.sections["step"] = [_errors(k, np.array([p for p, _, _ in v]), np.array([a for _, a, _ in v]),
                                   sum(o for *_, o in v)) for k, v in sorted(results.items())]
    artifact = StepArtifact(entries=entries)
    artifact.meta = {"sources": {Path(p).name: data.file_digest(Path(p)) for p in paths},
                     "split": {"seed": data.SPLIT_SEED, "holdout_fraction": data.HOLDOUT_FRACTION},
                     "trained_with": {"numpy": np.__version__, "scikit-learn": sklearn.__version__},
                     "notes": "linear coefficients fitted on the train split of configurations"}
    return artifact, ev
