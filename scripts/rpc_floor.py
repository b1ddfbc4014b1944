"""What one step call costs at the gRPC boundary, as runs make it.

Times ``--calls`` PredictSteps calls of ``--batches`` decode batches of ``--sequences`` sequences
each (a chat-10k call holds 17 batches of 40 on average) to the roofline backend three ways, with
the hub's own client and the SDK's own server:

- ``in-process``: the servicer called directly (``cosim bench``'s in-process runs);
- ``gRPC, same process``: over loopback to a server in this process (how runs serve built-in backends);
- ``gRPC, child process``: over loopback to ``python -m cosim.adapters.roofline`` (a lab's simulator).

The calls' contexts differ, so the backend times every batch (no cache hit) and does the same work
each way; the difference per call is the boundary's price. ``cosim bench NAME`` reports a run's
calls (``rpcs_per_step`` × ``steps``), so a scenario's gRPC / in-process ratio is at least
1 + calls × (this price) / (the in-process wall)::

    .venv/bin/python scripts/rpc_floor.py [--calls 2000] [--batches 17] [--sequences 40]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from cosim.adapters.sdk.samples import sample_session_spec
from cosim.hub.backends import RuntimeClient
from cosim.hub.backends.inprocess import in_process_runtime_client
from cosim.hub.backends.kinds import BUILTIN_BACKENDS
from cosim.hub.backends.launchers import LaunchedBackend, launch_command, launch_python

ROOFLINE = BUILTIN_BACKENDS["roofline"]


def time_calls(client: RuntimeClient, calls: int, batches: int, sequences: int) -> float:
    """Seconds a call, over ``calls`` calls of distinct decode batches (after one warm-up call)."""
    session = client.open_session(sample_session_spec()).session_id
    make = client.step_batch

    def call(i: int) -> None:
        shapes = [[1000 + (i * batches + b) * sequences + s for s in range(sequences)] for b in range(batches)]
        client.predict_steps(session, [make(new_tokens=[1] * sequences, context_tokens=c) for c in shapes],
                             omit_breakdown=True)

    call(0)
    began = time.perf_counter()
    for i in range(1, calls + 1):
        call(i)
    return (time.perf_counter() - began) / calls


def over_grpc(launch: Callable[[], LaunchedBackend], calls: int, batches: int, sequences: int) -> float:
    handle = launch()
    client = RuntimeClient("roofline", handle.address)
    try:
        return time_calls(client, calls, batches, sequences)
    finally:
        client.close()
        handle.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=17, help="batches a call")
    parser.add_argument("--sequences", type=int, default=40, help="decode sequences a batch")
    args = parser.parse_args()
    shape = (args.calls, args.batches, args.sequences)
    child = [sys.executable, "-m", "cosim.adapters.roofline", "--port", "{port}"]
    ways = {
        "in-process": lambda: time_calls(in_process_runtime_client("roofline", ROOFLINE), *shape),
        "gRPC, same process": lambda: over_grpc(lambda: launch_python("roofline", ROOFLINE), *shape),
        "gRPC, child process": lambda: over_grpc(lambda: launch_command("roofline", child), *shape),
    }
    per_call = {way: measure() for way, measure in ways.items()}
    base = per_call["in-process"]
    print(f"{args.calls} calls of {args.batches} batches x {args.sequences} decodes")  # noqa: T201
    for way, seconds in per_call.items():
        extra = "" if way == "in-process" else f"  (+{(seconds - base) * 1e6:.0f} us the boundary)"
        print(f"  {way:20s} {seconds * 1e6:7.0f} us a call{extra}")  # noqa: T201


if __name__ == "__main__":
    main()
