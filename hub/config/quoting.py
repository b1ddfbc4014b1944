"""Whether an error may quote what a file contains.

``cosim run`` quotes the offending value of a bad trace row (``input=abc is
not a number``): the file is the user's own. A hub runs configs it was sent,
and its errors go back to whoever sent them, so there a file's contents are
quoted only when the submitter uploaded that file; an error about a file read
from the hub's ``--data-dir`` names the file, line and column, never the text.
The hub sets the policy for the thread that runs a submission
(:func:`quoting_only_under`); readers of files call :func:`quoted`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

WITHHELD = "(value withheld: the hub does not quote its own files)"

# None: quote everything (local runs). A tuple: quote only files under these folders.
_QUOTABLE: contextvars.ContextVar[tuple[Path, ...] | None] = contextvars.ContextVar("cosim_quotable", default=None)


@contextmanager
def quoting_only_under(folders: Sequence[Path]) -> Iterator[None]:
    """Within the block (this thread or task), errors quote only files under ``folders``."""
    token = _QUOTABLE.set(tuple(Path(f).resolve() for f in folders))
    try:
        yield
    finally:
        _QUOTABLE.reset(token)


def may_quote(path: str | Path) -> bool:
    """Whether an error may show contents of the file at ``path``."""
    folders = _QUOTABLE.get()
    if folders is None:
        return True
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(folder) for folder in folders)


def quoted(value: Any, path: str | Path) -> str:
    """``repr(value)`` if errors may quote the file at ``path``, else a placeholder saying it is withheld."""
    return repr(value) if may_quote(path) else WITHHELD
