"""pandas DataFrames of a run, for notebooks: ``RunResult.requests_df()`` and ``summary_df()``.

pandas is optional (``pip install 'cosim[pandas]'``); :func:`require_pandas`
says so when it is missing. Times come in seconds (``*_s``, as in requests.csv
and summary.json) and, beside each, in milliseconds (``*_ms``); rates
(``*_per_s``) are not times and have no twin.

- :func:`requests_frame`: requests.csv as a DataFrame, one row per request.
- :func:`summary_frame`: summary.json flattened, one row per scope: ``run``
  (the whole run) and then each client, columns named by their dotted path
  (``latency.ttft_s.p90`` and ``latency.ttft_ms.p90``, ``throughput.requests_per_s``).
- :func:`sweep_frame`: a sweep's rows (``SweepResult.df()``), the varied values typed.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..metrics.tables import write_requests_csv
from ..sim.records import RequestRecord

if TYPE_CHECKING:  # pandas is optional: imported only where a frame is asked for
    import pandas as pd

PIP_COMMAND = "pip install 'cosim[pandas]'"
RUN_SCOPE = "run"


def require_pandas() -> Any:
    """The pandas module.

    Raises:
        ImportError: pandas is not installed, with the pip command that installs it.
    """
    try:
        import pandas
    except ImportError as err:
        raise ImportError(f"DataFrames of a run need pandas, an optional dependency of cosim: {PIP_COMMAND} "
                          "(or pip install pandas)") from err
    return pandas


def is_time(name: str) -> bool:
    """A name in seconds (``ttft_s``, ``busy_s``), not a rate (``requests_per_s``)."""
    return name.endswith("_s") and not name.endswith("_per_s")


def ms_name(name: str) -> str:
    """``ttft_s`` -> ``ttft_ms``."""
    return name.removesuffix("_s") + "_ms"


def requests_frame(requests: Sequence[RequestRecord] | Path) -> pd.DataFrame:
    """One row per request, sorted by id: requests.csv's columns, each time column followed by its
    ``_ms`` twin. Missing values (an unfinished request's E2E) are NaN. ``requests``: the records, or
    a requests.csv or requests.parquet written from them."""
    pandas = require_pandas()
    if isinstance(requests, Path) and requests.suffix == ".parquet":
        frame = pandas.read_parquet(requests)
    elif isinstance(requests, Path):
        frame = pandas.read_csv(requests, keep_default_na=False, na_values=[""])
    else:
        text = io.StringIO()
        write_requests_csv(text, requests)
        text.seek(0)
        frame = pandas.read_csv(text, keep_default_na=False, na_values=[""])
    for position, name in reversed(list(enumerate(frame.columns))):
        if is_time(name):
            frame.insert(position + 1, ms_name(name), frame[name] * 1000.0)
    return frame


def _flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Leaves of nested mappings by dotted path (lists left out)."""
    flat: dict[str, Any] = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= _flatten(value, f"{path}.")
        elif not isinstance(value, (list, tuple)):
            flat[path] = value
    return flat


def _with_ms(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Each number below a time name (``latency.ttft_s.p90``) followed by its millisecond twin
    (``latency.ttft_ms.p90``)."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        out[path] = value
        parts = path.split(".")
        times = [i for i, part in enumerate(parts) if is_time(part)]
        if times and isinstance(value, (int, float)) and not isinstance(value, bool):
            i = times[-1]
            out[".".join([*parts[:i], ms_name(parts[i]), *parts[i + 1:]])] = value * 1000.0
    return out


def summary_frame(summary: Mapping[str, Any]) -> pd.DataFrame:
    """summary.json as one row for the run (index ``run``) and one per client (index: its name),
    columns by dotted path, each time in seconds and in milliseconds (``latency.ttft_ms.p90``)."""
    pandas = require_pandas()
    clients = summary.get("clients") or {}
    whole = {key: value for key, value in summary.items() if key != "clients"}
    rows = {RUN_SCOPE: _with_ms(_flatten(whole))}
    rows |= {str(name): _with_ms(_flatten(entry)) for name, entry in clients.items()}
    frame = pandas.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "scope"
    return frame


def sweep_frame(rows: Sequence[Mapping[str, Any]], varied: Sequence[str]) -> pd.DataFrame:
    """A sweep's rows (sweep.csv's columns, in its order) with the ``varied`` keys' values typed as the
    config read them (``4`` an int, ``0.5`` and ``2.5e4`` floats, ``true`` a bool), not as text; metrics
    a point lacks are NaN."""
    pandas = require_pandas()
    typed = [{**row, **{key: _typed(str(row[key])) for key in varied}} for row in rows]
    return pandas.DataFrame(typed, columns=list(rows[0]) if rows else ["point", *varied])


def _typed(text: str) -> Any:
    """A ``--vary`` value as YAML reads it, and a number YAML 1.1 leaves as text (``2.5e4``) as the float the
    config's models make of it."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
    return value
