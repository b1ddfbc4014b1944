"""Regression runtime backend: step times fitted to real measurements (MIST §IV-A1, HERMES §III-E1).

``RegressionBackend`` serves two predictors behind the runtime contract: an
operator-level one composed from per-operator fits to Vidur's kernel
profiles, and a whole-step linear model fitted to measured engine steps.
``cosim train regression`` (see :mod:`.training`, :mod:`.report`) retrains
either kind; docs/regression.md describes the artifacts and the step CSV format.
"""

from .artifact import DEFAULT_ARTIFACTS, OperatorArtifact, StepArtifact, load_artifact, save_artifact
from .backend import OPTION_KEYS, RegressionBackend
from .matching import device_key

__all__ = [
    "DEFAULT_ARTIFACTS", "OPTION_KEYS", "OperatorArtifact", "RegressionBackend", "StepArtifact", "device_key",
    "load_artifact", "save_artifact",
]
