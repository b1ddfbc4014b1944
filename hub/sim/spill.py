"""Fixed-width rows that spill to an anonymous temporary file, so a long run's memory stays flat.

:class:`SpillRows` keeps the rows a run appends (one per client step, one per finished request) in a
small in-memory buffer and writes each full buffer to a temporary file (unnamed: the system removes it
when it is closed or the process ends). A run closes its tables when it ends (``Simulation.close``); a
table dropped unclosed has its file closed when it is collected or the process exits, without a
``ResourceWarning``. :meth:`SpillRows.columns` reads every row back as numpy
columns; only that read costs memory in proportion to the rows.

Main names: :class:`SpillRows`, :data:`INT64`, :data:`INT32`, :data:`INT8`.
"""

from __future__ import annotations

import struct
import tempfile
import weakref
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

# Field types: (struct code, numpy code), little-endian and unpadded in both.
INT64 = ("q", "i8")
INT32 = ("i", "i4")
INT8 = ("b", "i1")

DEFAULT_BUFFER_BYTES = 256 * 1024  # per table: a fleet of a hundred clients buffers 25 MB at most


class SpillRows:
    """An append-only table of integer rows, buffered in memory and spilled to a temporary file.

    Args:
        fields: (name, type) per column, types from :data:`INT64`, :data:`INT32`, :data:`INT8`.
        buffer_bytes: how much of the table stays in memory before it is written out (default
            :data:`DEFAULT_BUFFER_BYTES`, read when the table is made).
    """

    def __init__(self, fields: Sequence[tuple[str, tuple[str, str]]], *, buffer_bytes: int | None = None) -> None:
        self.names = tuple(name for name, _ in fields)
        self._struct = struct.Struct("<" + "".join(code for _, (code, _) in fields))
        self.dtype = np.dtype([(name, "<" + kind) for name, (_, kind) in fields])
        assert self.dtype.itemsize == self._struct.size
        self._buffer_bytes = max(buffer_bytes or DEFAULT_BUFFER_BYTES, self._struct.size)
        self._buffer = bytearray()
        self._file: IO[bytes] | None = None
        self._num_rows = 0

    def append(self, *values: int) -> None:
        """Adds one row (values in column order)."""
        self._buffer += self._struct.pack(*values)
        self._num_rows += 1
        if len(self._buffer) >= self._buffer_bytes:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            # open until close(): the file is the table's storage; closed with the table at the latest
            self._file = tempfile.TemporaryFile(prefix="cosim-spill-")  # noqa: SIM115
            weakref.finalize(self, self._file.close)
        self._file.seek(0, 2)
        self._file.write(self._buffer)
        self._buffer = bytearray()

    def __len__(self) -> int:
        return self._num_rows

    def _raw(self) -> bytes:
        """Every row's bytes, spilled ones first."""
        if self._file is None:
            return bytes(self._buffer)
        self._file.seek(0)
        return self._file.read() + self._buffer

    def rows(self) -> np.ndarray:
        """Every row as one structured array, in append order."""
        return np.frombuffer(self._raw(), dtype=self.dtype)

    def columns(self) -> dict[str, np.ndarray]:
        """Every row as int64 columns by name, in append order (empty arrays for no rows)."""
        rows = self.rows()
        return {name: rows[name].astype(np.int64) for name in self.names}

    def close(self) -> None:
        """Drops the rows and removes the temporary file."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._buffer, self._num_rows = bytearray(), 0

    # A table crosses processes (pickle) with its rows, not its file.
    def __getstate__(self) -> dict[str, Any]:
        return {"raw": self._raw(), "dtype": self.dtype.descr, "format": self._struct.format,
                "buffer_bytes": self._buffer_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.names = tuple(name for name, _ in state["dtype"])
        self._struct = struct.Struct(state["format"])
        self.dtype = np.dtype(state["dtype"])
        self._buffer_bytes = state["buffer_bytes"]
        self._buffer = bytearray(state["raw"])
        self._file = None
        self._num_rows = len(self._buffer) // self._struct.size
