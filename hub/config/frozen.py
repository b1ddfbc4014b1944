"""The base of every config model: unknown keys are errors, and a parsed config never changes."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator


class FieldProblem(ValueError):
    """A problem of one field found by a model-level check: ``field`` names it, so that the error is
    located at the field (see ``cosim.hub.config.scenario``'s error paths), not at the model."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


class Problems(ValueError):
    """Cross-field problems of one model, each already located by its path (see :mod:`.loading`)."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{where}: {what}" for where, what in problems))
        self.problems = list(problems)


def _numeric(annotation: Any) -> bool:
    """Whether a field holds a number and never a boolean (``int``, ``float | None``, ...)."""
    if annotation in (int, float):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        members = set(get_args(annotation)) - {type(None)}
        return bool(members) and members <= {int, float}
    return False


class FrozenModel(BaseModel):
    """A pydantic model with ``extra="forbid"`` and ``frozen=True`` (STYLE.md).

    Floats are finite (``allow_inf_nan=False``): no time, rate or size of a scenario
    is meant to be infinite or NaN, and either would only fail later inside a run. A
    number is not a boolean either: pydantic would read ``count: true`` as 1.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                value = data.get(field.alias or name)
                if isinstance(value, bool) and _numeric(field.annotation):
                    raise FieldProblem(name, f"input should be a number, not a boolean, got {value!r}")
        return data
