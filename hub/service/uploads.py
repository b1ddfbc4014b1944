"""Local files a submitted config names, carried to the hub: ``cosim submit`` to ``HubService.Run``.

A config names files at the keys of :data:`cosim.hub.config.file_keys.FILE_KEYS` (traces,
session files, ``presets``, ``models.<m>.hf_config``, an inference-perf profile, a vllm bench
dataset). :func:`named_files` finds them in a
raw config (overrides applied); :func:`collect_uploads` reads those that exist
beside the config, keyed by the path as written (``RunRequest.files``); the
hub's :func:`place_uploads` checks their number and total against its limits, writes them
under a folder of its own (names it chooses, so no uploaded path can point
outside it) and points the config at them. Paths not uploaded resolve on the
hub as before (its ``--data-dir``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..config.file_keys import Location, named_paths
from ..errors import ScenarioError

DEFAULT_MAX_UPLOAD_BYTES = 64 << 20  # cosim hub --max-upload-mb; the hub receives at most this + 5 MiB
# cosim hub --max-upload-files: a config names a presets file, a hf_config per model and a few traces, while
# a message within the byte limit could carry a million empty files, each a file the hub would write.
DEFAULT_MAX_UPLOAD_FILES = 64


class UploadTooLarge(ScenarioError):
    """The files of a submitted config exceed what the hub accepts."""

    def __init__(self, total_bytes: int, limit_bytes: int, largest: list[tuple[str, int]]) -> None:
        self.total_bytes, self.limit_bytes, self.largest = total_bytes, limit_bytes, largest
        files = ", ".join(f"{name} {_mib(size)}" for name, size in largest)
        super().__init__("RunRequest.files", f"{_mib(total_bytes)} of local files ({files}) exceed this hub's limit "
                                             f"of {_mib(limit_bytes)} (cosim hub --max-upload-mb); use fewer trace "
                                             f"rows, or place the files in the hub's --data-dir and submit with "
                                             f"--no-upload")


class TooManyUploads(ScenarioError):
    """A submitted config's uploaded files outnumber what the hub accepts."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__("RunRequest.files", f"{count} uploaded files exceed this hub's limit of {limit} "
                                             f"(cosim hub --max-upload-files); a config names a presets file, "
                                             f"a hf_config per model and its traces")


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def named_files(data: Mapping[str, Any]) -> Iterator[tuple[Location, str]]:
    """(location, path as written) of every file a raw config names (not ``base_dir``, a folder)."""
    return named_paths(data, ("load", "run"))


def collect_uploads(data: Mapping[str, Any], folder: Path) -> dict[str, bytes]:
    """The content of each named file that exists (a relative path from ``folder``), by path as written."""
    files: dict[str, bytes] = {}
    for _, written in named_files(data):
        path = folder / written
        if written not in files and path.is_file():
            files[written] = path.read_bytes()
    return files


def check_upload_count(files: Mapping[str, bytes], max_files: int = DEFAULT_MAX_UPLOAD_FILES) -> None:
    """Refuses more than ``max_files`` uploaded files (before anything looks at each).

    Raises:
        TooManyUploads: naming the count and the limit.
    """
    if len(files) > max_files:
        raise TooManyUploads(len(files), max_files)


def place_uploads(data: dict[str, Any], files: Mapping[str, bytes], into: Path, *,
                  max_bytes: int = DEFAULT_MAX_UPLOAD_BYTES, max_files: int = DEFAULT_MAX_UPLOAD_FILES) -> None:
    """Writes uploaded files under ``into`` and points ``data``'s locations naming them there.

    Raises:
        TooManyUploads: more than ``max_files`` files (nothing is written).
        UploadTooLarge: their total exceeds ``max_bytes`` (nothing is written).
    """
    check_upload_count(files, max_files)
    total = sum(len(content) for content in files.values())
    if total > max_bytes:
        largest = sorted(((name, len(c)) for name, c in files.items()), key=lambda item: -item[1])[:3]
        raise UploadTooLarge(total, max_bytes, largest)
    placed: dict[str, str] = {}
    for i, (written, content) in enumerate(sorted(files.items())):
        target = into / f"{i:03d}-{Path(written).name or 'file'}"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        placed[written] = str(target.resolve())
    for location, written in list(named_files(data)):
        if written in placed:
            node: Any = data
            for key in location[:-1]:
                node = node[key]
            node[location[-1]] = placed[written]
