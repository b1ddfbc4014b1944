"""Reading a scenario: YAML in, ``--set`` overrides applied, every problem reported at once.

:func:`load_config` reads a file and :func:`parse_config` a mapping; each problem is located by
its path (``clients[1].scheduler.chunk_size: must be > 0, got -5``) and all of them are raised
together as one :class:`ScenarioProblems`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import ScenarioError
from . import safe_yaml
from .frozen import FieldProblem, Problems
from .inference_perf import inline_profile
from .presets.user import inline_files
from .scenario import ScenarioConfig


class ScenarioProblems(ScenarioError):
    """Every problem found in one scenario, each a ScenarioError located by its own path.

    Reads as one error (``source: path: message``, or one problem per indented
    line); ``problems`` keeps them apart for ``cosim validate``.
    """

    def __init__(self, source: str, problems: Sequence[ScenarioError]) -> None:
        self.source, self.problems = source, list(problems)
        if len(self.problems) == 1:
            only = self.problems[0]
            where, message = (source, str(only)) if source else (only.where, only.message)
        else:
            where = source or f"{len(self.problems)} problems"
            message = "\n  " + "\n  ".join(map(str, self.problems))
        super().__init__(where, message)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its parts when it crosses a process pool (goodput's workers).
        return type(self), (self.source, self.problems)


def _format_location(loc: Sequence[int | str], data: Any = None, *, missing: bool = False) -> str:
    """The config path of a pydantic error location, without pydantic's own parts: validator
    names, union tags (``poisson``, ``lognormal``) and the member types of a scalar union
    (``float``, ``int``): only the keys and indexes the user wrote (``data``) are kept."""
    text, node = "", data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int):
            text += f"[{part}]"
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        elif part.startswith(("function-after", "function-before")) or part in ("literal", "none"):
            continue
        elif data is not None and (not isinstance(node, Mapping) or part not in node) and not \
                (last and missing and isinstance(node, Mapping)):
            continue  # a tag of pydantic's, not a key the user wrote (a missing key is kept)
        else:
            text += f".{part}" if text else part
            node = node.get(part) if isinstance(node, Mapping) else None
    return text


def _pydantic_problems(err: ValidationError, data: Any = None) -> list[ScenarioError]:
    problems: list[ScenarioError] = []
    seen: set[str] = set()
    for item in err.errors():
        cause = item.get("ctx", {}).get("error")
        if isinstance(cause, Problems):
            problems.extend(ScenarioError(where, what) for where, what in cause.problems)
            continue  # cross-field checks already name their paths
        where = _format_location(item["loc"], data, missing=item["type"] == "missing")
        if isinstance(cause, FieldProblem):  # a model-level check of one field: located at the field
            problems.append(ScenarioError(f"{where}.{cause.field}" if where else cause.field, cause.message))
            continue
        message = str(item["msg"]).removeprefix("Value error, ")
        got = item.get("input")
        shown = "" if item["type"] in ("missing", "extra_forbidden") or isinstance(got, dict) else f", got {got!r}"
        if item["type"] in ("finite_number", "bool_type") and where in seen:
            continue  # one problem per place: a scalar union (float | int | bool) fails in each member
        seen.add(where)
        problems.append(ScenarioError(where, f"{message.lower()}{shown}"))
    return problems


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Applies ``a.b[0].c=value`` (value parsed as YAML) to ``data`` in place."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ScenarioError(f"--set {assignment}", "expected key=value, e.g. clients[0].scheduler.max_num_seqs=64")
    parts = [p for p in re.split(r"\.|\[(\d+)\]", key) if p]
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        index: int | str = int(part) if part.isdigit() else part
        if isinstance(node, list):
            if not isinstance(index, int) or index >= len(node):
                raise ScenarioError(f"--set {key}", f"{part!r} is not an index of a list of {len(node)}")
        elif isinstance(node, dict):
            if not last and index not in node:
                node[index] = {}
        else:
            raise ScenarioError(f"--set {key}", f"cannot set {part!r} inside a {type(node).__name__}")
        if last:
            try:
                node[index] = safe_yaml.load(raw)
            except yaml.YAMLError as err:
                raise ScenarioError(f"--set {key}", f"not valid YAML: {safe_yaml.describe(err)}") from None
        else:
            node = node[index]


def _yaml_copy(value: Any) -> Any:
    """A deep copy of a YAML-like value as a YAML round trip gives it (mappings as dicts with sorted
    keys, sequences as lists), without the round trip's cost (a search parses a config per run)."""
    if isinstance(value, Mapping):
        items = [(key, _yaml_copy(item)) for key, item in value.items()]
        with contextlib.suppress(TypeError):  # keys of mixed types keep their order, as yaml.safe_dump's
            items.sort(key=lambda pair: pair[0])
        return dict(items)
    if isinstance(value, list | tuple):
        return [_yaml_copy(item) for item in value]
    return value


def parse_config(data: Mapping[str, Any], *, overrides: Sequence[str] = (), source: str = "config",
                 folder: Path | None = None) -> ScenarioConfig:
    """Validates a config mapping (after overrides), the files it names for presets read in (from
    ``folder``, default the working directory, when relative; see :mod:`cosim.hub.config.presets.user`).

    Raises:
        ScenarioError: a bad ``--set``.
        ScenarioProblems: listing every problem of the config, each with its path.
    """
    copied: dict[str, Any] = _yaml_copy(data)  # a deep copy the overrides may change
    for assignment in overrides:
        apply_override(copied, assignment)
    root = Path.cwd() if folder is None else folder
    folder_of_files = root / copied["base_dir"] if isinstance(copied.get("base_dir"), str) else root
    files = inline_files(copied, folder_of_files) + inline_profile(copied, folder_of_files)
    try:
        config = ScenarioConfig.model_validate(copied)
    except ValidationError as err:
        # A file that could not be read leaves its path where the content goes: said once, by the file's problem.
        named = {where for where, _ in files}
        problems = [p for p in _pydantic_problems(err, copied) if p.where not in named]
        raise ScenarioProblems(source, [ScenarioError(*p) for p in files] + problems) from None
    if files:
        raise ScenarioProblems(source, [ScenarioError(*p) for p in files])
    return config


def load_config(path: str | Path, *, overrides: Sequence[str] = ()) -> tuple[ScenarioConfig, Path]:
    """Reads and validates a YAML scenario; returns it and the folder relative paths resolve against."""
    path = Path(path)
    try:
        data = safe_yaml.load(path.read_text())
    except OSError as err:
        raise ScenarioError(str(path), f"cannot read config: {err.strerror}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ScenarioError(where, f"not valid YAML: {getattr(err, 'problem', err)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(str(path), "a config is a YAML mapping with keys models, hardware, backends, clients, ...")
    config = parse_config(data, overrides=overrides, source=str(path), folder=path.resolve().parent)
    return config, scenario_folder(config, path.resolve().parent)


def scenario_folder(config: ScenarioConfig, default: Path) -> Path:
    """The folder relative paths of ``config`` resolve against: its ``base_dir`` (itself relative to
    ``default``), else ``default`` (the config file's folder)."""
    return default / config.base_dir if config.base_dir is not None else default
