"""Every config key that names a file is in one list, and a hub confines each (issue 36, item 11).

The walk below finds the keys from the config models themselves: a field whose name or description
says it is a path, a file or a folder. A new such field fails
``test_every_key_naming_a_file_is_listed`` until it is added to ``FILE_KEYS`` (and so confined and
uploaded) or to ``NOT_READ`` with the reason a hub never reads it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from cosim.hub.config.file_keys import FILE_KEYS, NOT_READ, named_paths
from cosim.hub.config.reference import _models
from cosim.hub.config.scenario import ScenarioConfig
from cosim.hub.errors import ScenarioError
from cosim.hub.service.server import HubServicer
from cosim.hub.service.submitted import check_paths
from cosim.hub.service.uploads import collect_uploads, place_uploads
from tests.contract.test_hub_service import scenario
from tests.unit.service.test_hub_security import request

_PATH_NAME = re.compile(r"(^|_)(path|file|dir|folder|directory)($|_)")
_PATH_WORDS = re.compile(r"\b(path|file|folder|directory)\b", re.IGNORECASE)


def _holds_str(annotation: Any) -> bool:
    return annotation is str or any(_holds_str(arg) for arg in get_args(annotation))


def schema_keys(model: type[BaseModel] = ScenarioConfig, prefix: str = "",
                depth: int = 0) -> Iterator[tuple[str, Any, str, str]]:
    """(dotted key, annotation, field name, description) of every field under ``model``, at every place it
    occurs (``<name>`` for a mapping's keys, ``[]`` for a list's items)."""
    assert depth < 12, f"{prefix}: the config models nest deeper than expected (a cycle?)"
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        yield key, field.annotation, name, field.description or ""
        suffix = ""
        for arg in (field.annotation, *get_args(field.annotation)):
            if get_origin(arg) in (list, tuple):
                suffix = "[]"
            elif get_origin(arg) is dict:
                suffix = ".<name>"
        for child in _models(field.annotation):
            yield from schema_keys(child, f"{key}{suffix}.", depth + 1)


def names_a_path(name: str, annotation: Any, description: str) -> bool:
    """A string field whose name or description says it is a path (a section read from a file, such as
    ``presets``, records it in a string field ``file``)."""
    return _holds_str(annotation) and bool(_PATH_NAME.search(name) or _PATH_WORDS.search(description))


def _record_of_read_file(key: str) -> bool:
    """``presets.file``, ``models.<name>.hf_config.file``: where a section listed in FILE_KEYS was read from
    (the raw config names the file at the section's own key)."""
    return key.endswith(".file") and key.removesuffix(".file") in FILE_KEYS


def test_every_key_naming_a_file_is_listed() -> None:
    found = {key for key, annotation, name, description in schema_keys()
             if names_a_path(name, annotation, description)}
    assert "workload.sessions.trace.path" in found and "base_dir" in found  # the walk sees what it must
    unlisted = sorted(key for key in found if key not in FILE_KEYS and key not in NOT_READ
                      and not _record_of_read_file(key))
    assert not unlisted, f"config keys naming files, missing from FILE_KEYS (or NOT_READ): {unlisted}"


def test_every_listed_key_is_a_key_of_the_config() -> None:
    keys = {key for key, *_ in schema_keys()}
    assert not sorted(set(FILE_KEYS) - keys) and not sorted(set(NOT_READ) - keys)


def raw_config(key: str, value: str) -> dict[str, Any]:
    """A raw config holding ``value`` at ``key`` (``<name>`` as ``m``)."""
    data: dict[str, Any] = {}
    node = data
    parts = key.replace("<name>", "m").split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return data


@pytest.mark.parametrize("key", sorted(FILE_KEYS))
@pytest.mark.parametrize("value, problem", [
    ("/dev/zero", "is an absolute path"),
    ("../secret.csv", "has a '..' part"),
    ("~/trace.csv", "is relative to a home folder"),
])
def test_every_listed_key_is_confined(tmp_path: Path, key: str, value: str, problem: str) -> None:
    written = key.replace("<name>", "m")
    with pytest.raises(ScenarioError) as err:
        check_paths(raw_config(key, value), tmp_path, uploaded=())
    assert str(err.value).startswith(f"{written}: {value!r} {problem}")


def test_symlinks_out_of_the_data_dir_are_refused_at_every_key(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "out").symlink_to(tmp_path)
    for key in FILE_KEYS:
        with pytest.raises(ScenarioError, match="resolves outside the hub's --data-dir"):
            check_paths(raw_config(key, "out/x.json"), data_dir, uploaded=())


def test_vllm_bench_dashed_spelling_is_confined_too(tmp_path: Path) -> None:
    data = {"workload": {"vllm_bench": {"dataset-name": "sharegpt", "dataset-path": "/etc/passwd"}}}
    with pytest.raises(ScenarioError, match=r"^workload\.vllm_bench\.dataset-path: '/etc/passwd' is an absolute"):
        check_paths(data, tmp_path, uploaded=())


def test_uploads_cover_every_file_key_but_the_folder(tmp_path: Path) -> None:
    data: dict[str, Any] = {}
    for i, key in enumerate(sorted(FILE_KEYS)):
        parts = key.replace("<name>", "m").split(".")
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = f"f{i}.txt"
        (tmp_path / f"f{i}.txt").write_text(key)
    files = collect_uploads(data, tmp_path)
    assert {content.decode() for content in files.values()} == {k for k, use in FILE_KEYS.items() if use != "folder"}
    place_uploads(data, files, tmp_path / "placed")
    placed = dict(named_paths(data))
    assert len(placed) == len(files) and all(Path(path).is_relative_to(tmp_path / "placed")
                                             for path in placed.values())
    assert data["base_dir"] == f"f{sorted(FILE_KEYS).index('base_dir')}.txt"  # a folder is never rewritten


# -- the issue's reproducers, through what a hub's Run does first ---------------------------------------------------


def session_line(start_ns: int, turns: int) -> str:
    calls = ", ".join('{"input_toks": 40, "output_toks": 4, "tool_duration_ns": 1000000}' for _ in range(turns))
    return f'{{"arrival_time_ns": {start_ns}, "sub_requests": [{calls}]}}\n'


def sessions_from_file(path: str) -> dict[str, Any]:
    config = scenario({"kind": "roofline"})
    config["workload"] = {"arrival": {"process": "poisson", "rate_per_s": 20},
                          "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"},
                          "sessions": {"trace": {"path": path, "format": "llmservingsim"}}}
    return config


@pytest.fixture
def servicer(tmp_path: Path) -> HubServicer:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "sessions.jsonl").write_text("".join(session_line(i * 10**6, 3) for i in range(4)))
    return HubServicer(tmp_path / "runs", data_dir=data_dir)


def test_a_session_file_outside_the_data_dir_is_refused(servicer: HubServicer) -> None:
    for path, problem in (("/dev/zero", "is an absolute path"), ("../../etc/passwd", "has a '..' part")):
        with pytest.raises(ScenarioError) as err:
            servicer.prepare(request(sessions_from_file(path)))
        assert str(err.value).startswith(f"workload.sessions.trace.path: {path!r} {problem}")


def test_a_session_file_in_the_data_dir_or_uploaded_passes(servicer: HubServicer) -> None:
    assert servicer.prepare(request(sessions_from_file("sessions.jsonl"))).workload.sessions is not None
    uploaded = servicer.prepare(request(sessions_from_file("/home/me/mine.jsonl"),
                                        files={"/home/me/mine.jsonl": session_line(0, 2).encode()}),
                                servicer.runs_dir / "uploads")
    trace = uploaded.workload.sessions.trace if uploaded.workload.sessions else None
    assert trace is not None and Path(trace.path).is_relative_to(servicer.runs_dir / "uploads")


def test_vllm_bench_datasets_and_inference_perf_profiles_are_confined(servicer: HubServicer) -> None:
    bench = scenario({"kind": "roofline"})
    bench["workload"] = {"vllm_bench": {"dataset-name": "sharegpt", "dataset-path": "/root/data.json"}}
    profile = scenario({"kind": "roofline"})
    profile["workload"] = {"inference_perf": {"profile": "/etc/shadow"}}
    for config, key in ((bench, "workload.vllm_bench.dataset-path"), (profile, "workload.inference_perf.profile")):
        with pytest.raises(ScenarioError) as err:
            servicer.prepare(request(config))
        assert str(err.value).startswith(f"{key}: ") and "is an absolute path" in str(err.value)
