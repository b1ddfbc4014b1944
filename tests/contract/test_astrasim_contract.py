"""The astrasim backend over a real gRPC channel, driving a fake ASTRA-sim binary.

The fake (written below into a temporary folder) checks the inputs the way
ASTRA-sim 2.0 reads them: the four option names, network.yml and system.json
through cosim's ASTRA-sim loaders, one Chakra ET per NPU, matched sends and
receives, the communicator group. It then times the workload with cosim's
ASTRA-sim-equivalent network model and logs ``sys[i] finished, N cycles``
lines as ASTRA-sim does, so the tests check the whole mapping end to end.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cosim.adapters.astrasim import AstraSimBackend
from cosim.adapters.network import AnalyticalNetworkBackend
from cosim.adapters.network.astra_inputs import gib_to_gbps
from cosim.adapters.sdk import BackendServer
from cosim.adapters.sdk.testing import sample_network_spec
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import network_service_pb2_grpc as net_grpc
from cosim.v1 import types_pb2 as pb

FAKE_ASTRASIM = '''
import json, os, re, sys
from pathlib import Path
from cosim.adapters.astrasim.chakra import attributes, read_et
from cosim.adapters.network.astra_inputs import load_network_yml, load_system_json
from cosim.adapters.network.model import NetworkModel
from cosim.v1 import network_service_pb2 as net_pb

def fail(message):
    print("fake astrasim: " + message, file=sys.stderr)
    sys.exit(2)

if os.environ.get("FAKE_ASTRASIM_EXIT"):
    print("[critical] boom", file=sys.stderr)
    sys.exit(int(os.environ["FAKE_ASTRASIM_EXIT"]))
with open(os.environ["FAKE_ASTRASIM_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
for key in ("workload-configuration", "system-configuration", "network-configuration", "remote-memory-configuration"):
    if key not in opts:
        fail("missing --" + key)
if json.loads(Path(opts["remote-memory-configuration"]).read_text()) != {"memory-type": "NO_MEMORY_EXPANSION"}:
    fail("bad remote memory file")
spec = net_pb.NetworkSessionSpec(dims=load_network_yml(opts["network-configuration"]), mode=1)
spec.system.CopyFrom(load_system_json(opts["system-configuration"]))
if json.loads(Path(opts["system-configuration"]).read_text())["local-mem-bw"] <= 0:
    fail("local-mem-bw must be > 0")
total = 1
for dim in spec.dims:
    total *= dim.npus
prefix = opts["workload-configuration"]
if Path(f"{prefix}.{total}.et").exists():
    fail("one ET too many")
nodes = {npu: read_et(f"{prefix}.{npu}.et")[1] for npu in range(total)}
group = list(range(total))
if "comm-group-configuration" in opts:
    (group,) = json.loads(Path(opts["comm-group-configuration"]).read_text()).values()
finish = {npu: 0 for npu in range(total)}
if any(not ns for ns in nodes.values()):
    fail("an empty ET: ASTRA-sim's feeder stops on a trace without nodes")
colls = {npu: ns for npu, ns in nodes.items() if ns[0].type == 7}
if colls:
    if sorted(colls) != sorted(group):
        fail(f"collective on {sorted(colls)} but comm group {group}")
    if "comm-group-configuration" in opts and {attributes(n[0]).get("pg_name") for n in colls.values()} != {"1"}:
        fail("a collective on a comm group must name it in pg_name")
    (kind, size), = {(attributes(n[0])["comm_type"], attributes(n[0])["comm_size"]) for n in colls.values()}
    spec.endpoints.add(name="g", npu_ids=group)
    kind = {0: 1, 2: 2, 7: 3, 6: 4}[kind]
    for npu in group:
        finish[npu] = NetworkModel(spec).collective_ns(kind, size, "g")
else:
    model = NetworkModel(spec)
    sends, recvs = {}, {}
    for npu, ns in nodes.items():
        for n in ns:
            a = attributes(n)
            if n.type == 4 and n.name == "IDLE" and len(ns) == 1:
                continue  # the one node an NPU with nothing to do gets
            if a["is_cpu_op"] is not False:
                fail("is_cpu_op must be False")
            table = sends if n.type == 5 else recvs
            if (n.type == 5) != (a["comm_src"] == npu) or (n.type == 6) != (a["comm_dst"] == npu):
                fail(f"node {n.name} on the wrong NPU {npu}")
            table[(a["comm_src"], a["comm_dst"], a["comm_tag"])] = a["comm_size"]
    if sends != recvs or not sends:
        fail(f"unmatched sends {sends} and receives {recvs}")
    chains = {}
    for (s, d, tag), size in sorted(sends.items(), key=lambda kv: kv[0][2]):
        chains.setdefault((s, d), []).append(size)
    ep = spec.system.endpoint_delay_ns
    for (s, d), sizes in chains.items():
        bandwidth = model.topology.path(s, d)[1]
        t = sum(int(m / bandwidth) for m in sizes[:-1]) + model.topology.send_ns(s, d, sizes[-1]) + ep
        finish[s], finish[d] = max(finish[s], t), max(finish[d], t)
for npu in range(total):
    print(f"[2025-01-01 00:00:00.000] [workload] [info] sys[{npu}] finished, {finish[npu]} cycles, "
          f"exposed communication {finish[npu]} cycles.")
'''


@pytest.fixture()
def fake_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake ASTRA-sim, executable; ``FAKE_ASTRASIM_LOG`` collects one line per run."""
    path = tmp_path / "AstraSim_Analytical_Congestion_Unaware"
    path.write_text(f"#!{sys.executable}\n{FAKE_ASTRASIM}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_ASTRASIM_LOG", str(tmp_path / "runs.log"))
    monkeypatch.setenv("COSIM_ASTRA_SIM", str(path))
    return path


@pytest.fixture()
def stub(fake_binary: Path) -> Iterator[net_grpc.NetworkBackendServiceStub]:
    server = BackendServer(AstraSimBackend()).start()
    with grpc.insecure_channel(server.address) as channel:
        yield net_grpc.NetworkBackendServiceStub(channel)
    server.stop(0)


def ring8_spec() -> net_pb.NetworkSessionSpec:
    """The reference's worked example: 1-D ring of 8, 50 (ASTRA-sim) GB/s, 500 ns, endpoint delay 1."""
    spec = net_pb.NetworkSessionSpec(client="test", mode=pb.SYNC_MODE_PREDICT,
                                     system=net_pb.SystemConfig(endpoint_delay_ns=1))
    spec.dims.add(kind=net_pb.TOPOLOGY_KIND_RING, npus=8, bandwidth_gbps=gib_to_gbps(50), latency_ns=500)
    spec.endpoints.add(name="all", npu_ids=range(8))
    return spec


def two_node_spec() -> net_pb.NetworkSessionSpec:
    """Two 4-NPU switches joined by a switch; prefill p on NPUs 0-1, decode d on 4-5."""
    return sample_network_spec()


def open_session(stub: net_grpc.NetworkBackendServiceStub, spec: net_pb.NetworkSessionSpec) -> str:
    return str(stub.OpenSession(net_pb.OpenNetworkSessionRequest(spec=spec), timeout=30).session_id)


def test_all_reduce_matches_the_worked_example(stub: net_grpc.NetworkBackendServiceStub) -> None:
    """AR of 1 MiB on the 8-ring: the reference's 41189 ns, via the files the binary read."""
    session = open_session(stub, ring8_spec())
    op = net_pb.CollectiveOp(id=3, kind=net_pb.COLLECTIVE_KIND_ALL_REDUCE, size_bytes=1 << 20)
    (result,) = stub.Collective(net_pb.CollectiveRequest(session_id=session, collectives=[op]), timeout=30).results
    assert (result.id, result.duration_ns) == (3, 41189)
    stub.CloseSession(pb.CloseSessionRequest(session_id=session), timeout=10)


@pytest.mark.parametrize("kind", [net_pb.COLLECTIVE_KIND_ALL_GATHER, net_pb.COLLECTIVE_KIND_REDUCE_SCATTER,
                                  net_pb.COLLECTIVE_KIND_ALL_TO_ALL, net_pb.COLLECTIVE_KIND_ALL_REDUCE])
def test_collective_on_an_endpoint_uses_a_comm_group(stub: net_grpc.NetworkBackendServiceStub, kind: int,
                                                     tmp_path: Path) -> None:
    spec = two_node_spec()
    session = open_session(stub, spec)
    op = net_pb.CollectiveOp(id=1, kind=kind, size_bytes=1_000_000, endpoint="d")
    (result,) = stub.Collective(net_pb.CollectiveRequest(session_id=session, collectives=[op]), timeout=30).results
    expected = AnalyticalNetworkBackend().collective(_session(spec), [op])[0].duration_ns
    assert result.duration_ns == expected > 0
    assert "--comm-group-configuration=" in (tmp_path / "runs.log").read_text()


def test_layered_transfer_matches_the_network_backend(stub: net_grpc.NetworkBackendServiceStub,
                                                      tmp_path: Path) -> None:
    """KV streamed in 4 layers from p to d crosses nodes; the answer is cached afterwards."""
    spec = two_node_spec()
    session = open_session(stub, spec)
    transfer = net_pb.PointToPoint(id=9, src="p", dst="d", size_bytes=8_000_000, layers=4)
    request = net_pb.TransferRequest(session_id=session, transfers=[transfer, transfer])
    first, second = stub.Transfer(request, timeout=30).results
    expected = AnalyticalNetworkBackend().transfer(_session(spec), [transfer])[0].duration_ns
    assert first.duration_ns == second.duration_ns == expected > 0
    assert len((tmp_path / "runs.log").read_text().splitlines()) == 1


def test_transfer_within_one_endpoint_takes_no_time(stub: net_grpc.NetworkBackendServiceStub,
                                                    tmp_path: Path) -> None:
    session = open_session(stub, two_node_spec())
    transfer = net_pb.PointToPoint(id=1, src="p", dst="p", size_bytes=1000)
    (result,) = stub.Transfer(net_pb.TransferRequest(session_id=session, transfers=[transfer]), timeout=30).results
    assert result.duration_ns == 0
    assert not (tmp_path / "runs.log").exists()


def test_no_binary_is_unavailable_and_says_how_to_provide_one(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.delenv("COSIM_ASTRA_SIM", raising=False)
    monkeypatch.delenv("ASTRASIM_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no ASTRA-sim on PATH either
    with (BackendServer(AstraSimBackend()) as server, grpc.insecure_channel(server.address) as channel,
          pytest.raises(grpc.RpcError) as err):
        open_session(net_grpc.NetworkBackendServiceStub(channel), ring8_spec())
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "COSIM_ASTRA_SIM" in err.value.details() and "astra-sim" in err.value.details()


def test_missing_binary_path_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSIM_ASTRA_SIM", str(tmp_path / "nope"))
    with (BackendServer(AstraSimBackend()) as server, grpc.insecure_channel(server.address) as channel,
          pytest.raises(grpc.RpcError) as err):
        open_session(net_grpc.NetworkBackendServiceStub(channel), ring8_spec())
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "does not exist" in err.value.details()


def test_failing_binary_is_internal_with_its_output(stub: net_grpc.NetworkBackendServiceStub,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    session = open_session(stub, ring8_spec())
    monkeypatch.setenv("FAKE_ASTRASIM_EXIT", "3")
    op = net_pb.CollectiveOp(id=1, kind=net_pb.COLLECTIVE_KIND_ALL_REDUCE, size_bytes=4096)
    with pytest.raises(grpc.RpcError) as err:
        stub.Collective(net_pb.CollectiveRequest(session_id=session, collectives=[op]), timeout=30)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "status 3" in err.value.details() and "boom" in err.value.details()


def test_time_synchronized_mode_is_rejected_naming_the_field(stub: net_grpc.NetworkBackendServiceStub) -> None:
    spec = ring8_spec()
    spec.mode = pb.SYNC_MODE_TIME_SYNCHRONIZED
    with pytest.raises(grpc.RpcError) as err:
        open_session(stub, spec)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.mode" in err.value.details()


def test_congestion_aware_binary_refuses_several_dimensions(fake_binary: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """ASTRA-sim's congestion-aware backend exits on a 2-D network.yml: the session is refused first."""
    aware = fake_binary.with_name("AstraSim_Analytical_Congestion_Aware")
    aware.symlink_to(fake_binary)
    monkeypatch.setenv("COSIM_ASTRA_SIM", str(aware))
    with (BackendServer(AstraSimBackend()) as server, grpc.insecure_channel(server.address) as channel,
          pytest.raises(grpc.RpcError) as err):
        open_session(net_grpc.NetworkBackendServiceStub(channel), two_node_spec())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.dims" in err.value.details() and "one dimension" in err.value.details()


def test_bad_topology_is_invalid_argument(stub: net_grpc.NetworkBackendServiceStub) -> None:
    spec = ring8_spec()
    spec.system.all_reduce.append(net_pb.COLLECTIVE_ALGORITHM_RING)
    spec.system.all_reduce.append(net_pb.COLLECTIVE_ALGORITHM_RING)
    with pytest.raises(grpc.RpcError) as err:
        open_session(stub, spec)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.system.all_reduce" in err.value.details()


def _session(spec: net_pb.NetworkSessionSpec):  # type: ignore[no-untyped-def]
    """An in-process network-backend session on ``spec``, for expected values."""
    from cosim.adapters.sdk import Session
    return Session(id="x", spec=spec, state=AnalyticalNetworkBackend().open_session(spec))


assert os.name == "posix", "the fake binary relies on a #! line"
