"""A hub's memory returns to its baseline after a round of runs (issue 36, item 14).

What a finished run leaves in the hub's Python heap is measured with tracemalloc after a garbage
collection: the runs' folders are on disk, their records and backends gone. (The process's peak RSS
only rises, as an allocator keeps pages it once used, so it says nothing about retention.)
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import grpc

from cosim.hub.service.backend_registry import BackendRegistry
from cosim.hub.service.server import HubServer, HubServicer
from cosim.v1 import hub_service_pb2_grpc as hub_grpc
from tests.contract.test_hub_service import ALLOW_PYTHON, LINEAR, run_request, scenario

ROUND = 4  # runs a round
RETAINED_LIMIT = 512 * 1024  # bytes a round may leave behind: its runs' few registry entries, not their records


def _heap() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_a_round_of_runs_leaves_the_hubs_heap_at_its_baseline(tmp_path: Path) -> None:
    servicer = HubServicer(tmp_path / "runs", registry=BackendRegistry({}), data_dir=tmp_path, policy=ALLOW_PYTHON)
    tracemalloc.start()
    try:
        with HubServer(servicer) as hub, grpc.insecure_channel(hub.address) as channel:
            stub = hub_grpc.HubServiceStub(channel)

            def round_of_runs() -> None:
                for seed in range(ROUND):
                    updates = list(stub.Run(run_request(scenario({"python": LINEAR}), "workload.requests=200",
                                                        f"seed={seed}"), timeout=120))
                    assert updates[-1].completed_requests == 200 and not updates[-1].error

            round_of_runs()  # warm-up: imports, presets and caches filled once
            baseline = _heap()
            growth = []
            for _ in range(2):
                round_of_runs()
                growth.append(_heap() - baseline)
    finally:
        tracemalloc.stop()
    # A run's records alone are hundreds of kB (200 requests); four runs kept would be a megabyte or more.
    assert max(growth) < RETAINED_LIMIT, f"heap grew by {growth} bytes over rounds of {ROUND} runs"
