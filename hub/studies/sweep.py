"""``cosim sweep``: one run per point of a grid of config values, tabulated and plotted.

Main names: :func:`sweep` (``cosim.sweep``) and :func:`parse_vary`.
Each ``--vary key=v1,v2,...`` names one config field in the dotted syntax of
``--set``; several make a grid (points in ``itertools.product`` order: the last
key varies fastest). The sweep folder
holds one run folder per point, ``sweep.csv`` (one row per point: the varied
values, then :data:`METRIC_COLUMNS`), ``plots/latency_vs_load.png`` and ``report.html``
(both on one page, :mod:`~cosim.hub.studies.study_report`).
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..config.loading import ScenarioProblems, load_config
from ..errors import CosimError, ScenarioError
from .frames import sweep_frame
from .key_metrics import METRIC_COLUMNS, key_metrics
from .provenance import check_run_folder
from .study_report import write_sweep_report
from .validation import validate

if TYPE_CHECKING:  # pandas is optional (frames.py)
    import pandas as pd

log = logging.getLogger(__name__)

SWEEP_CSV = "sweep.csv"


@dataclass(frozen=True)
class Vary:
    """One ``--vary``: a config key and its values (as written, and as YAML reads them)."""

    key: str
    texts: tuple[str, ...]

    @property
    def leaf(self) -> str:
        """The last name of the key (``rate_per_s`` of ``workload.arrival.rate_per_s``)."""
        return [p for p in re.split(r"\.|\[\d+\]", self.key) if p][-1]


@dataclass
class SweepResult:
    """What a sweep produced.

    Attributes:
        rows: one dict per point (the columns of sweep.csv): ``point`` (its subfolder), the varied
            keys with their values, :data:`METRIC_COLUMNS`, and ``error`` ("" when the run finished).
        varies: the varied keys and values.
        output_dir: the sweep folder.
    """

    rows: list[dict[str, Any]]
    varies: list[Vary]
    output_dir: Path
    failed: list[str] = field(default_factory=list)

    def df(self) -> pd.DataFrame:
        """The rows as a pandas DataFrame, the varied values typed (``rate_per_s`` 4, not ``"4"``); needs
        pandas (``pip install 'cosim[pandas]'``)."""
        return sweep_frame(self.rows, [v.key for v in self.varies])


def parse_vary(spec: str) -> Vary:
    """Reads ``key=v1,v2,...`` (or ``key=[v1, v2]`` in YAML, for values holding commas).

    Raises:
        ScenarioError: no ``=``, or no values.
    """
    key, sep, raw = spec.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key or not raw:
        raise ScenarioError(f"--vary {spec}", "expected key=v1,v2,..., e.g. workload.arrival.rate_per_s=1,2,4,8")
    try:
        parsed = yaml.safe_load(raw)
    except yaml.YAMLError:
        parsed = None
    texts = [json.dumps(v) for v in parsed] if isinstance(parsed, list) else [t.strip() for t in raw.split(",")]
    if not texts or any(not t for t in texts):
        raise ScenarioError(f"--vary {spec}", "a value is empty; separate values by single commas")
    return Vary(key, tuple(texts))


def grid(varies: Sequence[Vary]) -> list[tuple[str, ...]]:
    """Every point of the grid: one value text per vary, the last vary fastest."""
    keys = [v.key for v in varies]
    duplicated = sorted({k for k in keys if keys.count(k) > 1})
    if duplicated:
        raise ScenarioError("--vary", f"{duplicated[0]} is varied twice; give all its values in one --vary")
    return list(itertools.product(*(v.texts for v in varies)))


def point_name(index: int, varies: Sequence[Vary], texts: Sequence[str]) -> str:
    """The subfolder of a point, e.g. ``001-rate_per_s=2``."""
    parts = "-".join(f"{v.leaf}={t}" for v, t in zip(varies, texts))
    return f"{index:03d}-" + re.sub(r"[^A-Za-z0-9._=+-]", "_", parts)


def sweep(config: str | Path, vary: Sequence[str | Vary], *, output_dir: str | Path | None = None,
          overrides: Sequence[str] = (), overwrite: bool = False, run_plots: bool = False, plots: bool = True,
          command: Sequence[str] | None = None, in_process: bool = False, workers: int = 1,
          ray: str | None = None, on_point: Callable[[int, int, dict[str, Any]], None] | None = None) -> SweepResult:
    """Runs ``config`` at every point of the grid ``vary`` spans.

    Every point's config is validated before the first runs, as ``cosim validate`` checks it (its
    workload drawn too, so a prompt no client can serve is refused here, not by every point's run). A
    point whose run fails (a backend error) keeps its partial run folder and an ``error`` in its row;
    the others still run.

    Args:
        config: the scenario YAML file.
        vary: ``key=v1,v2,...`` specs (or parsed :class:`Vary`), one per varied key.
        output_dir: the sweep folder (default: ``runs/sweep/<config file stem>``).
        overrides: ``key=value`` assignments applied to every point, before its own.
        overwrite: replace the files of a sweep folder (and its points') that exist (else refused).
        run_plots: draw each point's own plots/*.png too (off by default: the slowest part of a run).
        plots: draw the sweep's latency-vs-load plot (report.html is written either way).
        command: the command line each point's run.json records.
        in_process: call built-in and ``python:`` runtime backends without gRPC (as :func:`run`).
        workers: run this many points at once, each in a local process of its own (1: here, one by one).
        ray: run each point as a Ray task on this cluster instead (``auto``, ``host:port``, ``ray://...``;
            ``local`` starts Ray here), as ``cosim search --ray``. The points' runs are the same whatever
            runs them, and so is sweep.csv, in grid order.
        on_point: called with (point index, number of points, row) as each point finishes.

    Returns:
        The rows, also written to ``sweep.csv``.

    Raises:
        ScenarioError: a bad ``--vary``, a point whose config is invalid, or a taken sweep folder.
    """
    from .search.executors import unordered  # late: the search's executors import its goodput search

    varies = [v if isinstance(v, Vary) else parse_vary(v) for v in vary]
    if not varies:
        raise ScenarioError("--vary", "give at least one --vary key=v1,v2,...")
    if workers < 1:
        raise ScenarioError("--workers", f"must be at least 1, got {workers}")
    points = grid(varies)
    out = Path(output_dir) if output_dir is not None else Path("runs") / "sweep" / Path(config).stem
    check_run_folder(out, overwrite=overwrite)
    extra = [] if run_plots else ["output.plots=false"]
    assignments = [[*overrides, *extra, *(f"{v.key}={t}" for v, t in zip(varies, texts))] for texts in points]
    for texts, sets in zip(points, assignments):  # every problem before the first run, as cosim validate finds them
        problems = validate(config, overrides=sets)
        if problems:
            where = ", ".join(f"{v.key}={t}" for v, t in zip(varies, texts))
            raise ScenarioError(f"sweep point {where}", str(ScenarioProblems(str(config), problems)))
    base, _ = load_config(config, overrides=overrides)
    jobs = []
    for index, (texts, sets) in enumerate(zip(points, assignments)):
        name = point_name(index, varies, texts)
        jobs.append({"index": index, "config": str(config), "overrides": sets, "output_dir": str(out / name),
                     "row": {"point": name, **{v.key: t for v, t in zip(varies, texts)}}, "overwrite": overwrite,
                     "command": None if command is None else list(command), "in_process": in_process})
    rows: dict[int, dict[str, Any]] = {}
    for done in unordered(run_point, jobs, workers=workers, ray_address=ray):
        index = done.pop("index")
        rows[index] = done
        if on_point is not None:
            on_point(index, len(points), done)
    result = SweepResult(rows=[rows[index] for index in range(len(points))], varies=varies, output_dir=out)
    result.failed = [row["point"] for row in result.rows if row["error"]]
    out.mkdir(parents=True, exist_ok=True)  # no point may have written its folder: every one failed
    write_sweep_csv(out / SWEEP_CSV, result.rows, varies)
    keys, pngs = [v.key for v in varies], []
    if plots:
        from ..metrics.comparison_plots import plot_latency_vs_load  # late: matplotlib takes 0.3 s

        (out / "plots").mkdir(exist_ok=True)
        pngs.append(out / "plots" / "latency_vs_load.png")
        plot_latency_vs_load(pngs[0], result.rows, keys, base.slo)
    write_sweep_report(out, result.rows, keys, base.slo, pngs)
    return result


def run_point(job: dict[str, Any]) -> dict[str, Any]:
    """One point of a sweep (a job of :func:`sweep`'s, plain data for any executor): its run folder, and its
    row of sweep.csv with its ``index``. A run that fails keeps its partial folder and an ``error``."""
    from .runner import run  # late: the runner imports every backend

    row = {"index": job["index"], **job["row"]}
    try:
        summary = run(job["config"], overrides=job["overrides"], output_dir=job["output_dir"],
                      overwrite=job["overwrite"], command=job["command"], in_process=job["in_process"]).summary
        return row | key_metrics(summary) | {"error": ""}
    except CosimError as err:
        log.warning("sweep point %s failed: %s", row["point"], err)
        summary_file = Path(job["output_dir"]) / "summary.json"
        partial = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
        return row | key_metrics(partial) | {"error": str(err)}


def write_sweep_csv(path: Path, rows: Sequence[Mapping[str, Any]], varies: Sequence[Vary]) -> None:
    """sweep.csv: ``point``, the varied keys, :data:`METRIC_COLUMNS`, ``error``; empty cells for None."""
    header = ["point", *(v.key for v in varies), *METRIC_COLUMNS, "error"]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else row[c] for c in header])
