"""Finds and runs an ASTRA-sim binary and reads the finish time from its log.

ASTRA-sim 2.0 logs one line per NPU when its workload ends
(``Workload::report``)::

    [2025-01-01 10:00:00.000] [workload] [info] sys[3] finished, 41189 cycles, exposed communication 41189 cycles.

The run's time is the latest finish over all NPUs. In the analytical
network backends one cycle is one nanosecond (``Sys::boostedTick``).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cosim.adapters.sdk import BackendFault, Unavailable

from .inputs import RunFiles

log = logging.getLogger(__name__)

ENV_BINARY = "COSIM_ASTRA_SIM"
LEGACY_ENV_BINARY = "ASTRASIM_BIN"  # read when COSIM_ASTRA_SIM is unset (older setups)
DEFAULT_NAMES = ("AstraSim_Analytical_Congestion_Unaware", "AstraSim_Analytical_Congestion_Aware")
HOW_TO_PROVIDE = (
    f"set the environment variable {ENV_BINARY} to the path of an ASTRA-sim 2.0 analytical binary, or put "
    f"{DEFAULT_NAMES[0]} on PATH (build https://github.com/astra-sim/astra-sim with "
    "./build/astra_analytical/build.sh, or from a local checkout with adapters/astrasim/build.sh; "
    "docs/astrasim.md), or pass AstraSimBackend(binary=...) when serving it from Python")
_FINISHED = re.compile(r"sys\[(\d+)\]\s+(?:iteration \d+ )?finished,\s+(\d+)\s+cycles")


class AstraSimError(BackendFault):
    """The binary ran but failed, or printed no finish time (INTERNAL)."""


@dataclass(frozen=True)
class Binary:
    """An ASTRA-sim executable and how to call it.

    Attributes:
        path: absolute path of the executable.
        extra_args: options appended to every run (e.g. ``--num-queues-per-dim=1``).
        timeout_s: wall-clock limit of one run.
    """

    path: str
    extra_args: tuple[str, ...] = field(default=())
    timeout_s: float = 600.0


def resolve_binary(explicit: str | None = None) -> str:
    """The binary to run: ``explicit`` if given, else ``$COSIM_ASTRA_SIM`` (or
    ``$ASTRASIM_BIN``), else ``AstraSim_Analytical_Congestion_Unaware`` on PATH.

    Raises:
        Unavailable: none found, or it is missing or not executable; the
            message says how to provide one.
    """
    env = ENV_BINARY if os.environ.get(ENV_BINARY) else LEGACY_ENV_BINARY
    name = explicit or os.environ.get(env, "")
    where = "the binary option" if explicit else f"${env}"
    if not name:
        found = shutil.which(DEFAULT_NAMES[0])
        if found is None:
            raise Unavailable(f"astrasim backend has no ASTRA-sim binary: {HOW_TO_PROVIDE}")
        return os.path.abspath(found)
    path = shutil.which(name) or (name if os.path.isfile(name) else None)
    if path is None:
        raise Unavailable(f"astrasim backend: {where}={name!r} does not exist; {HOW_TO_PROVIDE}")
    if not os.access(path, os.X_OK):
        raise Unavailable(f"astrasim backend: {where}={name!r} is not executable (chmod +x it); {HOW_TO_PROVIDE}")
    return os.path.abspath(path)


def is_congestion_aware(path: str) -> bool:
    """True for ASTRA-sim's congestion-aware analytical binary (by its name, as ASTRA-sim builds it)."""
    return "congestion_aware" in os.path.basename(path).lower()


def parse_finish_ns(output: str) -> int:
    """The latest ``sys[i] finished, N cycles`` in ``output``, in ns.

    Raises:
        ValueError: no finish line.
    """
    finishes = [int(cycles) for _, cycles in _FINISHED.findall(output)]
    if not finishes:
        raise ValueError("no 'sys[i] finished, N cycles' line in the output")
    return max(finishes)


def run(binary: Binary, files: RunFiles, cwd: Path) -> int:
    """Runs the binary on ``files`` in ``cwd`` and returns the finish time, ns.

    Raises:
        Unavailable: the binary vanished since the session opened.
        AstraSimError: it failed, timed out, or printed no finish line.
    """
    argv: Sequence[str] = [binary.path, *files.arguments(), *binary.extra_args]
    log.debug("running %s", " ".join(argv))
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=binary.timeout_s, check=False)
    except FileNotFoundError as err:
        raise Unavailable(f"astrasim backend: {binary.path} disappeared: {err}; {HOW_TO_PROVIDE}") from err
    except subprocess.TimeoutExpired as err:
        raise AstraSimError(f"ASTRA-sim ({binary.path}) ran past {binary.timeout_s:g} s on inputs in {cwd}") from err
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise AstraSimError(f"ASTRA-sim ({binary.path}) exited with status {done.returncode} on inputs in {cwd}; "
                            f"output tail: {output[-2000:]!r}")
    try:
        return parse_finish_ns(output)
    except ValueError as err:
        raise AstraSimError(f"ASTRA-sim ({binary.path}) on inputs in {cwd}: {err}; "
                            f"output tail: {output[-2000:]!r}") from err
