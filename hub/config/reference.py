"""docs/config.md, the reference of every config key, generated from the pydantic models.

    python -m cosim.hub.config.reference            # writes docs/config.md
    python -m cosim.hub.config.reference --check    # exits 1 when docs/config.md is not current

Each section is a model (its docstring heads the section); each row a field, with its type, its
default and its description. A test keeps the file current, so a field's description is written
once, beside the field, and the reference follows it.
"""

from __future__ import annotations

import argparse
import enum
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .scenario import ScenarioConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"

HEADER = """# Config reference

Every key of a scenario config, section by section, generated from the config models
(`python -m cosim.hub.config.reference`; a test keeps it current). A path like
`clients[].scheduler` is a section inside each item of a list; `models.<name>` one entry of a map.
Every number is also bounded as `hub/config/bounds.py` says (README, "What `cosim validate` refuses").
"""


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The config models an annotation holds (through Optional, lists, dicts and unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found += [m for m in _models(arg) if m not in found]
    return found


def _type_text(annotation: Any) -> str:
    """A short reading of a type: ``int``, ``"a" | "b"``, ``list of X``, ``map of X``."""
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{value}`" for value in get_args(annotation))
    if origin is typing.Annotated:
        return _type_text(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        parts = [_type_text(a) for a in get_args(annotation) if a is not type(None)]
        text = " \\| ".join(dict.fromkeys(parts))
        return f"{text} \\| null" if type(None) in get_args(annotation) else text
    if origin in (list, tuple):
        return f"list of {_type_text(get_args(annotation)[0])}"
    if origin is dict:
        return f"map of {_type_text(get_args(annotation)[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


def _default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "(section defaults)" if _models(field.annotation) else "(empty)"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{field.default!r}`" if field.default is not None else "null"


def _summary(model: type[BaseModel]) -> str:
    doc = (model.__doc__ or "").strip()
    return doc.split("\n\n")[0].replace("\n", " ") if doc else ""


def _child_path(path: str, name: str, annotation: Any) -> str:
    for arg in (annotation, *get_args(annotation)):
        if get_origin(arg) in (list, tuple):
            return f"{path}{name}[]"
        if get_origin(arg) is dict:
            return f"{path}{name}.<name>"
    return f"{path}{name}"


def _variant(model: type[BaseModel], siblings: list[type[BaseModel]]) -> str:
    """`` (process: poisson)``: the discriminating key of one model of a union, or "" for a lone model."""
    if len(siblings) < 2:
        return ""
    for name, field in model.model_fields.items():
        values = get_args(field.annotation) if get_origin(field.annotation) is Literal else ()
        if len(values) == 1 and all(name in other.model_fields for other in siblings):
            return f" ({name}: {values[0]})"
    return f" ({model.__name__})"


def sections(model: type[BaseModel], path: str = "") -> list[tuple[str, type[BaseModel]]]:
    """(path, model) of the scenario and every section below it, depth first, each model once."""
    found = [(path or "(top level)", model)]
    seen = {model}
    for name, field in model.model_fields.items():
        variants = _models(field.annotation)
        for child in variants:
            child_path = _child_path(f"{path}." if path else "", name, field.annotation) + _variant(child, variants)
            if child in seen:
                continue
            seen.add(child)
            for entry in sections(child, child_path):
                if entry[1] not in {m for _, m in found}:
                    found.append(entry)
    return found


def render() -> str:
    """The whole of docs/config.md."""
    out = [HEADER]
    for path, model in sections(ScenarioConfig):
        out.append(f"\n## `{path}`\n")
        summary = _summary(model)
        if summary:
            out.append(f"{summary}\n")
        out.append("\n| key | type | default | what |\n| --- | --- | --- | --- |\n")
        for name, field in model.model_fields.items():
            key = field.alias or name
            description = (field.description or _summary(_models(field.annotation)[0])
                           if field.description or _models(field.annotation) else "")
            description = description.replace("|", "\\|").replace("\n", " ")
            out.append(f"| `{key}` | {_type_text(field.annotation)} | {_default_text(field)} | {description} |\n")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/config.md from the config models.")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/config.md is not current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is not current: run python -m cosim.hub.config.reference", file=sys.stderr)  # noqa: T201
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
