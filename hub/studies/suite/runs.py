"""The index of the real serving runs cosim ships (``hub/studies/validation_runs/index.yaml``).

Each line of the index names a run: its ``id``, its ``kind`` (``blis-h100``: an experiment of the
llm-d benchmark, :mod:`.blis`; ``llmservingsim``: a vLLM run of LLMServingSim's validation,
:mod:`.llmss`), its data ``file`` and, for an LLMServingSim run with outcomes, its ``measured``
requests. ``fast: true`` puts a run in ``--fast``'s subset (a blis experiment there runs with its
stages shortened by ``fast_scale``). Adding a run is a data file and a line here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ...config import safe_yaml
from ...errors import ScenarioError

#: The shipped runs and their index.
DATA_DIR = Path(__file__).resolve().parent.parent / "validation_runs"
INDEX = DATA_DIR / "index.yaml"

RunKind = Literal["blis-h100", "llmservingsim"]
KINDS: tuple[RunKind, ...] = ("blis-h100", "llmservingsim")
#: How much --fast shortens a blis experiment's stages when its line does not say.
DEFAULT_FAST_SCALE = 0.02


@dataclass(frozen=True)
class RunEntry:
    """One line of the index, its paths resolved."""

    id: str
    kind: RunKind
    file: Path
    measured: Path | None = None
    fast: bool = False
    fast_scale: float = DEFAULT_FAST_SCALE


def load_index(path: Path = INDEX) -> list[RunEntry]:
    """The runs of an index file, in its order.

    Raises:
        ScenarioError: an unreadable index, a line without id, kind or file, an unknown kind, a
            repeated id, or a file it names that does not exist (named by ``<index>:runs[i]``).
    """
    try:
        content = safe_yaml.load(path.read_text())
    except OSError as err:
        raise ScenarioError(str(path), f"cannot read the run index: {err.strerror}") from None
    lines = content.get("runs") if isinstance(content, dict) else None
    if not isinstance(lines, list):
        raise ScenarioError(str(path), "expected a mapping with a runs: list")
    entries: list[RunEntry] = []
    for i, line in enumerate(lines):
        where = f"{path}:runs[{i}]"
        entries.append(_entry(line, path.parent, where))
        if entries[-1].id in {e.id for e in entries[:-1]}:
            raise ScenarioError(f"{where}.id", f"{entries[-1].id!r} is listed twice")
    return entries


def _entry(line: Any, root: Path, where: str) -> RunEntry:
    if not isinstance(line, dict) or not {"id", "kind", "file"} <= set(line):
        raise ScenarioError(where, f"a run needs id, kind and file, got {line!r}")
    unknown = set(line) - {"id", "kind", "file", "measured", "fast", "fast_scale"}
    if unknown:
        raise ScenarioError(where, f"unknown keys {sorted(unknown)}")
    if line["kind"] not in KINDS:
        raise ScenarioError(f"{where}.kind", f"{line['kind']!r} is not one of {list(KINDS)}")
    paths = {}
    for key in ("file", "measured"):
        if line.get(key) is not None:
            paths[key] = root / str(line[key])
            if not paths[key].is_file():
                raise ScenarioError(f"{where}.{key}", f"{paths[key]} does not exist")
    scale = line.get("fast_scale", DEFAULT_FAST_SCALE)
    if not isinstance(scale, int | float) or not 0 < scale <= 1:
        raise ScenarioError(f"{where}.fast_scale", f"must be in (0, 1], got {scale!r}")
    return RunEntry(id=str(line["id"]), kind=line["kind"], file=paths["file"], measured=paths.get("measured"),
                    fast=bool(line.get("fast", False)), fast_scale=float(scale))
