"""requests.parquet: requests.csv's columns as a typed Parquet table, written in row groups.

Asked for with ``output.requests_format: parquet`` (it then replaces requests.csv). Columns and their
order are requests.csv's (:func:`cosim.hub.metrics.tables.request_columns`): times in float seconds,
counts int64, names strings, and a cell requests.csv leaves empty is null. Rows are written
``ROW_GROUP_ROWS`` at a time, so writing a million requests holds one group in memory. Needs pyarrow,
an optional dependency (``pip install 'cosim[parquet]'``); :func:`require_pyarrow` says so before a
run starts. Bytes depend only on the requests and the pyarrow version.

Main names: :func:`write_requests_parquet`, :func:`read_requests_parquet`, :func:`require_pyarrow`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..sim.records import RequestRecord
from .request_table import RequestTable
from .stats import NS_PER_S
from .tables import Cell, request_columns, request_rows

PIP_COMMAND = "pip install 'cosim[parquet]'"
ROW_GROUP_ROWS = 65_536


def require_pyarrow() -> ModuleType:
    """pyarrow, or an ImportError naming the pip command that installs it."""
    try:
        import pyarrow
        import pyarrow.parquet  # the writer lives in the submodule
    except ImportError as err:
        raise ImportError(f"requests.parquet needs pyarrow, an optional dependency of cosim: {PIP_COMMAND} "
                          "(or pip install pyarrow)") from err
    module: ModuleType = pyarrow
    return module


def _value(kind: str, value: Cell) -> Any:
    if value is None:
        return None
    if kind == "ns":
        return int(value) / NS_PER_S
    if kind == "s":
        return None if math.isnan(float(value)) else float(value)
    return value


def write_requests_parquet(path: Path, requests: Iterable[RequestRecord], table: RequestTable) -> None:
    """Writes requests.parquet.

    Args:
        path: the file.
        requests: every request sorted by id, read once (a run's records may come back from a file).
        table: the requests' numbers (:class:`RequestTable`).
    """
    pa = require_pyarrow()
    columns = request_columns(table)
    types = {"ns": pa.float64(), "s": pa.float64(), "int": pa.int64(), "str": pa.string()}
    schema = pa.schema([(name, types[kind]) for name, kind in columns])
    with pa.parquet.ParquetWriter(path, schema) as writer:
        group: list[list[Cell]] = []
        for row in request_rows(requests, table):
            group.append(row)
            if len(group) == ROW_GROUP_ROWS:
                writer.write_table(_table(pa, schema, columns, group))
                group = []
        if group or not len(table):  # an empty run still has its columns
            writer.write_table(_table(pa, schema, columns, group))


def _table(pa: ModuleType, schema: Any, columns: list[tuple[str, str]], rows: list[list[Cell]]) -> Any:
    arrays = [pa.array([_value(kind, row[i]) for row in rows], type=schema.field(i).type)
              for i, (_, kind) in enumerate(columns)]
    return pa.Table.from_arrays(arrays, schema=schema)


def read_requests_parquet(path: Path, names: Iterable[str]) -> dict[str, list[Any]]:
    """The named columns of a requests.parquet as lists (None for nulls)."""
    pa = require_pyarrow()
    data = pa.parquet.read_table(path, columns=list(names))
    return {name: data.column(name).to_pylist() for name in data.column_names}
