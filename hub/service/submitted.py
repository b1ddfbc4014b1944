"""What a hub accepts in a submitted config: it is untrusted input.

A config sent to ``cosim hub`` comes from whoever can reach its port, so
before anything runs :class:`~cosim.hub.service.server.HubServicer` checks it against
the hub's :class:`SubmitPolicy`. Every refusal is a
:class:`~cosim.hub.errors.ScenarioError` naming the config key and the flag
that would allow it:

- **Backends.** ``command:`` and ``image:`` backends (start processes or
  containers: ``--allow-launch``), ``python:`` backends (import and run a
  module in the hub: ``--allow-python``) and ``address:`` backends (make the
  hub connect to any host:port: ``--allow-address``) are refused unless the
  hub's registry (``--backends``) has an entry for the backend's name, which
  replaces it. Checked on the parsed config, before any import or connection.
- **Backend options naming files.** Options that name an executable, its
  arguments or a file on the backend's machine are refused unless
  ``--allow-backend-files``: the keys of :data:`FILE_OPTIONS` (each built-in
  backend's ``file_options``, e.g. astrasim's ``binary`` and ``extra_args``,
  regression's ``artifact`` and ``profile_bundle``, roofline's ``profile``
  unless a plain name such as ``auto`` or a shipped profile), whatever backend
  the entry names (a registered service honours them as well), and any option
  whose string value is a path by its form (absolute, ``~``, or a ``..``
  part), at any depth.
- **Files.** Every key of :data:`~cosim.hub.config.file_keys.FILE_KEYS`
  (``presets``, ``models.<m>.hf_config``, trace and session-file paths, an
  inference-perf profile, a vllm bench dataset, ``base_dir``) is either
  uploaded by ``cosim submit`` (the hub picks where the file goes) or resolves
  inside the hub's ``--data-dir``: absolute paths, ``~``, ``..`` parts and
  symlinks that lead out of it are refused. Numbers a run
  reads from a file come back in its ``requests.csv``, so this confinement is
  what keeps other files on the hub unread.
- **Size.** At most ``max_requests`` requests per run (``--max-requests``),
  counted from a trace's rows when ``workload.requests`` is unset, and from
  the turns of ``workload.sessions`` (each turn is a request: a session file's
  turns, or the sessions times their turns' mean), and at most
  ``max_config_bytes`` of YAML. A run the config cannot count in advance (a
  closed loop for a time, turns drawn above their mean) is stopped at its
  request past the limit (:class:`RequestCap`).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ..backends.kinds import BUILTIN_BACKENDS, BUILTIN_KINDS
from ..config.file_keys import Use, named_paths
from ..config.lengths import FixedLength, LengthDist, LognormalLength, NormalLength, UniformLength
from ..config.scenario import ScenarioConfig
from ..config.sessions import SessionsConfig
from ..errors import ScenarioError
from ..sim.records import RequestRecord
from ..sim.workload.session_traces import load_sessions
from ..sim.workload.traces import load_trace
from .backend_registry import BackendRegistry

DEFAULT_MAX_REQUESTS = 1_000_000
MAX_CONFIG_BYTES = 1 << 20

# Session options naming an executable, its arguments or a file, by the built-in backend reading
# them (each also declares them as Backend.file_options); every backend entry is checked for all.
FILE_OPTIONS: dict[str, tuple[str, ...]] = {kind: spec.file_options for kind, spec in BUILTIN_KINDS.items()
                                            if spec.file_options}
# Of those, options where a plain name picks something shipped with the backend (not a file).
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
SHIPPED_NAME_OPTIONS = frozenset({"profile"})
_TRACE_PARTS = ("arrival", "input_tokens", "output_tokens")


@dataclass(frozen=True)
class SubmitPolicy:
    """What a hub lets submitted configs do (``cosim hub`` flags of the same names)."""

    allow_launch: bool = False
    allow_python: bool = False
    allow_address: bool = False
    allow_backend_files: bool = False
    max_requests: int = DEFAULT_MAX_REQUESTS
    max_config_bytes: int = MAX_CONFIG_BYTES


def check_config_size(text: str, policy: SubmitPolicy) -> None:
    """Raises ScenarioError if the config's YAML is larger than the policy allows."""
    size = len(text.encode("utf-8"))
    if size > policy.max_config_bytes:
        raise ScenarioError("config", f"{size / 2**20:.1f} MiB of YAML exceeds this hub's limit of "
                                      f"{policy.max_config_bytes / 2**20:.1f} MiB for a config; long data belongs "
                                      f"in a trace file (cosim submit uploads it)")


def check_paths(data: Mapping[str, Any], data_dir: Path, uploaded: Collection[str]) -> None:
    """Raises ScenarioError naming the first path of raw config ``data`` that is not confined: every key of
    :data:`~cosim.hub.config.file_keys.FILE_KEYS`.

    Paths in ``uploaded`` (keys of ``RunRequest.files``) are exempt: the hub writes those files where it
    chooses and points the config there. Call before the uploads are placed.
    """
    root = data_dir.resolve()
    for location, written in named_paths(data, ("folder",)):  # base_dir: never an upload
        _check_confined(".".join(location), written, root, root)
    base = data.get("base_dir")
    # The hub runs with --data-dir as the run's folder; files read when the config is parsed come from base_dir.
    folders: dict[Use, Path] = {"load": root / base if isinstance(base, str) else root, "run": root}
    for use, folder in folders.items():
        for location, written in named_paths(data, (use,)):
            if written not in uploaded:
                _check_confined(".".join(location), written, folder, root)


def _check_confined(where: str, written: str, folder: Path, root: Path) -> None:
    problem = _path_form(written)
    if problem:
        raise ScenarioError(where, f"{written!r} {problem}; a submitted config names files relative to the hub's "
                                   f"--data-dir, or cosim submit uploads them")
    if not (folder / written).resolve().is_relative_to(root):
        raise ScenarioError(where, f"{written!r} resolves outside the hub's --data-dir (through a symbolic link)")


def _path_form(value: str) -> str | None:
    """Why ``value``, read as a path, may reach outside any folder it is joined to (None: it may not)."""
    if "\0" in value:
        return "has a NUL character"
    if value.startswith("~"):
        return "is relative to a home folder"
    if PurePosixPath(value).is_absolute() or PureWindowsPath(value).is_absolute() or value.startswith("\\"):
        return "is an absolute path"
    if ".." in re.split(r"[/\\]", value):
        return "has a '..' part"
    return None


def check_backends(config: ScenarioConfig, registry: BackendRegistry, policy: SubmitPolicy) -> None:
    """Raises ScenarioError naming the first backend entry (or option) the policy refuses.

    Call before ``registry.resolve``: an entry whose name (or kind) is registered runs at the registered
    address, so its source is accepted; its options are checked all the same.
    """
    for name, backend in config.backends.items():
        source = backend.source
        registered = registry.lookup(name, backend.kind) is not None
        if not registered:
            _check_source(name, source, policy)
        if not policy.allow_backend_files:
            _check_options(name, backend.kind, backend.options)


_LAUNCH = "this hub does not start commands or containers for submitted configs"
# source -> (policy attribute, flag, why it is refused)
_SOURCES = {
    "command": ("allow_launch", "--allow-launch", _LAUNCH),
    "image": ("allow_launch", "--allow-launch", _LAUNCH),
    "python": ("allow_python", "--allow-python", "this hub does not import python: backends named by submitted "
                                                 "configs (the module would run inside the hub)"),
    "address": ("allow_address", "--allow-address", "this hub does not connect to address: backends named by "
                                                    "submitted configs (they could make it probe any host:port)"),
}


def _check_source(name: str, source: str, policy: SubmitPolicy) -> None:
    if source in _SOURCES:
        attribute, flag, reason = _SOURCES[source]
        if not getattr(policy, attribute):
            raise ScenarioError(f"backends.{name}.{source}",
                                f"{reason}; register it with the hub (--backends), or start the hub with {flag}")


def file_option_keys(kind: str | None) -> frozenset[str]:
    """Option keys that name files: :data:`FILE_OPTIONS` of every backend, and those ``kind`` declares."""
    keys = {key for options in FILE_OPTIONS.values() for key in options}
    return frozenset(keys | set(_declared_file_options(kind)))


@functools.cache
def _declared_file_options(kind: str | None) -> tuple[str, ...]:
    """``file_options`` of a built-in backend class (one of cosim's own modules, so safe to import)."""
    if kind not in BUILTIN_BACKENDS:
        return ()
    module, _, cls = BUILTIN_BACKENDS[kind].partition(":")
    return tuple(getattr(getattr(importlib.import_module(module), cls), "file_options", ()))


def _check_options(name: str, kind: str | None, options: Mapping[str, Any]) -> None:
    keys = file_option_keys(kind)
    for key, value in options.items():
        where = f"backends.{name}.options.{key}"
        if key in keys and not (key in SHIPPED_NAME_OPTIONS and isinstance(value, str) and _PLAIN_NAME.match(value)):
            raise ScenarioError(where, "names an executable, its arguments or a file on the backend's machine; "
                                       "a hub refuses such options in submitted configs unless started with "
                                       "--allow-backend-files")
        for text in _strings(value):
            problem = _path_form(text)
            if problem:
                raise ScenarioError(where, f"{text!r} {problem}: options naming files are refused in submitted "
                                           f"configs unless the hub is started with --allow-backend-files")


def _strings(value: Any) -> Iterator[str]:
    """Every string inside an option value (lists and mappings, keys included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def check_request_count(config: ScenarioConfig, data_dir: Path, policy: SubmitPolicy) -> None:
    """Raises ScenarioError if the run would generate more than ``policy.max_requests`` requests.

    Without ``workload.requests`` a run takes every row of its sequential traces from ``start_row``
    (the fewest of them): those are counted, a file's line count first, its rows only when that is
    not already within the limit.
    """
    limit = policy.max_requests
    if config.workload.sessions is not None:
        _check_session_turns(config.workload.sessions, data_dir, limit)
        return
    requests = config.workload.num_requests  # set, or an inference-perf profile's stages
    if requests is not None:
        if requests > limit:
            raise ScenarioError("workload.requests", f"{requests:,} requests exceed this hub's limit of {limit:,} "
                                                     f"per run (cosim hub --max-requests)")
        return
    counts = []
    for source in {config.workload.trace_source(part) for part in _TRACE_PARTS} - {None}:
        if source is None or source.sample != "sequential":
            continue
        path = Path(source.path) if Path(source.path).is_absolute() else data_dir / source.path
        try:
            count = _line_count(path) - source.start_row
        except OSError:
            continue  # the run reports the missing file
        if count > limit:
            count = len(load_trace(source, data_dir)) - source.start_row
        counts.append((count, source.path))
    if counts and min(counts)[0] > limit:
        count, name = min(counts)
        raise ScenarioError("workload.requests", f"unset, so the run would take all {count:,} rows of {name}, more "
                                                 f"than this hub's limit of {limit:,} requests per run (cosim hub "
                                                 f"--max-requests); set workload.requests")


def _check_session_turns(sessions: SessionsConfig, data_dir: Path, limit: int) -> None:
    """Refuses sessions whose turns (each a request) exceed ``limit``: a session file's, counted; drawn
    ones, the sessions known before the run (``count``, else a closed loop's ``users``) times the mean
    of ``turns``. A closed loop for a time starts more sessions than that as it goes: RequestCap."""
    if sessions.trace is not None:
        path = Path(sessions.trace.path).expanduser()  # confined by check_paths, or an upload's (absolute)
        traced = load_sessions(path if path.is_absolute() else data_dir / path, sessions.trace.format,
                               chars_per_token=sessions.trace.chars_per_token)[:sessions.count]
        turns = sum(len(session.turns) for session in traced)
        where = "workload.sessions.count" if sessions.count is not None else "workload.sessions.trace.path"
        what = f"the {len(traced):,} sessions of {sessions.trace.path} have {turns:,} turns"
    else:
        mean = _mean(sessions.turns)
        count = sessions.count if sessions.count is not None else sessions.users
        if mean is None or count is None:
            return
        turns = round(count * mean)
        where = "workload.sessions.count" if sessions.count is not None else "workload.sessions.users"
        what = f"{count:,} sessions of {mean:g} turns on average are {turns:,} turns"
    if turns > limit:
        raise ScenarioError(where, f"{what}, each a request: more than this hub's limit of {limit:,} requests "
                                   f"per run (cosim hub --max-requests)")


def _mean(dist: LengthDist | None) -> float | None:
    """The mean of a length distribution, within its min and max (None: read from a trace)."""
    if isinstance(dist, FixedLength):
        mean: float = dist.value
    elif isinstance(dist, UniformLength):
        mean = (dist.low + dist.high) / 2
    elif isinstance(dist, NormalLength | LognormalLength):
        mean = dist.mean
    else:
        return None
    return min(max(mean, dist.min), dist.max if dist.max is not None else mean)


class RequestCap:
    """A hub run's ``on_request``: stops the run (a ScenarioError naming ``where``) at the request that
    finishes past ``limit``. Bounds what no count before the run can: a closed loop for a time starts
    sessions until its ``duration_s``, and drawn turns may exceed their mean."""

    def __init__(self, limit: int, where: str) -> None:
        self.limit, self.where, self.finished = limit, where, 0

    def __call__(self, request: RequestRecord) -> None:
        self.finished += 1
        if self.finished > self.limit:
            raise ScenarioError(self.where, f"the run went past this hub's limit of {self.limit:,} requests per run "
                                            f"(cosim hub --max-requests; each turn of a session is a request) and "
                                            f"was stopped")


def request_cap(config: ScenarioConfig, policy: SubmitPolicy) -> RequestCap:
    """The :class:`RequestCap` of a run of ``config``, naming the key that sets its size."""
    sessions = config.workload.sessions
    if sessions is None:
        return RequestCap(policy.max_requests, "workload.requests")
    closed_for_a_time = sessions.count is None and sessions.users is not None and sessions.trace is None
    return RequestCap(policy.max_requests, "workload.sessions.duration_s" if closed_for_a_time
                      else "workload.sessions.count")


def _line_count(path: Path) -> int:
    """Lines in a file (an upper bound on its data rows), without reading it whole."""
    lines = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            lines += chunk.count(b"\n")
    return lines + 1
