"""Running a scenario: build the hub from a config, run it, report.

:func:`run` is the Python API (``cosim.run``) and what ``cosim run`` calls:
it resolves presets, starts the backends the config names, opens one session
per client, generates the workload, runs the event loop, and summarizes. A
run that fails part way still returns (and writes) what it has, then raises.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends import (
    BUILTIN_BACKENDS,
    BackendClient,
    LaunchedBackend,
    MemoryClient,
    NetworkClient,
    RuntimeClient,
    attach_address,
    launch_command,
    launch_image,
    launch_python,
)
from ..backends.inprocess import in_process_runtime_client
from ..config.loading import load_config, parse_config, scenario_folder
from ..config.scenario import ScenarioConfig
from ..config.sections import BackendConfig
from ..errors import CosimError
from ..metrics import write_run_folder
from ..sim.records import ClientInfo, RequestRecord
from .frames import requests_frame, summary_frame
from .interrupts import Interrupted, RunStop, interruption
from .intervals import run_intervals
from .provenance import check_run_folder, write_provenance
from .simulation import Simulation
from .validation import check_scenario

if TYPE_CHECKING:  # pandas is optional (hub/studies/frames.py)
    import pandas as pd

log = logging.getLogger(__name__)



@dataclass
class RunResult:
    """What a run produced.

    Attributes:
        summary: the content of summary.json.
        requests: one record per request (finished or not), sorted by id. A run of more than
            :data:`~cosim.hub.sim.request_log.KEEP_IN_MEMORY` requests keeps its finished records in a
            temporary file, not memory, and this sequence reads each back when asked (a new object
            each time); a smaller run's are the records themselves.
        clients: static facts per client.
        output_dir: where the run folder was written, if anywhere.
        error: what stopped the run early, if anything.
        events: (simulated ns, description) of the first events handled, as many as asked for.
    """

    summary: dict[str, Any]
    requests: Sequence[RequestRecord]
    clients: list[ClientInfo]
    output_dir: Path | None = None
    error: CosimError | None = field(default=None, repr=False)
    events: list[tuple[int, str]] = field(default_factory=list, repr=False)

    def requests_df(self) -> pd.DataFrame:
        """requests.csv as a pandas DataFrame, times in s and ms (``ttft_s``, ``ttft_ms``); needs pandas.
        Read from the run folder's requests.csv or requests.parquet where there is one (no record is
        read back)."""
        for name in ("requests.csv", "requests.parquet"):
            written = self.output_dir / name if self.output_dir is not None else None
            if written is not None and written.exists():
                return requests_frame(written)
        return requests_frame(self.requests)

    def summary_df(self) -> pd.DataFrame:
        """The summary as a pandas DataFrame: a row for the run, one per client; columns by dotted path,
        times in s and ms (``latency.ttft_s.p90``, ``latency.ttft_ms.p90``); needs pandas."""
        return summary_frame(self.summary)


def _launch(name: str, backend: BackendConfig, import_paths: Sequence[Path]) -> LaunchedBackend:
    if backend.kind:
        return launch_python(name, BUILTIN_BACKENDS[backend.kind])
    if backend.python:
        return launch_python(name, backend.python, search_paths=import_paths)
    if backend.command:
        return launch_command(name, backend.command)
    if backend.image:
        return launch_image(name, backend.image)
    return attach_address(name, str(backend.address))


@contextlib.contextmanager
def started_backends(config: ScenarioConfig, names: Sequence[str], *, in_process: bool = False,
                     import_paths: Sequence[Path] = ()) -> Iterator[dict[str, BackendClient]]:
    """Starts (or attaches to) each named backend; stops what it started on exit.

    The network backend named in ``network.backend`` gets a NetworkClient,
    every other one a RuntimeClient. ``in_process`` calls built-in and
    ``python:`` runtime backends without gRPC (``cosim run --in-process``, the
    goodput search, and ``cosim bench``'s measure of the gRPC boundary).
    ``python:`` backends may also be imported from ``import_paths``.
    """
    launched: list[LaunchedBackend] = []
    clients: dict[str, BackendClient] = {}
    try:
        for name in names:
            backend = config.backends[name]
            kind = client_kind(config, name)
            reference = BUILTIN_BACKENDS[backend.kind] if backend.kind else backend.python
            if in_process and reference and kind is RuntimeClient:
                clients[name] = in_process_runtime_client(name, reference,
                                                          search_paths=import_paths if backend.python else ())
                continue
            handle = _launch(name, backend, import_paths)
            launched.append(handle)
            clients[name] = kind(name, handle.address, deadline_s=backend.deadline_s,
                                 reconnect_s=backend.reconnect_s, alive=handle.is_alive)
        yield clients
    finally:
        for client in clients.values():
            client.close()
        for handle in reversed(launched):
            handle.stop()


def client_kind(config: ScenarioConfig, name: str) -> type[BackendClient]:
    """Which service backend ``name`` serves: network, memory (KV retrieval) or runtime."""
    if name == config.network.backend:
        return NetworkClient
    if any(c.kind == "kv_retrieval" and c.backend == name for c in config.clients):
        return MemoryClient
    return RuntimeClient


def backend_names(config: ScenarioConfig) -> list[str]:
    """The backends a scenario uses, clients' first."""
    names = [c.backend for c in config.clients if c.backend]
    if config.network.backend:
        names.append(config.network.backend)
    return list(dict.fromkeys(names))


def run(config: ScenarioConfig | Mapping[str, Any] | str | Path, *, overrides: Sequence[str] = (),
        output_dir: str | Path | None = None, progress: bool | None = False,
        base_dir: str | Path | None = None,
        on_progress: Callable[[int, int, int], None] | None = None,
        on_request: Callable[[RequestRecord], None] | None = None, log_events: int = 0,
        overwrite: bool = False, command: Sequence[str] | None = None, in_process: bool = False,
        stop: RunStop | None = None) -> RunResult:
    """Runs a scenario and returns its result.

    Args:
        config: a path to a YAML file, a mapping, or a parsed config.
        overrides: ``key=value`` assignments, as ``cosim run --set``.
        output_dir: write the run folder here (default: the config's ``output.dir``, if any).
        progress: show a progress bar (None: when stderr is a terminal).
        base_dir: folder relative paths in the config resolve against.
        on_progress: called with (completed requests, total requests, simulated ns) now and then.
        on_request: called with each finished request; a CosimError it raises stops the run there, and
            ``run`` raises it (e.g. :class:`cosim.hub.studies.search.early_stop.StopRun`).
        log_events: keep the first this many events in ``RunResult.events``.
        overwrite: replace the files of a run folder that exists and is not empty (else refused).
        command: the command line run.json records (default: this process's).
        in_process: call built-in and ``python:`` runtime backends in this thread, without gRPC: the
            same servicers and results, without the price of the boundary (docs/performance.md).
        stop: stops the run from another thread (a hub's, whose submitter went away): between two
            events, as Ctrl-C, in the run and its intervals' reruns (at its first event if it came
            earlier, so a stopped run has its folder all the same).

    Raises:
        ScenarioError: the config is invalid, or the run folder is taken (and not ``overwrite``) or
            cannot be written (checked before any backend starts).
        BackendError: a backend failed (the partial run folder is written first).
        KeyboardInterrupt: Ctrl-C, SIGTERM where :func:`cosim.hub.studies.interrupts.sigterm_raises` is in
            force, or ``stop``'s Stopped (the partial run folder is written first, and the backends the run
            started are stopped).
    """
    if isinstance(config, (str, Path)):
        scenario, folder = load_config(config, overrides=overrides)
    elif isinstance(config, ScenarioConfig):
        scenario = parse_config(config.model_dump(), overrides=overrides) if overrides else config
        folder = scenario_folder(scenario, Path.cwd())
    else:
        scenario = parse_config(config, overrides=overrides)
        folder = scenario_folder(scenario, Path.cwd())
    folder = Path(base_dir) if base_dir is not None else folder
    source = str(config) if isinstance(config, (str, Path)) else ""
    # Every resolution problem at once, before any backend starts (the simulation would stop at the first).
    check_scenario(scenario, source=source)
    out_dir = output_dir if output_dir is not None else scenario.output.dir
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        check_run_folder(out, overwrite=overwrite)
    started, started_at = time.perf_counter(), time.time()
    # A lab's `python:` backend imports from the config's folder and the working directory, as a
    # script's own modules do; only for a config read from a file (never one a hub was sent). The
    # config's folder is its base_dir where it has one: a run folder's config.yaml names the original.
    import_paths = tuple(dict.fromkeys((folder, Path(config).resolve().parent, Path.cwd()))) if isinstance(
        config, (str, Path)) else ()
    interrupt: KeyboardInterrupt | None = None
    with started_backends(scenario, backend_names(scenario), in_process=in_process,
                          import_paths=import_paths) as backends:
        simulation = Simulation(scenario, folder, backends, log_events=log_events)
        try:
            error = simulation.run(progress=progress, on_progress=on_progress, on_request=on_request, stop=stop)
        except KeyboardInterrupt as held:  # Ctrl-C, SIGTERM or stop (interrupts.py): keep what ran, as for a fault
            interrupt = held
            error = Interrupted(f"{interruption(held)} at t={simulation.kernel.now_ns / 1e9:.6f}s")
        summary = simulation.summarize(time.perf_counter() - started)
        if scenario.output.intervals and error is None:
            try:
                summary["intervals"] = run_intervals(scenario, folder, backends, simulation, summary, stop)
            except KeyboardInterrupt as held:  # the run itself is whole: written without its intervals
                interrupt = held
                error = Interrupted(f"{interruption(held)} in the prediction intervals' reruns")
    if error is not None:
        summary["error"] = str(error)
    result = RunResult(summary=summary, requests=simulation.coordinator.requests, clients=simulation.infos,
                       error=error, events=simulation.kernel.log)
    try:
        if out is not None:
            write_provenance(out, scenario, base_dir=folder, command=command, source=source or None,
                             overrides=overrides, started_at=started_at)
            result.output_dir = write_run_folder(out, summary, result.requests, result.clients,
                                                 simulation.timelines(),
                                                 plots=scenario.output.plots, table=simulation.request_table(),
                                                 requests_format=scenario.output.requests_format)
    finally:
        simulation.close()
    if interrupt is not None:
        log.warning("run %s; partial run folder: %s", error, result.output_dir or "(none: no -o)")
        raise interrupt
    if error is not None:
        raise error
    return result
