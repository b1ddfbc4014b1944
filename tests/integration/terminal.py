"""A terminal for a child's stderr, so that it draws its progress bar: the sign a run is under way."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import termios
import threading
import time


class Terminal:
    """A pseudo-terminal of 100 columns; ``slave`` is the child's stderr, read here on a thread.

    A child's progress bar (drawn only on a terminal) says how far it is: :meth:`wait_for` a
    pattern of it instead of sleeping and hoping.
    """

    def __init__(self) -> None:
        self._master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every writer has closed it
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    def started(self) -> None:
        """Closes this process's copy of the child's end (once the child has it)."""
        os.close(self.slave)

    @property
    def text(self) -> str:
        """What the child wrote so far, progress bars included."""
        return b"".join(self._chunks).decode(errors="replace")

    def wait_for(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first match of ``pattern`` in what the child wrote; fails after ``timeout_s`` (a generous
        bound: the wait ends at the match) or once the child has closed the terminal without it."""
        deadline = time.monotonic() + timeout_s
        while True:
            reading = self._reader.is_alive()
            if found := re.search(pattern, self.text):
                return found
            assert reading and time.monotonic() < deadline, \
                f"no {pattern!r} within {timeout_s:.0f} s; the child wrote:\n{self.text[-3000:]}"
            time.sleep(0.05)

    def finished(self, timeout_s: float = 30) -> str:
        """Everything the child wrote, once it has exited (and so closed the terminal)."""
        self._reader.join(timeout_s)
        if not self._reader.is_alive() and self._master >= 0:
            os.close(self._master)
            self._master = -1
        return self.text
