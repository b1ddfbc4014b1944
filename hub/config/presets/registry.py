"""Name lookup shared by the model and device presets.

:class:`PresetRegistry` maps canonical names and aliases (case-insensitive)
to preset objects; :class:`UnknownPreset` is raised for a name it does not
know and lists the closest known names.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar


class UnknownPreset(KeyError, ValueError):
    """No preset has this name. A KeyError (a failed lookup) and a ValueError
    (bad user input) at once, so either ``except`` catches it.

    Attributes:
        kind: "model", "device" or "dtype".
        name: the name asked for.
        suggestions: the closest known names, best first.
    """

    def __init__(self, kind: str, name: str, suggestions: list[str], known: list[str]) -> None:
        super().__init__(kind, name)
        self.kind, self.name, self.suggestions, self.known = kind, name, suggestions, known

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the arguments; give a readable line.
        if self.suggestions:
            return f"unknown {self.kind} {self.name!r}; did you mean {', '.join(map(repr, self.suggestions))}?"
        return f"unknown {self.kind} {self.name!r}; known: {', '.join(self.known)}"


class Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...


P = TypeVar("P", bound=Named)


class PresetRegistry(Generic[P]):
    """Presets of one kind, found by name or alias, ignoring case.

    The part of a name after the last "/" (``Meta-Llama-3-8B`` for
    ``meta-llama/Meta-Llama-3-8B``) is an alias too, unless two presets share it.
    """

    def __init__(self, kind: str, presets: Iterable[P]) -> None:
        self.kind = kind
        self._presets: list[P] = list(presets)
        self._index: dict[str, P] = {}
        for preset in self._presets:
            for key in (preset.name, *preset.aliases):
                self._add(key, preset)
        for preset in self._presets:
            short = preset.name.rsplit("/", 1)[-1]
            self._index.setdefault(short.lower(), preset)

    def _add(self, key: str, preset: P) -> None:
        other = self._index.get(key.lower())
        if other is not None and other is not preset:
            raise ValueError(f"{self.kind} name {key!r} is used by both {other.name!r} and {preset.name!r}")
        self._index[key.lower()] = preset

    def get(self, name: str) -> P:
        """The preset called ``name`` (or an alias of it).

        Raises:
            UnknownPreset: no such name; the message lists close matches.
        """
        found = self._index.get(name.strip().lower())
        if found is None:
            raise unknown(self.kind, name, self._display_names(), self.names())
        return found

    def presets(self) -> list[P]:
        """Every preset, in file order."""
        return list(self._presets)

    def names(self) -> list[str]:
        """Canonical names, in file order."""
        return [p.name for p in self._presets]

    def _display_names(self) -> dict[str, str]:
        """Lower-case key -> the spelling to show, for every name and alias."""
        shown: dict[str, str] = {}
        for preset in self._presets:
            for key in (preset.name, *preset.aliases):
                shown[key.lower()] = key
        return shown


def unknown(kind: str, name: str, candidates: dict[str, str], known: list[str]) -> UnknownPreset:
    """Build an UnknownPreset whose suggestions are the closest candidates.

    Args:
        kind: what was looked up, for the message.
        name: the name that was not found.
        candidates: lower-case key -> name as it should be shown (names and aliases).
        known: canonical names, listed when nothing is close.
    """
    close = difflib.get_close_matches(name.strip().lower(), list(candidates), n=3, cutoff=0.6)
    return UnknownPreset(kind, name, [candidates[c] for c in close], known)
