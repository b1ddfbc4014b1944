"""The discrete-event kernel: a clock and a heap of events. No gRPC, no I/O.

The kernel is the compiled core's (core/src/kernel.rs): events are ordered by
``(time_ns, priority, seq)``, ``seq`` from the kernel's own counter, so events
at the same time and priority run in the order they were scheduled and every
run is deterministic. Each event carries a label (``arrival``, ``wake c0``,
``step done c0``, ...), and the kernel can keep the first events it handles
(``cosim run --log-events N``).
"""

from __future__ import annotations

from cosim_core import ARRIVAL, DONE, MAX_SIM_NS, WAKE, Kernel

__all__ = ["ARRIVAL", "DONE", "MAX_SIM_NS", "WAKE", "Kernel"]

# Priorities at equal times (the core's, core/src/kernel.rs): finished work (DONE) frees resources
# before new work arrives (ARRIVAL), and clients pick their next batch (WAKE) only after both.
