"""Writing a hub's run folder (``GetReport`` files) locally, inside the chosen folder only.

The file names come from the hub, which ``cosim submit`` (and any other client)
need not trust: a name that is absolute, has a ``..`` part, or would land
outside the folder (through a symbolic link already there) is refused, and
then nothing is written; so is a run id that could not be a folder's name.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath

from ..errors import ScenarioError


def report_targets(folder: Path, names: Collection[str]) -> dict[str, Path]:
    """Where each of ``names`` goes under ``folder``.

    Raises:
        ScenarioError: naming the first name that is empty, absolute, has a ``..`` part or leaves ``folder``.
    """
    root = folder.resolve()
    targets = {}
    for name in sorted(names):
        parts = [p for p in re.split(r"[/\\]", name) if p not in ("", ".")]
        if not parts or PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() \
                or name.startswith("\\") or ".." in parts or "\0" in name:
            raise ScenarioError(f"GetReport file {name!r}", "is not a relative path inside the run folder; "
                                                             "nothing was written")
        target = root.joinpath(*parts)
        if not target.resolve().is_relative_to(root):
            raise ScenarioError(f"GetReport file {name!r}", f"would be written outside {folder} (through a "
                                                             f"symbolic link); nothing was written")
        targets[name] = target
    return targets


_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


def check_run_id(run_id: str) -> str:
    """``run_id`` if it can name a local folder (``runs/RUN_ID``): one plain path component.

    Raises:
        ScenarioError: it is empty, or has separators, ``..`` or other characters a hub's run ids lack.
    """
    if not _PLAIN.match(run_id) or ".." in run_id:
        raise ScenarioError(f"run id {run_id!r}", "is not a plain folder name; give the run folder with -o")
    return run_id


def write_report(folder: Path, files: Mapping[str, bytes]) -> None:
    """Writes ``files`` (name -> content, as GetReport returns them) under ``folder``, or none of them.

    Raises:
        ScenarioError: a name points outside ``folder`` (see :func:`report_targets`).
    """
    for name, target in report_targets(folder, list(files)).items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(files[name])
