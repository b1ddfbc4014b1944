"""Inter-client transfers over a plain link (bandwidth + latency).

The default when the config names no network backend: a transfer of ``S``
bytes takes ``latency + S / bandwidth``, with no contention, truncated to ns.
"""

from __future__ import annotations

from .config import LinkConfig


class LinkTransfers:
    """Times transfers on one documented link shared by every client pair."""

    def __init__(self, link: LinkConfig) -> None:
        self.bytes_per_ns = link.bandwidth_gbps  # GB/s (decimal) is bytes per ns
        self.latency_ns = int(round(link.latency_s * 1e9))

    def duration_ns(self, src: str, dst: str, size_bytes: int, *, now_ns: int) -> int:
        return self.latency_ns + int(size_bytes / self.bytes_per_ns)
