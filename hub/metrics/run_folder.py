"""The run folder: summary.json, requests.csv (or requests.parquet), clients.csv, trace.json, plots/*.png, report.html.

Main name: :func:`write_run_folder`. Works on a partial run (a run that failed
part way writes what it has): unfinished requests get empty cells and open
trace slices. JSON and CSV bytes depend only on the inputs; PNGs may not.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..sim.records import ClientInfo, ClientTimeline, RequestRecord
from .html import write_report_html
from .request_table import RequestTable
from .stats import NS_PER_S, clean
from .summary import client_names
from .tables import DEFAULT_MAX_ROWS_PER_CLIENT, write_clients_csv, write_requests_csv
from .trace import DEFAULT_MAX_EVENTS, write_trace

logger = logging.getLogger(__name__)


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
    names = client_names(clients, timelines)
    if table is None:
        requests = sorted(requests, key=lambda r: r.id)
        table = RequestTable.of(requests)
    (folder / "summary.json").write_text(summary_json(summary), encoding="utf-8")
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
    logger.info("wrote run folder %s", folder)
    return folder
