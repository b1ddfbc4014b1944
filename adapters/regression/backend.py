"""The regression runtime backend: step times from models fitted to measurements.

Two predictors, chosen per session by the artifact it loads:

- operator-level (default): per (device, model, TP) operator tables trained on
  Vidur's kernel profiles, measured (or roofline-scaled) attention, measured
  all-reduces and engine-overhead terms (host-bound floor, per-step and
  per-sequence time, kernel-speed factor) fitted on whole steps;
- whole-step: a linear model trained on measured engine steps (Splitwise's
  perf_model.csv, or a lab's own traces in the generic CSV format).

Session options (``SessionSpec.options``):

- ``artifact``: path of an artifact JSON written by ``cosim train regression``;
  default: the committed ``artifacts/operator.json``.
- ``kind``: ``operator`` or ``step``, to pick a committed default artifact
  without naming a file (ignored when ``artifact`` is given).
- ``profile_bundle``: path of an LLMServingSim v2 profile bundle; selects the
  profile-bundle predictor (:mod:`.profiles`) instead of an artifact, with its
  own options (``profile_tp``, ``link_*`` (default: the device's link), ``skew``);
  it times GPU kernels only (host time: ``scheduler.host_time`` in the hub).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from cosim.adapters.sdk import InvalidArgument, PlainBatch, RuntimeBackend, Session
from cosim.v1 import types_pb2 as pb

from .artifact import DEFAULT_ARTIFACTS, OperatorArtifact, load_artifact
from .matching import build_operator_model, find_step_entry
from .operator_model import OperatorStepModel
from .profiles import PROFILE_OPTION_KEYS, ProfileStepModel, open_profile_model
from .step_model import StepLinearModel

log = logging.getLogger(__name__)

OPTION_KEYS = ("artifact", "kind", *PROFILE_OPTION_KEYS)


def _options(spec: pb.SessionSpec) -> dict[str, Any]:
    options = {key: value for key, value in spec.options.items()}
    unknown = sorted(set(options) - set(OPTION_KEYS))
    if unknown:
        raise InvalidArgument(f"spec.options.{unknown[0]}", options[unknown[0]],
                              f"is not an option of backend 'regression'; known: {list(OPTION_KEYS)}")
    return options


def _artifact_path(options: dict[str, Any]) -> Path:
    if "artifact" in options:
        return Path(str(options["artifact"])).expanduser()
    kind = str(options.get("kind", "operator"))
    if kind not in DEFAULT_ARTIFACTS:
        raise InvalidArgument("spec.options.kind", kind, f"must be one of {sorted(DEFAULT_ARTIFACTS)}")
    return DEFAULT_ARTIFACTS[kind]


class RegressionBackend(RuntimeBackend):
    """Empirical step times from regression artifacts (see module docstring)."""

    name = "regression"
    version = "0.1.0"
    fidelity = pb.FIDELITY_EMPIRICAL
    description = "step times from fits to measured kernels (Vidur) or engine steps (Splitwise)"
    # bucketed_cache_safe: contexts enter through interpolated grids, smooth between knots.
    capabilities: ClassVar[tuple[str, ...]] = ("mixed_batches", "out_of_range_flag", "bucketed_cache_safe")
    file_options: ClassVar[tuple[str, ...]] = ("artifact", "profile_bundle")
    plain_batches = True

    def open_session(self, spec: pb.SessionSpec) -> OperatorStepModel | StepLinearModel | ProfileStepModel:
        """Loads the session's artifact and picks its entry.

        Raises:
            InvalidArgument: bad option, unreadable artifact, or no trained entry
                for the device, model or TP (the message lists what is known).
        """
        options = _options(spec)
        if "profile_bundle" in options:
            return open_profile_model(spec, options)
        path = _artifact_path(options)
        try:
            artifact = load_artifact(path)
        except (OSError, ValueError) as err:
            raise InvalidArgument("spec.options.artifact", str(path), f"cannot be loaded: {err}") from err
        if isinstance(artifact, OperatorArtifact):
            model: OperatorStepModel | StepLinearModel = build_operator_model(artifact, spec)
        else:
            model = StepLinearModel(find_step_entry(artifact, spec))
        log.info("regression session for %s on %s TP%d uses %s (%s)", spec.model.name, spec.hardware.device,
                 spec.parallelism.tensor or 1, path.name, artifact.kind)
        return model

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch | PlainBatch) -> pb.StepTiming:
        """Timing of one step; ``out_of_range`` is set outside the training data."""
        model: OperatorStepModel | StepLinearModel | ProfileStepModel = session.state
        if isinstance(model, ProfileStepModel):  # the model with MoE and EP: DP lock-step pads its tokens
            return model.predict(list(batch.new_tokens), list(batch.context_tokens),
                                 padded_tokens=max(batch.dp_rank_tokens, default=0))
        return model.predict(list(batch.new_tokens), list(batch.context_tokens), list(batch.draft_tokens) or None)
