"""The run folder: summary.json, requests.csv (or requests.parquet), clients.csv, trace.json, plots/*.png, report.html.

Main name: :func:`write_run_folder`. Works on a partial run (a run that failed
part way writes what it has): unfinished requests get empty cells and open
trace slices. JSON and CSV bytes depend only on the inputs; PNGs may not.

summary.json is written last, under a temporary name renamed into place, so a
folder whose writing was cut short (Ctrl-C, SIGTERM, a crash) never shows a
summary beside truncated files: it has none, or one whose ``error`` says the
folder is incomplete. :func:`require_complete` is the readers' check.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ScenarioError
from ..sim.records import ClientInfo, ClientTimeline, RequestRecord
from .html import write_report_html
from .request_table import RequestTable
from .stats import NS_PER_S, clean
from .summary import client_names
from .tables import DEFAULT_MAX_ROWS_PER_CLIENT, write_clients_csv, write_requests_csv
from .trace import DEFAULT_MAX_EVENTS, write_trace

logger = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
INCOMPLETE = "run folder incomplete"


def summary_json(summary: Mapping[str, Any]) -> str:
    """The canonical text of summary.json: sorted keys, rounded floats, no NaN."""
    return json.dumps(clean(summary), sort_keys=True, indent=2, allow_nan=False) + "\n"


def write_run_folder(out_dir: str | Path, summary: Mapping[str, Any], requests: Sequence[RequestRecord],
                     clients: Sequence[ClientInfo], timelines: Mapping[str, ClientTimeline], *,
                     plots: bool = True, max_rows_per_client: int = DEFAULT_MAX_ROWS_PER_CLIENT,
                     max_trace_events: int = DEFAULT_MAX_EVENTS, table: RequestTable | None = None,
                     requests_format: str = "csv") -> Path:
    """Writes the run folder (created if missing; existing files are replaced).

    Args:
        out_dir: the folder.
        summary: from :func:`cosim.hub.metrics.summarize`.
        requests, clients, timelines: the records the summary came from (``requests`` in any order;
            with ``table``, sorted by id: a run's records may come back one at a time from a file).
        plots: also draw plots/*.png (the slowest part; off for sweeps).
        max_rows_per_client: clients.csv downsampling limit (see ``tables``).
        max_trace_events: trace.json size limit (see ``trace``).
        requests_format: ``csv`` writes requests.csv, ``parquet`` requests.parquet (:mod:`.parquet`).
        table: the requests' numbers (:class:`RequestTable`), where the caller has them; files are
            written from it and one pass over ``requests``, so a long run's records need not fit in memory.

    Returns:
        The folder as a Path.
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SUMMARY_FILE).unlink(missing_ok=True)  # an overwritten folder's summary would outlive its files
    try:
        _write_files(folder, summary, requests, clients, timelines, plots=plots,
                     max_rows_per_client=max_rows_per_client, max_trace_events=max_trace_events, table=table,
                     requests_format=requests_format)
    except BaseException as stop:  # Ctrl-C, SIGTERM or a failed write: say so where readers look
        reason = type(stop).__name__ + (f": {stop}" if str(stop) else "")
        _write_summary(folder, {**summary, "error": f"{INCOMPLETE}: its writing stopped on {reason}"})
        raise
    _write_summary(folder, summary)
    logger.info("wrote run folder %s", folder)
    return folder


def _write_summary(folder: Path, summary: Mapping[str, Any]) -> None:
    """summary.json, whole or not at all: written beside it, then renamed over it."""
    temporary = folder / f".{SUMMARY_FILE}.tmp"
    try:
        temporary.write_text(summary_json(summary), encoding="utf-8")
        os.replace(temporary, folder / SUMMARY_FILE)
    finally:
        temporary.unlink(missing_ok=True)


def _write_files(folder: Path, summary: Mapping[str, Any], requests: Sequence[RequestRecord],
                 clients: Sequence[ClientInfo], timelines: Mapping[str, ClientTimeline], *, plots: bool,
                 max_rows_per_client: int, max_trace_events: int, table: RequestTable | None,
                 requests_format: str) -> None:
    """Every file of the run folder but summary.json (see :func:`write_run_folder`)."""
    names = client_names(clients, timelines)
    if table is None:
        requests = sorted(requests, key=lambda r: r.id)
        table = RequestTable.of(requests)
    if requests_format == "parquet":
        from .parquet import write_requests_parquet  # late: pyarrow is optional

        write_requests_parquet(folder / "requests.parquet", requests, table)
    else:
        write_requests_csv(folder / "requests.csv", requests, table)
    write_clients_csv(folder / "clients.csv", names, timelines, max_rows_per_client)
    dropped = write_trace(folder / "trace.json", names, timelines, requests, max_trace_events, table,
                          autoscaling=summary.get("autoscaling"))
    if dropped:
        logger.info("trace.json: kept the first %d events, dropped %d later ones", max_trace_events, dropped)
    if plots:
        sim_time_ns = round(float(summary.get("sim_time_s") or 0.0) * NS_PER_S)
        try:
            from .plots import write_plots  # late: importing matplotlib takes 0.3 s

            write_plots(folder / "plots", table, clients, names, timelines, sim_time_ns, summary.get("slo"))
            if summary.get("autoscaling"):
                from .autoscaling import plot_replicas

                plot_replicas(folder / "plots" / "replicas.png", table, summary["autoscaling"], sim_time_ns)
        except Exception as err:  # noqa: BLE001 - plots are extras; never lose the run folder for one
            logger.warning("could not draw plots in %s: %s", folder / "plots", err)
    write_report_html(folder, summary)


def require_complete(folder: str | Path) -> dict[str, Any]:
    """The summary of a run folder that is whole: a run that finished, with every file written.

    Raises:
        ScenarioError: naming the folder: no summary.json (not a run folder, or one whose writing was cut
            short), a summary.json that is not JSON, or a partial run's (its ``error`` says why).
    """
    path = Path(folder)
    try:
        summary = json.loads((path / SUMMARY_FILE).read_text(encoding="utf-8"))
    except OSError:
        raise ScenarioError(str(path), f"not a run folder (no {SUMMARY_FILE}), or one whose writing was "
                                       "cut short; give folders `cosim run` finished") from None
    except json.JSONDecodeError as err:
        raise ScenarioError(str(path / SUMMARY_FILE), f"not valid JSON: {err}") from None
    if not isinstance(summary, dict):
        raise ScenarioError(str(path / SUMMARY_FILE), "not a run summary (not a JSON object)")
    if summary.get("error"):
        raise ScenarioError(str(path), f"a partial run folder ({summary['error']}); rerun it to use it here")
    return summary
