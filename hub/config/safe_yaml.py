"""YAML for text that may be hostile: a nesting-depth limit and a cap on alias expansion.

``yaml.safe_load`` builds nothing dangerous, but an alias bomb (a 723-byte
"billion laughs" of 9 levels) stands for 10^9 nodes that every later copy,
dump or protobuf conversion expands, and YAML nested a few hundred levels deep
ends in a RecursionError. :func:`load` refuses both while composing, before
any Python object is built:

- a document nested deeper than :data:`MAX_DEPTH` levels;
- aliases that would add more than :data:`MAX_ALIAS_NODES` nodes to the
  document once expanded (anchors used as intended, e.g. shared backend
  settings, add a few dozen).

Both raise :class:`YAMLLimitError`, a ``yaml.YAMLError`` with a mark, so
callers that report invalid YAML report these the same way. Every config
loader uses this module: ``cosim run``/``validate`` (:func:`cosim.hub.config.scenario.load_config`
and ``--set`` values), ``cosim submit`` and the hub (``RunRequest.config_yaml``).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_DEPTH = 64
MAX_ALIAS_NODES = 100_000


class YAMLLimitError(yaml.MarkedYAMLError):
    """A document exceeds :data:`MAX_DEPTH` or :data:`MAX_ALIAS_NODES`."""


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that counts nesting while composing (the composer recurses once per level)."""

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
                raise YAMLLimitError(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node: Node, sizes: dict[int, int]) -> int:
    """Nodes ``node`` stands for once every alias is expanded (memoized: aliases share node objects)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, SequenceNode):
        size += sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, MappingNode):
        size += sum(_expanded_size(key, sizes) + _expanded_size(value, sizes) for key, value in node.value)
    sizes[id(node)] = size
    return size


def check_node(node: Node) -> None:
    """Raises :class:`YAMLLimitError` if aliases expand ``node`` by more than :data:`MAX_ALIAS_NODES`."""
    sizes: dict[int, int] = {}
    expanded = _expanded_size(node, sizes)
    if expanded - len(sizes) > MAX_ALIAS_NODES:
        raise YAMLLimitError(problem=f"aliases expand this document to {expanded:,} nodes; at most "
                                     f"{MAX_ALIAS_NODES:,} may come from aliases (an alias bomb?)",
                             problem_mark=node.start_mark)


def load(text: str | bytes) -> Any:
    """The single YAML document in ``text``, as ``yaml.safe_load`` reads it, within the limits above.

    Raises:
        yaml.YAMLError: invalid YAML, or :class:`YAMLLimitError`.
    """
    loader = _LimitedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_node(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def describe(err: yaml.YAMLError) -> str:
    """What is wrong and where (``line L, column C: problem``), without quoting the text itself."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def nesting_depth(value: Any) -> int:
    """Levels of mappings and lists in ``value`` (0 for a scalar), counted without recursion, since it
    checks data that did not come through :func:`load` (e.g. after ``--set a.b.c...`` overrides)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            depth += 1
            deepest = max(deepest, depth)
            stack.extend((child, depth) for child in children)
    return deepest
