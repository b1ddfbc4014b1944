"""Whole-step predictor: a linear model of measured engine step times.

As MIST §IV-A1 does with vLLM steps, the step time of one (device, model,
TP) is regressed on a few batch features (:data:`STEP_FEATURES`): a constant,
the number of sequences, the new tokens with hinges at 256, 1024 and 4096
(a linear spline), whether any prefill is present, the prefill attention
work ``sum c_i (k_i + c_i / 2)`` and the KV tokens read by decodes.
Coefficients are fitted by non-negative least squares on relative error (so
no combination of features predicts a negative time) and stored in JSON;
prediction is a dot product.

Main names: :func:`step_features`, :func:`train_step_entries`, :class:`StepLinearModel`.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np
from scipy.optimize import nnls

from cosim.v1 import types_pb2 as pb

from .artifact import STEP_FEATURES, StepEntry
from .data import StepRecord

log = logging.getLogger(__name__)

NS_PER_MS = 1e6
# Training-range bounds recorded per entry; a batch beyond any is flagged.
RANGE_KEYS = ("num_seqs", "num_tokens", "max_context_tokens")


def is_decode(new: int, ctx: int, draft: int) -> bool:
    """A sequence that generates: one sampled token after a cached context, plus the ``draft``
    tokens of speculative decoding it verifies (StepBatch.draft_tokens). A verification reads the
    KV cache once, like a decode, whatever its token count."""
    return ctx > 0 and new - draft == 1


def step_features(new_tokens: list[int], context_tokens: list[int],
                  draft_tokens: list[int] | None = None) -> tuple[list[float], dict[str, float]]:
    """Feature vector (in :data:`STEP_FEATURES` order) and range values of one batch."""
    num_tokens = prefill_tokens = 0
    attn_work = kv_tokens = 0.0
    drafts = draft_tokens or [0] * len(new_tokens)
    for new, ctx, draft in zip(new_tokens, context_tokens, drafts):
        num_tokens += new
        if is_decode(new, ctx, draft):
            kv_tokens += ctx + draft
        else:
            prefill_tokens += new
            attn_work += new * (ctx + new / 2)
    num_seqs = len(new_tokens)
    # Hinges make time piecewise linear in tokens: flat while weight reads
    # dominate, then steeper once GEMMs turn compute bound.
    features = [1.0, float(num_seqs), float(num_tokens), max(num_tokens - 256.0, 0.0),
                max(num_tokens - 1024.0, 0.0), max(num_tokens - 4096.0, 0.0), float(prefill_tokens > 0),
                attn_work, kv_tokens]
    ranges = {"num_seqs": float(num_seqs), "num_tokens": float(num_tokens),
              "max_context_tokens": float(max(context_tokens) + max(new_tokens))}
    return features, ranges


def fit_coefficients(records: list[StepRecord]) -> np.ndarray:
    """Non-negative least squares on relative error; coefficients in ms per feature unit."""
    x = np.array([step_features(r.new_tokens, r.context_tokens)[0] for r in records])
    y = np.array([r.step_ms for r in records])
    scale = np.maximum(x.max(axis=0), 1e-12)  # column scaling keeps NNLS well conditioned
    w = 1.0 / y
    coef, _ = nnls((x / scale) * w[:, None], y * w)
    return np.asarray(coef / scale)


def train_step_entries(records: list[StepRecord]) -> list[StepEntry]:
    """One entry per (device, model, TP) present in ``records``."""
    groups: dict[tuple[str, str, int], list[StepRecord]] = defaultdict(list)
    for r in records:
        groups[(r.device, r.model, r.tp)].append(r)
    entries = []
    for (device, model, tp), rows in sorted(groups.items()):
        if len(rows) < len(STEP_FEATURES):
            log.warning("skipping %s/%s/TP%d: %d rows < %d features", device, model, tp, len(rows), len(STEP_FEATURES))
            continue
        coef = fit_coefficients(rows)
        ranges = {k: max(step_features(r.new_tokens, r.context_tokens)[1][k] for r in rows) for k in RANGE_KEYS}
        entries.append(StepEntry(device=device, model=model, tp=tp,
                                 coef_ms=[float(f"{c:.6g}") for c in coef], ranges=ranges))
    return entries


class StepLinearModel:
    """Times steps of one session from a whole-step entry."""

    def __init__(self, entry: StepEntry) -> None:
        self.entry = entry
        self.coef = list(entry.coef_ms)
        self.ranges = dict(entry.ranges)

    def predict_ms(self, new_tokens: list[int], context_tokens: list[int],
                   draft_tokens: list[int] | None = None) -> tuple[float, bool]:
        """Step time in ms and whether the batch lies outside the training range."""
        features, ranges = step_features(new_tokens, context_tokens, draft_tokens)
        ms = sum(c * f for c, f in zip(self.coef, features))
        out = any(ranges[k] > self.ranges[k] for k in RANGE_KEYS)
        return ms, out

    def predict(self, new_tokens: list[int], context_tokens: list[int],
                draft_tokens: list[int] | None = None) -> pb.StepTiming:
        """Timing of one step; the breakdown holds each feature's contribution (ns)."""
        features, ranges = step_features(new_tokens, context_tokens, draft_tokens)
        parts = [c * f * NS_PER_MS for c, f in zip(self.coef, features)]
        out = any(ranges[k] > self.ranges[k] for k in RANGE_KEYS)
        total = sum(parts)
        return pb.StepTiming(duration_ns=int(total), compute_ns=int(total - parts[0]), dispatch_ns=int(parts[0]),
                             breakdown=dict(zip(STEP_FEATURES, parts)), out_of_range=out)
