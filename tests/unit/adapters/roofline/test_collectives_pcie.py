"""NCCL's paths between GPUs without NVLink: times by hand, and the figures against published NCCL
measurements of PCIe boxes.

The path model (:mod:`cosim.adapters.roofline.collectives`) times a collective by the faster of
NCCL's LL and Simple protocols, with NCCL 2.28's base and per-step latencies on PCI; each path has
two figures, the LL latency and the Simple bus bandwidth. They are fitted to NCCL
microbenchmarks (Vidur's PCIe all-reduces for peer to peer, a published nccl-tests sweep for host
staging) and checked against other published ones; nothing is fitted to serving runs.
docs/validation.md ("PCIe paths") tabulates the numbers.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from cosim.adapters.roofline import collectives as coll
from cosim.adapters.roofline.collectives import (
    HOST_STAGED_BUS_GBPS,
    HOST_STAGED_LATENCY_US,
    LL,
    SIMPLE,
    PathLink,
    path_all_reduce_ns,
    path_all_to_all_ns,
    path_link,
    path_name,
)
from cosim.hub.config import presets
from cosim.hub.config.presets import get_device
from tests.paths import SHARED_DATA

DATA = SHARED_DATA / "vidur" / "profiling" / "network"
FIT_BYTES = (8 * 2**10, 64 * 2**20)

# nccl-tests all_reduce_perf -g 2, out-of-place time (µs) by size (B): 2x RTX 2080 Ti on PCIe Gen3
# x16 below one switch, P2P refused by the driver (nvidia-smi topo -p2p: NS), so NCCL's SHM
# transport; github.com/Anthony-Hoo/Anthony-Hoo.github.io, posts/AutoDL_Multi-GPU_Interconnection_Test.md.
SHM_2080TI = {
    8192: 13.07, 16384: 17.11, 32768: 24.62, 65536: 40.10, 131072: 56.90, 262144: 86.04, 524288: 150.2,
    1048576: 279.5, 2097152: 539.6, 4194304: 1065.1, 8388608: 2113.2, 16777216: 4209.7, 33554432: 8399.7,
    67108864: 16801.0,
}


def fit_path(sizes: np.ndarray, times_us: np.ndarray, ranks: int, bus_grid: np.ndarray) -> tuple[float, float]:
    """(Simple bus bandwidth in GB/s, LL latency in µs) of the path model that fits an all-reduce
    sweep best, least squares on relative error.

    The latency adds to both protocols' times, so for each bandwidth it has a closed form
    (weighted linear least squares); the bandwidth is searched on ``bus_grid`` (GB/s).
    """
    steps, share = 2 * (ranks - 1), 2 * (ranks - 1) / ranks
    weight = 1 / times_us
    best: tuple[float, float, float] | None = None
    for bus_gbps in bus_grid:
        shape = np.minimum(*[(p.base_latency_us - LL.base_latency_us + steps * p.hop_latency_us)
                             + share * sizes / (p.width * bus_gbps * 1e3) for p in (LL, SIMPLE)])
        latency = float(np.sum((1 - shape * weight) * weight) / np.sum(weight * weight))
        error = float(np.sum(((latency + shape) * weight - 1) ** 2))
        if best is None or error < best[0]:
            best = (error, float(bus_gbps), latency)
    assert best is not None
    return best[1], best[2]


def vidur(sku: str, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Sizes (B) and median times (µs) of Vidur's all-reduces of ``ranks`` GPUs, 8 KiB-64 MiB."""
    sizes, times = [], []
    with (DATA / sku / "all_reduce.csv").open() as f:
        for row in csv.DictReader(f):
            if int(row["num_workers"]) == int(row["devices_per_node"]) == ranks:
                sizes.append(float(row["size"]))
                times.append(float(row["time_stats.all_reduce.median"]) * 1e3)
    s, t = np.array(sizes), np.array(times)
    keep = (s >= FIT_BYTES[0]) & (s <= FIT_BYTES[1])
    return s[keep], t[keep]


def preset_link(name: str, path: str | None = None) -> PathLink:
    device = get_device(name)
    assert device.intra_node_path_latency_us is not None and device.intra_node_path_bus_efficiency is not None
    return path_link(path or str(device.intra_node_path), device.intra_node_gbps,
                     latency_us=device.intra_node_path_latency_us,
                     bus_efficiency=device.intra_node_path_bus_efficiency)


needs_vidur = pytest.mark.skipif(not DATA.is_dir(), reason=f"NCCL measurements not found at {DATA}")


# -- times by hand ----------------------------------------------------------------------------

def test_a_small_tp2_all_reduce_over_p2p_takes_ll() -> None:
    """16 decode tokens of Qwen3-32B (160 KiB) on 2 ranks: LL = latency + 2 hops of 1.0 µs + bytes
    at half of the 0.67 x 64 GB/s Simple bandwidth; Simple would take 25.3 µs."""
    link = path_link("switch", 64, latency_us=8.3, bus_efficiency=0.67)
    assert link.bus_gbps == pytest.approx(42.88)
    assert round(path_all_reduce_ns(163840, 2, link)) == round(8300 + 2 * 1000 + 163840 / (0.5 * 42.88)) == 17942
    assert link.fastest_ns(163840, 2, 1.0)[1] is LL


def test_a_large_tp2_all_reduce_over_p2p_takes_simple() -> None:
    """128 decode tokens (1.25 MiB): Simple = latency + NCCL's 1.8 µs more base + 2 hops of 5.7 µs
    + bytes at 42.88 GB/s (LL would take 71.4 µs)."""
    link = path_link("switch", 64, latency_us=8.3, bus_efficiency=0.67)
    assert round(path_all_reduce_ns(1310720, 2, link)) == round(8300 + 1800 + 2 * 5700 + 1310720 / 42.88) == 52067
    assert link.fastest_ns(1310720, 2, 1.0)[1] is SIMPLE


def test_the_protocols_cross_where_their_lines_meet() -> None:
    """LL and Simple on 2 ranks are equal at 11.2 µs x 42.88 GB/s = 480,256 bytes."""
    link = path_link("p2p", 64, latency_us=8.3, bus_efficiency=0.67)
    below, above = link.fastest_ns(480000, 2, 1.0), link.fastest_ns(481000, 2, 1.0)
    assert (below[1], above[1]) == (LL, SIMPLE)


def test_p2p_and_switch_time_alike() -> None:
    """Measured P2P bandwidth and latency through a switch and through a root complex agree within
    a few percent on RTX PRO 6000 boxes, so the two paths share the P2P figures."""
    args = {"latency_us": 8.3, "bus_efficiency": 0.67}
    assert path_link("p2p", 64, **args).bus_gbps == path_link("switch", 64, **args).bus_gbps


def test_host_staged_runs_at_the_host_memorys_figures() -> None:
    """1.25 MiB through host memory: Simple = 7.1 + 1.8 + 2 x 5.7 µs + bytes at 4.0 GB/s; 16 KiB: LL."""
    link = path_link("host_staged", 64, latency_us=8.3, bus_efficiency=0.67)
    assert (link.bus_gbps, link.latency_us) == (HOST_STAGED_BUS_GBPS, HOST_STAGED_LATENCY_US) == (4.0, 7.1)
    assert round(path_all_reduce_ns(1310720, 2, link)) == round(7100 + 1800 + 11400 + 1310720 / 4.0) == 347980
    assert round(path_all_reduce_ns(16384, 2, link)) == round(7100 + 2000 + 16384 / 2.0) == 17292


def test_host_staging_is_never_faster_than_p2p_on_a_narrow_link() -> None:
    """A PCIe Gen3 x4 link (3.9 GB/s) at 0.75 bounds the host-staged bandwidth at 2.9 GB/s."""
    assert path_link("host_staged", 3.9, latency_us=30.0, bus_efficiency=0.75).bus_gbps == pytest.approx(2.925)


def test_all_to_all_and_four_rank_rings_count_their_steps() -> None:
    """EP2 all-gather of 2 MiB: 1 step, half the bytes; TP4 all-reduce of 64 KiB: 6 LL steps, 3/4 x 2."""
    link = path_link("p2p", 64, latency_us=8.3, bus_efficiency=0.67)
    assert round(path_all_to_all_ns(2097152, 2, link)) == round(8300 + 1800 + 5700 + 1048576 / 42.88)
    assert round(path_all_reduce_ns(65536, 4, link)) == round(8300 + 6 * 1000 + 1.5 * 65536 / 21.44)
    assert path_all_reduce_ns(1 << 20, 1, link) == path_all_to_all_ns(1 << 20, 1, link) == 0.0


def test_a_path_is_one_of_three_and_travels_as_its_code() -> None:
    assert [path_name(code) for code in (1.0, 2.0, 3.0)] == ["p2p", "switch", "host_staged"]
    with pytest.raises(ValueError, match="code 9"):
        path_name(9.0)
    with pytest.raises(ValueError, match="'nvlink' is not one of"):
        path_link("nvlink", 450, latency_us=20, bus_efficiency=0.73)
    with pytest.raises(ValueError, match="bus_efficiency=1.5"):
        path_link("p2p", 64, latency_us=8, bus_efficiency=1.5)


# -- presets ----------------------------------------------------------------------------------

def test_the_hub_and_the_collectives_share_the_path_codes() -> None:
    assert presets.PATH_CODES == coll.PATH_CODES


def test_pcie_devices_name_their_path_and_nvlink_devices_none() -> None:
    paths = {name: get_device(name).intra_node_path for name in presets.device_names()}
    assert (paths["RTX-PRO-6000"], paths["H100-PCIe"], paths["RTX-4090"]) == ("switch", "p2p", "host_staged")
    assert all(paths[n] is None for n in ("H100-SXM", "H200", "A100-80GB", "B200", "GB200", "MI300X"))
    for name, path in paths.items():
        if path is not None:
            assert {f"intra_node_path{s}" for s in ("", "_latency_us", "_bus_efficiency")} <= set(
                get_device(name).sources), name


def test_hardware_spec_carries_the_path_only_where_there_is_one() -> None:
    """NVLink specs keep exactly their old keys (their timings cannot move); PCIe ones add three."""
    old_keys = {"tdp_w", "idle_w", "memory_bound_w", "price_per_hour_usd", *presets.LINK_EXTRA_KEYS}
    assert set(presets.hardware_spec("H100-SXM", 8, "bf16").extra) <= old_keys
    extra = presets.hardware_spec("RTX-PRO-6000", 2, "bf16").extra
    assert (extra["intra_node_path"], extra["intra_node_path_latency_us"], extra["intra_node_path_bus_efficiency"]) \
        == (2.0, 8.3, 0.67)


def test_a_preset_gives_all_three_path_fields_or_none() -> None:
    fields = get_device("RTX-PRO-6000").model_dump()
    fields["intra_node_path_latency_us"] = None
    with pytest.raises(ValueError, match="go together"):
        presets.DevicePreset(**fields)


# -- against published NCCL measurements ------------------------------------------------------

@needs_vidur
@pytest.mark.parametrize(("name", "sku"), [("H100-PCIe", "h100_pairwise_nvlink"), ("RTX-4090", "a100_pairwise_nvlink")])
def test_the_p2p_figures_are_the_fit_to_vidurs_pcie_all_reduces(name: str, sku: str) -> None:
    """4-GPU rings across PCIe Gen5 (H100 NVL) and Gen4 (A100 PCIe) x16, rounded (0.01, 0.1 µs)."""
    device = get_device(name)
    bus_gbps, latency_us = fit_path(*vidur(sku, 4), 4, np.arange(0.3, 1.0, 1e-4) * device.intra_node_gbps)
    assert (device.intra_node_path_bus_efficiency, device.intra_node_path_latency_us) == \
        (round(bus_gbps / device.intra_node_gbps, 2), round(latency_us, 1))


@needs_vidur
@pytest.mark.parametrize(("name", "sku"), [("H100-PCIe", "h100_pairwise_nvlink"), ("RTX-4090", "a100_pairwise_nvlink")])
def test_the_p2p_model_follows_vidurs_pcie_all_reduces(name: str, sku: str) -> None:
    """Over every size the path model misses by 3% on average (the single ring line: 7% on Gen5,
    2% on Gen4). At the sizes a TP step sends (median over the 9 measured sizes nearest tokens x
    hidden x 2 B, hidden 5120 and 8192) it misses prefill chunks (512-4096 tokens) by under 6%,
    and decode batches (1-256 tokens) by up to 38%: one token's 10-16 KiB, where Vidur's measured
    floor (28 µs on H100 NVL, 59 µs on A100 PCIe) sits above NCCL's LL latencies."""
    sizes, times = vidur(sku, 4)
    link = preset_link(name, "p2p")
    predicted = np.array([path_all_reduce_ns(s, 4, link) for s in sizes]) / 1e3
    assert float(np.mean(np.abs(predicted / times - 1))) <= 0.035
    for hidden in (5120, 8192):
        for tokens, tolerance in ((1, 0.40), (16, 0.16), (64, 0.17), (256, 0.05), (512, 0.04), (2048, 0.06),
                                  (4096, 0.03)):
            near = np.argsort(np.abs(np.log(sizes / (tokens * hidden * 2))))[:9]
            error = float(np.median(predicted[near] / times[near] - 1))
            assert abs(error) <= tolerance, f"{name} {tokens} x {hidden}: {error:+.0%}"


def test_rtx_pro_6000_p2p_bandwidth_is_its_own_nccl_measurement() -> None:
    """NCCL all_reduce_perf on 8x RTX PRO 6000 behind PCIe switches, defaults, 32 MiB: 40.1 GB/s bus
    bandwidth (github.com/voipmonitor/rtx6kpro, hardware/pcie-bandwidth.md). The model reproduces it
    with the preset's 0.67 x 64 GB/s Simple bandwidth and its 8.3 µs latency over 8 ranks."""
    device, size = get_device("RTX-PRO-6000"), 32 * 2**20
    measured_ns = 1.75 * size / 40.1
    simple_fixed_ns = (8.3 + 1.8 + 14 * 5.7) * 1e3
    assert device.intra_node_path_bus_efficiency == round(1.75 * size / ((measured_ns - simple_fixed_ns) * 64), 2)
    assert device.intra_node_path_latency_us == get_device("H100-PCIe").intra_node_path_latency_us
    busbw = 1.75 * size / path_all_reduce_ns(size, 8, preset_link("RTX-PRO-6000"))
    assert busbw == pytest.approx(40.1, rel=0.01)


def test_rtx_pro_6000_small_all_reduces_match_its_nccl_latency() -> None:
    """The same page: NCCL on 8 RTX PRO 6000 behind switches takes 24.1-24.6 µs from 256 B to 64 KiB;
    the model 22.3-27.6 µs (within 15%), though its latency comes from H100 NVL boxes."""
    link = preset_link("RTX-PRO-6000")
    for size, measured_us in ((256, 24.6), (1024, 24.1), (8192, 24.2), (32768, 24.5), (65536, 24.1)):
        assert path_all_reduce_ns(size, 8, link) / 1e3 == pytest.approx(measured_us, rel=0.15), size


def test_the_host_staged_figures_are_the_fit_to_a_published_shm_sweep() -> None:
    """2x RTX 2080 Ti, P2P refused: the fit is HOST_STAGED_*, rounded (0.01 GB/s, 0.1 µs), and misses
    by 1.8% on average and 9% at worst (64 KiB, where NCCL switches from LL to Simple)."""
    sizes, times = np.array(list(SHM_2080TI), dtype=float), np.array(list(SHM_2080TI.values()))
    bus_gbps, latency_us = fit_path(sizes, times, 2, np.arange(1.0, 10.0, 1e-3))
    assert (round(bus_gbps, 2), round(latency_us, 1)) == (HOST_STAGED_BUS_GBPS, HOST_STAGED_LATENCY_US)
    link = path_link("host_staged", 15.75, latency_us=0.0, bus_efficiency=1.0)  # PCIe Gen3 x16
    errors = np.array([path_all_reduce_ns(s, 2, link) / 1e3 / t - 1 for s, t in SHM_2080TI.items()])
    assert float(np.mean(np.abs(errors))) == pytest.approx(0.018, abs=0.002)
    assert float(np.max(np.abs(errors))) <= 0.09


def test_host_staging_on_pcie_gen4_matches_another_shm_measurement() -> None:
    """2x A40 on PCIe Gen4 (one NUMA node) with NCCL_P2P_DISABLE=1, NCCL 2.16: 1 GiB in 278,168 µs
    and 2 GiB in 534,127 µs (github.com/eugenesiow/LLM-Insights, infrastructure/hardware/README.md);
    the model is within 4%: host staging does not speed up with the PCIe generation."""
    link = path_link("host_staged", 32, latency_us=30.5, bus_efficiency=0.75)
    for size, measured_us in ((2**30, 278168), (2**31, 534127)):
        assert path_all_reduce_ns(size, 2, link) / 1e3 == pytest.approx(measured_us, rel=0.04)


def test_rtx_4090_p2p_figures_match_a_patched_driver_measurement() -> None:
    """With P2P patched in (github.com/tinygrad/open-gpu-kernel-modules README), all_reduce_perf on
    6x RTX 4090, 32 MiB, took 2275.1 µs; the RTX-4090 preset's P2P figures (Gen4, from A100 PCIe
    boxes) give 2419 µs (+6%)."""
    predicted_us = path_all_reduce_ns(32 * 2**20, 6, preset_link("RTX-4090", "p2p")) / 1e3
    assert predicted_us == pytest.approx(2275.1, rel=0.07)


def _roofline_comm_ms(device: str, tp: int) -> float:
    """The communication time of one 8-sequence decode step of Qwen3-32B on ``tp`` devices, by the roofline."""
    from cosim.adapters.roofline.backend import open_model
    from cosim.adapters.roofline.estimator import estimate
    from cosim.adapters.roofline.operators import batch_stats
    from cosim.v1 import types_pb2 as pb

    spec = pb.SessionSpec(model=presets.get_model("Qwen/Qwen3-32B").to_model_spec(),
                          hardware=presets.hardware_spec(device, tp, "bf16"),
                          parallelism=pb.Parallelism(tensor=tp, pipeline=1, expert=1))
    timing = estimate(open_model(spec), batch_stats([1] * 8, [1024] * 8))
    return timing.communication_ns / 1e6


def test_the_roofline_times_a_pcie_box_s_all_reduces_on_its_path() -> None:
    """RTX PRO 6000 (switch path): two all-reduces per layer of 8 tokens x 5120 bf16, each the path's."""
    device = get_device("RTX-PRO-6000")
    extra = presets.hardware_spec(device, 2, "bf16").extra
    link = path_link(path_name(extra["intra_node_path"]), device.intra_node_gbps,
                     latency_us=extra["intra_node_path_latency_us"],
                     bus_efficiency=extra["intra_node_path_bus_efficiency"])
    per_layer = 2 * path_all_reduce_ns(2 * 8 * 5120, 2, link)
    assert _roofline_comm_ms("RTX-PRO-6000", 2) == pytest.approx(64 * per_layer / 1e6, abs=1e-6)  # whole ns


def test_a_host_staged_box_pays_more_than_a_p2p_one_for_the_same_all_reduces() -> None:
    assert "intra_node_path" not in presets.hardware_spec(get_device("H100-SXM"), 2, "bf16").extra  # NVLink: ring
    assert _roofline_comm_ms("RTX-4090", 2) > _roofline_comm_ms("RTX-PRO-6000", 2)
