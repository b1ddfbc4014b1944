"""ASTRA-sim input files and output parsing, checked against cosim's own ASTRA-sim loaders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosim.adapters.astrasim import (
    network_yml,
    parse_finish_ns,
    read_et,
    system_json,
    write_collective,
    write_transfer,
)
from cosim.adapters.astrasim.chakra import attributes
from cosim.adapters.network.astra_inputs import load_network_yml, load_system_json
from cosim.v1 import network_service_pb2 as net_pb


def make_spec() -> net_pb.NetworkSessionSpec:
    spec = net_pb.NetworkSessionSpec(system=net_pb.SystemConfig(
        endpoint_delay_ns=10, preferred_dataset_splits=4, all_to_all=[net_pb.COLLECTIVE_ALGORITHM_DIRECT] * 2,
        collective_optimization=net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE))
    spec.dims.add(kind=net_pb.TOPOLOGY_KIND_RING, npus=4, bandwidth_gbps=100.0, latency_ns=500)
    spec.dims.add(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=2, bandwidth_gbps=25.0, latency_ns=2000)
    return spec


def test_network_yml_reads_back_as_the_same_topology(tmp_path: Path) -> None:
    path = tmp_path / "network.yml"
    path.write_text(network_yml(make_spec()))
    dims = load_network_yml(path)
    assert [(d.kind, d.npus, d.latency_ns) for d in dims] == [(1, 4, 500), (3, 2, 2000)]
    assert [d.bandwidth_gbps for d in dims] == pytest.approx([100.0, 25.0], rel=1e-12)


def test_system_json_reads_back_as_the_same_system(tmp_path: Path) -> None:
    path = tmp_path / "system.json"
    path.write_text(json.dumps(system_json(make_spec())))
    system = load_system_json(path)
    assert (system.endpoint_delay_ns, system.preferred_dataset_splits) == (10, 4)
    assert list(system.all_reduce) == [net_pb.COLLECTIVE_ALGORITHM_RING] * 2
    assert list(system.all_to_all) == [net_pb.COLLECTIVE_ALGORITHM_DIRECT] * 2
    assert system.collective_optimization == net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE
    assert system.local_mem_bandwidth_gbps > 1e9  # "free" reductions, never ASTRA-sim's divide by zero


def test_layered_transfer_is_a_chain_of_matched_sends_and_receives(tmp_path: Path) -> None:
    files = write_transfer(tmp_path, make_spec(), [0], [4], 3000, layers=3)
    assert files is not None
    _, sends = read_et(f"{files.workload_prefix}.0.et")
    _, recvs = read_et(f"{files.workload_prefix}.4.et")
    assert [attributes(n)["comm_size"] for n in sends] == [1000] * 3
    assert [list(n.ctrl_deps) for n in sends] == [[], [0], [1]]
    assert [(attributes(n)["comm_src"], attributes(n)["comm_tag"]) for n in recvs] == [(0, 0), (0, 1), (0, 2)]
    (idle,) = read_et(f"{files.workload_prefix}.1.et")[1]  # ASTRA-sim stops on a trace without nodes
    assert (idle.type, attributes(idle)["is_cpu_op"]) == (4, False)


def test_collective_on_a_group_names_it_in_pg_name(tmp_path: Path) -> None:
    """ASTRA-sim runs a collective on its default group (all NPUs) unless the node names the comm group."""
    files = write_collective(tmp_path, make_spec(), net_pb.COLLECTIVE_KIND_ALL_REDUCE, 4096, [4, 5])
    assert files.comm_group is not None and json.loads(files.comm_group.read_text()) == {"1": [4, 5]}
    (node,) = read_et(f"{files.workload_prefix}.4.et")[1]
    assert (attributes(node)["pg_name"], attributes(node)["comm_size"]) == ("1", 4096)
    assert [n.name for n in read_et(f"{files.workload_prefix}.0.et")[1]] == ["IDLE"]
    everyone = write_collective(tmp_path / "all", make_spec(), net_pb.COLLECTIVE_KIND_ALL_REDUCE, 4096, None)
    assert everyone.comm_group is None
    assert "pg_name" not in attributes(read_et(f"{everyone.workload_prefix}.0.et")[1][0])


def test_finish_time_is_the_latest_npu() -> None:
    log = ("[2025-01-01 10:00:00.000] [workload] [info] sys[0] finished, 41189 cycles, exposed communication "
           "41189 cycles.\n[2025-01-01 10:00:00.000] [workload] [info] sys[1] finished, 41190 cycles, "
           "exposed communication 41190 cycles.\n")
    assert parse_finish_ns(log) == 41190
    with pytest.raises(ValueError, match="finished"):
        parse_finish_ns("[critical] workload file does not exist")
