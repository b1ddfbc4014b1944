"""Congestion-unaware network model: ASTRA-sim's numbers for the same inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosim.adapters.network import NetworkModel, session_spec_from_files
from cosim.adapters.network.astra_inputs import AstraInputError, load_network_yml, load_system_json
from cosim.adapters.network.model import pipeline_ns, shard_pairs
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb
from tests import paths

BW50 = 50 * 2**30 / 1e9  # network.yml "50 GB/s" in bytes/ns, as ASTRA-sim converts it
EXAMPLES = paths.EXAMPLES / "network"
RING, FC, SWITCH = net_pb.TOPOLOGY_KIND_RING, net_pb.TOPOLOGY_KIND_FULLY_CONNECTED, net_pb.TOPOLOGY_KIND_SWITCH
AR, AG, RS, A2A = (net_pb.COLLECTIVE_KIND_ALL_REDUCE, net_pb.COLLECTIVE_KIND_ALL_GATHER,
                   net_pb.COLLECTIVE_KIND_REDUCE_SCATTER, net_pb.COLLECTIVE_KIND_ALL_TO_ALL)


def make_model(dims: list[tuple[int, int, float, float]], endpoints: dict[str, list[int]] | None = None,
               **system: object) -> NetworkModel:
    spec = net_pb.NetworkSessionSpec(mode=pb.SYNC_MODE_PREDICT, system=net_pb.SystemConfig(**system))
    for kind, npus, bw, lat in dims:
        spec.dims.add(kind=kind, npus=npus, bandwidth_gbps=bw, latency_ns=lat)
    for name, npus in (endpoints or {}).items():
        spec.endpoints.add(name=name, npu_ids=npus)
    return NetworkModel(spec)


def ring8(**system: object) -> NetworkModel:
    return make_model([(RING, 8, BW50, 500)], {"a": [0, 1], "b": [4, 5]}, endpoint_delay_ns=1, **system)


def test_worked_example_all_reduce_is_41189_ns() -> None:
    """The reference's worked example: 14 x 2942 + 1."""
    assert ring8().collective_ns(AR, 1 << 20) == 41189


def test_worked_example_from_astra_sim_files() -> None:
    spec = session_spec_from_files(EXAMPLES / "ring8.yml", EXAMPLES / "ring8_ideal.json")
    assert spec.dims[0].bandwidth_gbps == 50 * 2**30 / 1e9
    assert NetworkModel(spec).collective_ns(AR, 1 << 20) == 41189


def test_ring_closed_forms_for_each_collective() -> None:
    model = ring8()
    assert model.collective_ns(RS, 1 << 20) == 7 * 2942 + 1
    assert model.collective_ns(AG, 1 << 20) == 7 * (int(500 + (1 << 20) / BW50) + 1) + 1  # shard semantics
    assert model.collective_ns(A2A, 1 << 20) == 28 * 2942 + 1


def test_switch_hops_and_reduction_cost() -> None:
    """Switch: 2 hops; reduction 3 x floor(m / local-mem-bw) on the RS half."""
    model = make_model([(SWITCH, 4, 100.0, 1000)], endpoint_delay_ns=10, local_mem_bandwidth_gbps=1000)
    # msg 1e6 B: wire 2*1000 + 1e6/100 = 12000, st 12010, red 3*1000.
    assert model.collective_ns(AR, 4_000_000) == 6 * 12010 + 3 * 3000 + 10


def test_direct_all_reduce_is_two_rounds() -> None:
    """The 3 incoming messages are reduced in parallel: one reduction (ASTRA-sim's binary says 25030)."""
    model = make_model([(FC, 4, 100.0, 1000)], endpoint_delay_ns=10, local_mem_bandwidth_gbps=1000,
                       all_reduce=[net_pb.COLLECTIVE_ALGORITHM_DIRECT])
    assert model.collective_ns(AR, 4_000_000) == 2 * (11000 + 10) + 3000 + 10


def test_halving_doubling_message_sizes() -> None:
    model = make_model([(FC, 8, 100.0, 0)], all_reduce=[net_pb.COLLECTIVE_ALGORITHM_HALVING_DOUBLING])
    assert model.collective_ns(AR, 8000) == (40 + 20 + 10) * 2


def test_multi_dim_local_bw_aware_and_baseline() -> None:
    dims = [(RING, 4, 100.0, 100), (SWITCH, 2, 10.0, 1000)]
    aware = make_model(dims, collective_optimization=net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE)
    # RS dim0 3x120, AR dim1 on 2000 B: 2 x (2000 + 100), AG dim0 3x120.
    assert aware.collective_ns(AR, 8000) == 360 + 4200 + 360
    baseline = make_model(dims)
    assert baseline.collective_ns(AR, 8000) == 6 * 120 + 2 * 2400


def test_dataset_splits_run_serially_in_one_dim() -> None:
    # chunk 256 KiB: msg 32768 B, st = floor(500 + 610.35) + 1 = 1111.
    assert ring8(preferred_dataset_splits=4).collective_ns(AR, 1 << 20) == 4 * (14 * 1111 + 1)


def test_multi_dim_chunks_pipeline_on_the_bottleneck_dim() -> None:
    """[Ring 8, Switch 4], 4 splits: splits x (dim-0 RS + AG), as the reference shows."""
    model = make_model([(RING, 8, BW50, 500), (SWITCH, 4, BW50, 500)], endpoint_delay_ns=1,
                       preferred_dataset_splits=4,
                       collective_optimization=net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE)
    group = model.group("")
    # chunk 256 KiB: RS sends 32 KiB per step; AG sends the 32 KiB shard it kept.
    rs = ag = (int(500 + 32768 / BW50) + 1) * 7 + 1
    assert [p.dim for p in model.plan(AR, 1 << 18, group)] == [0, 1, 0]
    assert model.collective_ns(AR, 1 << 20) == 4 * (rs + ag)


def test_pipeline_adds_up_for_one_chunk() -> None:
    assert pipeline_ns([[(0, 5), (1, 7), (0, 5)]], 1) == 17
    assert pipeline_ns([[(0, 5)], [(0, 5)]], 2) == 5


def test_transfer_uses_lowest_differing_dim_once() -> None:
    model = ring8()
    assert model.transfer_ns("a", "b", 2 * 131072, 1) == int(4 * 500 + 131072 / BW50) + 1


def test_transfer_layers_are_injected_back_to_back() -> None:
    model = ring8()
    per_layer = 32768 / BW50
    assert model.transfer_ns("a", "b", 2 * 131072, 4) == 3 * int(per_layer) + int(2000 + per_layer) + 1


def test_shards_pair_the_larger_endpoint() -> None:
    assert shard_pairs([0], [2, 3], 1001) == [(0, 2, 501), (0, 3, 500)]


def test_network_yml_errors_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "network.yml"
    path.write_text("topology: [ Ring, Torus ]\nnpus_count: [4, 2]\nbandwidth: [1, 1]\nlatency: [1, 1]\n")
    with pytest.raises(AstraInputError, match=r"topology\[1\].*Torus"):
        load_network_yml(path)
    path.write_text("topology: [ Ring ]\nnpus_count: [4, 2]\nbandwidth: [1]\nlatency: [1]\n")
    with pytest.raises(AstraInputError, match="npus_count"):
        load_network_yml(path)


def test_system_json_maps_the_knobs(tmp_path: Path) -> None:
    system = load_system_json(EXAMPLES / "system.json")
    assert system.endpoint_delay_ns == 10 and system.local_mem_bandwidth_gbps == 1600
    assert list(system.all_to_all) == [net_pb.COLLECTIVE_ALGORITHM_DIRECT] * 2
    assert system.collective_optimization == net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE
    bad = tmp_path / "system.json"
    bad.write_text('{"all-reduce-implementation": ["oneRing"]}')
    with pytest.raises(AstraInputError, match="all-reduce-implementation"):
        load_system_json(bad)
