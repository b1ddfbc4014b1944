"""The step error a runtime backend declares for a session, and the scale of each edge of it.

A backend may answer OpenSession with a ``StepError``: the relative band ``[low, high]`` its step
durations may be off by (the roofline's fitted default: its cross-validated step MAPE). A
prediction interval (:mod:`cosim.hub.studies.intervals`) reruns a scenario with every step of such
a session scaled by ``1 + low``, and again by ``1 + high``.
"""

from __future__ import annotations

import math
from typing import Literal

from cosim.v1 import types_pb2 as pb

from ..errors import BackendError

Edge = Literal["low", "high"]
EDGES: tuple[Edge, Edge] = ("low", "high")


def checked_band(band: pb.StepError, *, backend: str) -> pb.StepError:
    """``band`` once it is a band: -1 < low <= 0 <= high, both finite.

    Raises:
        BackendError: the backend declared something else (naming it and the values).
    """
    low, high = band.low, band.high
    if not (math.isfinite(low) and math.isfinite(high) and -1 < low <= 0 <= high):
        raise BackendError(f"declared step_error low={low!r}, high={high!r}: a step error needs "
                           "-1 < low <= 0 <= high (relative to the step's duration)", backend=backend,
                           rpc="OpenSession")
    return band


def edge_scale(opened: pb.OpenSessionResponse, edge: Edge, *, backend: str) -> float:
    """What the session's step durations are multiplied by at ``edge`` of its declared step
    error: ``1 + low`` or ``1 + high``; 1 where the backend declares none.

    Raises:
        BackendError: the declared band is not one (:func:`checked_band`).
    """
    if not opened.HasField("step_error"):
        return 1.0
    band = checked_band(opened.step_error, backend=backend)
    return 1.0 + (band.low if edge == "low" else band.high)
