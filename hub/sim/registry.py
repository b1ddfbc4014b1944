"""Making the class a scenario names, from one of the tables of :mod:`cosim.hub.config.choices`."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def chosen(table: Mapping[str, str], name: str, base: type) -> type[Any]:
    """The class ``table`` names ``name`` by (``package.module:Class``), a subclass of ``base``.

    Raises:
        KeyError: ``name`` is not in the table (config validation refuses such a name first).
        TypeError: the table names something other than a subclass of ``base``.
    """
    module, _, attribute = table[name].partition(":")
    found = getattr(importlib.import_module(module), attribute)
    if not (isinstance(found, type) and issubclass(found, base)):
        raise TypeError(f"{table[name]} (the class of {name!r}) is not a {base.__name__}")
    return found
