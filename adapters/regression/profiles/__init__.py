"""LLMServingSim v2 profile bundles as a regression-backend predictor.

``load_bundle`` reads a bundle's tables for one TP degree; ``ProfileStepModel``
composes them into step times (see :mod:`.step_model`). The regression
backend uses them when a session sets ``profile_bundle``.
"""

from .bundle import BundleError, ProfileTables, load_bundle
from .session import PROFILE_OPTION_KEYS, open_profile_model
from .step_model import ModelShape, ProfileOptions, ProfileStepModel

__all__ = ["BundleError", "ModelShape", "PROFILE_OPTION_KEYS", "ProfileOptions", "ProfileStepModel",
           "ProfileTables", "load_bundle", "open_profile_model"]
