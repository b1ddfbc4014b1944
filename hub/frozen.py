"""The base of every config model: unknown keys are errors, and a parsed config never changes."""

from pydantic import BaseModel, ConfigDict


class FrozenModel(BaseModel):
    """A pydantic model with ``extra="forbid"`` and ``frozen=True`` (STYLE.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
