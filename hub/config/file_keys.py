"""The config keys that name a file or a folder: one list, for whoever must find them all.

A job hub confines every one of them to its ``--data-dir``
(:func:`cosim.hub.service.submitted.check_paths`) and ``cosim submit`` uploads the files they name
(:mod:`cosim.hub.service.uploads`); both walk :data:`FILE_KEYS` through :func:`named_paths`. A key
missing here would be read from anywhere on a hub, so ``tests/unit/config/test_file_keys.py`` walks the
config models and fails on any field that names a file and is neither here nor in
:data:`NOT_READ`.

Keys are dotted as written in a raw config (before it is parsed: parsing reads some of the files),
``<name>`` standing for any key of a mapping; a dash in a written key counts as an underscore
(``vllm_bench`` takes the command line's spellings).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

Location = tuple[str, ...]
# folder: a folder other paths resolve against; load: a file read when the config is parsed, from its
# base_dir; run: a file the run reads, from the run's folder (a hub's --data-dir).
Use = Literal["folder", "load", "run"]

FILE_KEYS: dict[str, Use] = {
    "base_dir": "folder",
    "presets": "load",
    "models.<name>.hf_config": "load",
    "workload.inference_perf.profile": "load",
    "workload.trace.path": "run",
    "workload.arrival.trace.path": "run",
    "workload.input_tokens.trace.path": "run",
    "workload.output_tokens.trace.path": "run",
    "workload.sessions.trace.path": "run",
    "workload.sessions.turns.trace.path": "run",
    "workload.vllm_bench.dataset_path": "run",
    "workload.inference_perf.data.path": "run",  # unused by the data types cosim models, confined all the same
}

# Keys that name a path the hub never reads, and why (the test of this list accepts them).
NOT_READ: dict[str, str] = {
    "output.dir": "a folder written, not read; a hub writes each run to a folder of its own choosing",
}


def named_paths(data: Mapping[str, Any], uses: tuple[Use, ...] = ("load", "run")) -> Iterator[tuple[Location, str]]:
    """(location, path as written) of every key of :data:`FILE_KEYS` of a use in ``uses`` that raw
    config ``data`` sets to a string, in the order of :data:`FILE_KEYS`. Values of other types are
    left to the config's validation, which says why."""
    for key, use in FILE_KEYS.items():
        if use in uses:
            yield from _find(data, tuple(key.split(".")), ())


def _find(node: Any, parts: tuple[str, ...], location: Location) -> Iterator[tuple[Location, str]]:
    if not parts:
        if isinstance(node, str):
            yield location, node
        return
    if not isinstance(node, Mapping):
        return
    head, rest = parts[0], parts[1:]
    for key, child in node.items():
        if head == "<name>" or str(key).replace("-", "_") == head:
            yield from _find(child, rest, (*location, str(key)))
