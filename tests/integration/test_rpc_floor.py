"""scripts/rpc_floor.py, the measure of a step call's price at the gRPC boundary, runs as documented."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.paths import REPO


def test_rpc_floor_times_the_three_ways_and_the_boundary_costs_something() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "rpc_floor.py"), "--calls", "20"],
                          capture_output=True, text=True, timeout=120, check=True)
    per_call = {m["way"]: float(m["us"]) for m in re.finditer(r"  (?P<way>.+?) +(?P<us>\d+) us a call", done.stdout)}
    assert list(per_call) == ["in-process", "gRPC, same process", "gRPC, child process"]
    assert per_call["gRPC, same process"] > per_call["in-process"]  # a loopback round trip is never free
    assert per_call["gRPC, child process"] > per_call["in-process"]
