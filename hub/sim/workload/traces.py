"""Reading request traces (CSV or JSON lines) with errors that name file and line.

:func:`load_trace` reads a :class:`~cosim.hub.config.workload.TraceSource`
into a :class:`TraceTable`; the table parses a column on first use, so a
bad value in a column the scenario never reads is not an error. Every
problem raises :class:`~cosim.hub.errors.ScenarioError` located at
``path:line`` (line 1 is a CSV header).
"""

from __future__ import annotations

import calendar
import csv
import json
import math
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from cosim.hub.config.quoting import may_quote, quoted
from cosim.hub.config.workload import TimeUnit, TraceSource
from cosim.hub.errors import ScenarioError

_UNIT_NS = {"s": 1e9, "ms": 1e6, "us": 1e3}


class TraceTable:
    """The rows of one trace file, with columns parsed on demand.

    Attributes:
        label: the file as shown in error messages.
        columns: column names (the CSV header, or keys of the first JSON row).
    """

    def __init__(self, label: str, columns: list[str], values: dict[str, Sequence[Any]], lines: list[int]) -> None:
        self.label, self.columns = label, columns
        self._values, self._lines = values, lines  # per column, its raw value in each row (None: missing)
        self._parsed: dict[tuple[str, str], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._lines)

    def tokens(self, column: str) -> np.ndarray:
        """A token-count column as int64 (integers >= 0)."""
        return self._column(column, "tokens", _parse_tokens, bulk=_decimal_integers)

    def times_ns(self, column: str, unit: TimeUnit) -> np.ndarray:
        """An arrival-time column in integer nanoseconds (absolute; callers rebase)."""
        if unit == "datetime":
            return self._column(column, unit, _parse_datetime_ns)
        if unit == "ns":
            return self._column(column, unit, _parse_tokens, bulk=_decimal_integers)
        scale = _UNIT_NS[unit]
        return self._column(column, unit, lambda raw: round(_parse_float(raw) * scale))

    def line(self, row: int) -> int:
        """The file line of data row ``row``."""
        return self._lines[row]

    def names(self, column: str) -> list[str | None]:
        """A column of names (a LoRA adapter's): per row, the text, or None where it is empty."""
        out: list[str | None] = []
        for raw, line in zip(self._raw(column), self._lines):
            if raw is not None and not isinstance(raw, str | int):
                raise ScenarioError(f"{self.label}:{line}", f"{column}={quoted(raw, self.label)} is not a name")
            out.append(str(raw).strip() or None if raw is not None else None)
        return out

    def token_ids(self, column: str) -> list[np.ndarray]:
        """A token-ids column: per row, a JSON list of integers (or a space-separated string, in CSV)."""
        out = []
        for raw, line in zip(self._raw(column), self._lines):
            try:
                ids = np.array(raw.split() if isinstance(raw, str) else raw, dtype=np.int64)
                if ids.ndim != 1 or (ids < 0).any():
                    raise ValueError("is not a list of token ids (integers >= 0)")
            except (ValueError, TypeError, OverflowError) as err:
                shown = quoted(raw, self.label)
                shown = shown if len(shown) < 60 else f"{shown[:57]}..."
                raise ScenarioError(f"{self.label}:{line}", f"{column}={shown} {err}") from None
            out.append(ids)
        return out

    def _column(self, column: str, kind: str, parse: Callable[[Any], int],
                bulk: Callable[[Sequence[Any]], np.ndarray | None] = lambda raw: None) -> np.ndarray:
        """Column ``column`` parsed by ``parse``, once per ``kind``; ``bulk`` parses a whole column of
        values it can read as ``parse`` would (None where it cannot: then row by row, naming the
        first bad one)."""
        key = (column, kind)
        if key not in self._parsed:
            raw = self._raw(column)
            parsed = bulk(raw)
            if parsed is None:
                parsed = np.empty(len(raw), dtype=np.int64)
                for i, value in enumerate(raw):
                    try:
                        if value is None or value == "":
                            raise ValueError("is empty")
                        parsed[i] = parse(value)
                    except (ValueError, TypeError, OverflowError) as err:
                        raise ScenarioError(f"{self.label}:{self._lines[i]}",
                                            f"{column}={quoted(value, self.label)} {err}") from None
            self._parsed[key] = parsed
        return self._parsed[key]

    def _raw(self, column: str) -> Sequence[Any]:
        """Each row's value of ``column``, as read."""
        if column not in self._values:
            raise ScenarioError(f"{self.label}:1", f"no column {column!r}{self._columns_shown()}")
        return self._values[column]

    def _columns_shown(self) -> str:
        # The header is the file's text: a hub shows it only for files the submitter uploaded.
        return f"; columns are {self.columns}" if may_quote(self.label) else ""


def load_trace(source: TraceSource, base_dir: Path) -> TraceTable:
    """Read the file ``source`` names; a relative path is taken from ``base_dir``.

    Raises:
        ScenarioError: missing or unreadable file, malformed row, no data rows.
    """
    path = Path(source.path).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    label = str(path)
    if source.format == "sharegpt":
        return _sharegpt_table(source, path)
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = _read_jsonl if source.format in ("jsonl", "mooncake") else _read_csv
            columns, values, lines = reader(handle, label)
    except FileNotFoundError:
        raise ScenarioError(label, f"trace file not found (looked for {path.resolve()})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(label, f"cannot read trace file: {err}") from None
    if not lines:
        raise ScenarioError(label, "trace file has no data rows")
    return TraceTable(label, columns, values, lines)


def _read_csv(handle: Any, label: str) -> tuple[list[str], dict[str, Sequence[Any]], list[int]]:
    reader = csv.reader(handle)
    header = next(reader, None)
    if not header:
        raise ScenarioError(f"{label}:1", "empty trace file: expected a header row")
    header = [name.strip() for name in header]
    rows, lines = [], []
    try:
        for fields in reader:
            if not fields:
                continue  # blank line
            if len(fields) != len(header):
                shown = f" ({','.join(header)})" if may_quote(label) else ""
                raise ScenarioError(f"{label}:{reader.line_num}",
                                    f"expected {len(header)} fields{shown}, got {len(fields)}")
            rows.append(fields)
            lines.append(reader.line_num)
    except csv.Error as err:
        raise ScenarioError(f"{label}:{reader.line_num}", f"malformed CSV: {err}") from None
    return header, dict(zip(header, zip(*rows, strict=True))) if rows else {}, lines


def _read_jsonl(handle: Any, label: str) -> tuple[list[str], dict[str, Sequence[Any]], list[int]]:
    rows, lines = [], []
    columns: list[str] = []
    for number, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as err:
            raise ScenarioError(f"{label}:{number}", f"not valid JSON: {err.msg}") from None
        if not isinstance(row, dict):
            raise ScenarioError(f"{label}:{number}", f"expected a JSON object, got {type(row).__name__}")
        for key in row:
            if key not in columns:
                columns.append(key)
        rows.append(row)
        lines.append(number)
    return columns, {column: [row.get(column) for row in rows] for column in columns}, lines


def _parse_float(raw: Any) -> float:
    if isinstance(raw, bool):
        raise TypeError("is not a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError("is not a number") from None
    if not math.isfinite(value):
        raise ValueError("is not a finite number")
    return value


def _parse_tokens(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    else:
        number = _parse_float(raw)
        if not number.is_integer():
            raise ValueError("is not an integer")
        value = int(number)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _decimal_integers(raw: Sequence[Any]) -> np.ndarray | None:
    """A column of plain decimal strings (a CSV's token counts) as int64, read at once; None where a
    value is anything else, or too large for :func:`_parse_tokens`'s float to hold exactly."""
    try:
        if not all(map(str.isdecimal, raw)):
            return None
        values = np.fromiter(map(int, raw), np.int64, len(raw))
    except (TypeError, OverflowError):  # a value that is no string (JSON), or beyond int64
        return None
    return values if values.max(initial=0) <= 2**53 else None


def _parse_datetime_ns(raw: Any) -> int:
    """'2023-11-16 18:15:46.6805900' -> integer ns since the epoch, read as UTC.

    Fractions are kept to the nanosecond (datetime itself stops at microseconds).
    """
    if not isinstance(raw, str):
        raise TypeError("is not a date-time string")
    text = raw.strip()
    base, _, frac = text.partition(".")
    try:
        if frac and not frac.isdigit():
            stamp = datetime.fromisoformat(text)  # e.g. a time-zone suffix: microsecond precision
            return _epoch_s(stamp) * 1_000_000_000 + stamp.microsecond * 1000
        return _epoch_s(datetime.fromisoformat(base)) * 1_000_000_000 + int(frac[:9].ljust(9, "0") or 0)
    except ValueError:
        raise ValueError("is not an ISO date-time (YYYY-MM-DD HH:MM:SS[.fraction])") from None


def _epoch_s(stamp: datetime) -> int:
    if stamp.tzinfo is not None:
        return calendar.timegm(stamp.utctimetuple())
    return calendar.timegm(stamp.timetuple())


def _sharegpt_table(source: TraceSource, path: Path) -> TraceTable:
    """The first exchange of each ShareGPT conversation, as ``vllm bench serve`` samples them
    (vLLM's ``ShareGPTDataset``): the first message's length and its answer's (or
    ``fixed_output_tokens``), dropping pairs under 4 tokens and, unless the output is fixed,
    prompts over 1024 tokens and pairs over 2048. Lengths are counted at ``chars_per_token``."""
    from .session_traces import load_sessions  # the ShareGPT reader of workload.sessions

    if not path.is_file():
        raise ScenarioError(str(path), f"trace file not found (looked for {path.resolve()})")
    fixed = source.fixed_output_tokens
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    for session in load_sessions(path, "sharegpt", chars_per_token=source.chars_per_token):
        first = session.turns[0]
        prompt, output = first.input_tokens, fixed or first.output_tokens
        if prompt < 4 or output < 4 or (fixed is None and (prompt > 1024 or prompt + output > 2048)):
            continue
        rows.append({"input_tokens": prompt, "output_tokens": output})
        lines.append(int(session.source.rsplit(":", 1)[1]) if session.source else len(lines) + 1)
    if not rows:
        raise ScenarioError(str(path), "no conversation has a first message and answer vllm bench serve would take")
    columns = ["input_tokens", "output_tokens"]
    return TraceTable(str(path), columns, {column: [row[column] for row in rows] for column in columns}, lines)
