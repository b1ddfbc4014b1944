"""What makes a run folder reproduce itself: ``config.yaml`` and ``run.json``.

- ``config.yaml``: the scenario as cosim ran it: every default written out,
  ``--set`` overrides applied, ``base_dir`` naming the folder its relative
  paths (traces) were read from (relative to the run folder where it can be)
  and ``output.dir`` the run folder. ``cosim run
  config.yaml -o OTHER`` gives byte-identical results.
- ``run.json``: the versions of cosim and of its dependencies, the git commit of the cosim checkout (when it
  is one), the command line, the seed, where the config came from, and the
  model and device specs its presets resolved to.

:func:`check_run_folder` is the guard against replacing an earlier run by
accident (``cosim run --overwrite`` / ``cosim.run(..., overwrite=True)``).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from ..config.scenario import ScenarioConfig
from ..errors import CosimError, RunFolderTaken, ScenarioError

CONFIG_FILE = "config.yaml"
RUN_FILE = "run.json"
_SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout, when hub/ is a folder of one


def check_run_folder(folder: str | Path, *, overwrite: bool) -> None:
    """Refuses a run folder that exists and holds anything, unless ``overwrite``, and one that
    cannot be written (checked before a run, not when it ends).

    Raises:
        RunFolderTaken: the folder holds files (its message names ``overwrite=True``, the CLI's ``--overwrite``).
        ScenarioError: a folder that cannot be written, naming it and the way out.
    """
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise ScenarioError(str(path), "the run folder is a file; choose another folder with -o")
    if not overwrite and path.exists() and any(path.iterdir()):
        raise RunFolderTaken(str(path))
    _check_writable(path)


def _check_writable(path: Path) -> None:
    """Refuses a run folder that could not be written, by writing a file where it would go, so that a
    run does not find out only when it ends."""
    existing = path
    while not existing.exists():  # the folder, or the nearest folder above it that exists
        existing = existing.parent
    if not existing.is_dir():
        raise ScenarioError(str(path), f"{existing} is a file, so the run folder cannot be made there; "
                                       "choose another folder with -o")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise ScenarioError(str(path), f"cannot write in {existing} ({err.strerror or err}); choose another "
                                       "folder with -o") from None


def cosim_version() -> str:
    """The installed distribution's version ('unknown' when cosim runs from an uninstalled tree)."""
    try:
        return metadata.version("cosim")
    except metadata.PackageNotFoundError:
        return "unknown"


def git_commit(root: Path = _SOURCE_ROOT) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git checkout cosim runs from; None when it is not one (a wheel).

    Only a checkout whose top level is cosim's own source root counts, so a wheel installed into a
    virtual environment inside some other repository reports None, not that repository's commit.
    """
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10,
                              check=True)
        return done.stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root:
            return None
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):  # no git, not a checkout, or a checkout without commits
        return None


def dependency_versions() -> dict[str, str]:
    """The installed version of each package cosim requires (its extras' left out), by the name cosim's
    metadata gives it; empty when cosim runs from an uninstalled tree."""
    try:
        requirements = metadata.requires("cosim") or []
    except metadata.PackageNotFoundError:
        return {}
    versions = {}
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        if "extra" in marker:
            continue
        name = re.split(r"[\s\[<>=!~(]", spec.strip(), maxsplit=1)[0]
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def portable_base_dir(base_dir: Path, run_folder: Path) -> str:
    """``base_dir`` as the run folder's config.yaml names it: relative to the run folder where the two
    share a folder (a checkout, a project), so that a copy of that folder reruns; else absolute."""
    base, run = base_dir.resolve(), run_folder.resolve()
    shared = Path(os.path.commonpath([base, run]))
    return str(base) if shared == Path(shared.anchor) else os.path.relpath(base, run)


def resolved_config(config: ScenarioConfig, *, base_dir: Path, output_dir: Path) -> dict[str, Any]:
    """The config as run: defaults explicit, ``base_dir`` relative to the run folder (where it can be:
    :func:`portable_base_dir`), ``output.dir`` the run folder."""
    data = config.model_dump(mode="json")
    data["base_dir"] = portable_base_dir(base_dir, output_dir)
    data["output"] = {**data["output"], "dir": str(output_dir)}
    return data


def resolved_presets(config: ScenarioConfig) -> dict[str, Any]:
    """The model and device specs the config's presets and overrides resolve to (for the record)."""
    from ..config.resolve import resolve_device, resolve_model  # late: resolve imports the generated stubs

    presets: dict[str, Any] = {"models": {}, "devices": {}}
    for kind, names, resolve in (("models", config.models, resolve_model), ("devices", config.hardware,
                                                                            resolve_device)):
        for name in names:
            try:
                presets[kind][name] = resolve(config, name).model_dump(mode="json")
            except CosimError as err:  # the run reports it; the record says why it is missing
                presets[kind][name] = {"error": str(err)}
    return presets


def write_provenance(folder: Path, config: ScenarioConfig, *, base_dir: Path, command: Sequence[str] | None = None,
                     source: str | None = None, overrides: Sequence[str] = (), started_at: float | None = None) -> None:
    """Writes ``config.yaml`` and ``run.json`` into ``folder`` (created if missing).

    Args:
        folder: the run folder.
        config: the scenario as validated (overrides applied).
        base_dir: the folder its relative paths resolved against.
        command: the command line (default: this process's, ``sys.argv``).
        source: the config file the run was started from, if any.
        overrides: the ``--set`` assignments applied to it.
        started_at: when the run started (seconds since the epoch; default: now).
    """
    folder.mkdir(parents=True, exist_ok=True)
    header = ("# The scenario as cosim ran it: defaults written out, overrides applied, relative paths resolved\n"
              "# against base_dir. `cosim run config.yaml -o OTHER_FOLDER` reproduces the run.\n")
    body = yaml.safe_dump(resolved_config(config, base_dir=base_dir, output_dir=folder), sort_keys=False)
    (folder / CONFIG_FILE).write_text(header + body, encoding="utf-8")
    argv = list(command) if command is not None else [Path(sys.argv[0]).name, *sys.argv[1:]]
    record = {
        "cosim_version": cosim_version(),
        "dependencies": dependency_versions(),
        "git": git_commit(),
        "command": shlex.join(argv),
        "seed": config.seed,
        "config_source": str(Path(source).resolve()) if source else None,
        "overrides": list(overrides),
        "base_dir": str(base_dir.resolve()),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_at)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "reproduce": f"cosim run {shlex.quote(str(folder / CONFIG_FILE))} -o NEW_FOLDER",
        "presets": resolved_presets(config),
    }
    (folder / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
