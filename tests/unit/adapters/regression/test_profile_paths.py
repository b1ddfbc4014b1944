"""The profile-bundle backend times TP and EP collectives on the device's path (PCIe peer to peer or
through host memory), and NVLink devices exactly as before paths existed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cosim.adapters.regression.profiles import open_profile_model
from cosim.adapters.roofline.collectives import all_reduce_ns, path_all_reduce_ns, path_all_to_all_ns, path_link
from cosim.adapters.sdk import InvalidArgument
from cosim.hub.config.presets import get_model, hardware_spec
from cosim.v1 import types_pb2 as pb
from tests.paths import SHARED_DATA

PERF = SHARED_DATA / "llmservingsim" / "profiler" / "perf" / "RTXPRO6000"
QWEN3_32B = PERF / "Qwen" / "Qwen3-32B" / "bf16"
QWEN3_30B_A3B = PERF / "Qwen" / "Qwen3-30B-A3B-Instruct-2507" / "bf16"

pytestmark = pytest.mark.skipif(not QWEN3_32B.is_dir(), reason=f"profile bundles not found at {PERF}")

DECODES = ([1] * 128, [1000] * 128)  # 128 decodes: 128 x 5120 x 2 B = 1.25 MiB per all-reduce
MESSAGE = 128 * 5120 * 2


def collectives_ns(device: str, *, tp: int = 2, ep: int = 1, model: str = "qwen3-32b", bundle: Path = QWEN3_32B,
                   options: dict[str, Any] | None = None, overrides: dict[str, float] | None = None) -> float:
    """The collectives of one step of 128 decodes on ``device``, as the backend times them (ns)."""
    spec = pb.SessionSpec(client="c", model=get_model(model).to_model_spec(),
                          hardware=hardware_spec(device, max(tp, ep), "bf16"),
                          parallelism=pb.Parallelism(tensor=tp, expert=ep))
    spec.hardware.extra.update(overrides or {})
    step = open_profile_model(spec, {"profile_bundle": str(bundle), **(options or {})}).predict(*DECODES)
    return float(step.breakdown["collectives"])


def test_tp2_on_rtx_pro_6000_takes_the_switch_path() -> None:
    """64 layers x 2 all-reduces, each the Simple protocol over P2P: 8.3 + 1.8 + 2 x 5.7 µs + 1.25 MiB
    at 0.67 x 64 GB/s."""
    link = path_link("switch", 64, latency_us=8.3, bus_efficiency=0.67)
    assert collectives_ns("RTX-PRO-6000") == pytest.approx(64 * 2 * path_all_reduce_ns(MESSAGE, 2, link))
    assert collectives_ns("RTX-PRO-6000") == pytest.approx(64 * 2 * (21_500 + MESSAGE / 42.88))


def test_the_ring_option_times_the_old_ring_line() -> None:
    """link_path=ring: 18 µs + 2 hops of 1 µs + 1.25 MiB at 0.72 x 64 GB/s, as before paths."""
    assert collectives_ns("RTX-PRO-6000", options={"link_path": "ring"}) == pytest.approx(
        64 * 2 * (18_000 + 2 * 1_000 + MESSAGE / (0.72 * 64)))


def test_nvlink_devices_keep_the_ring_model_exactly() -> None:
    """H100-SXM has no path: the same all_reduce_ns call on its preset's figures, bit for bit."""
    expected = 64 * 2 * all_reduce_ns(MESSAGE, 2, 450 * 0.73 * 1e9, latency_us=20, hop_latency_us=0.47) / 1000
    assert collectives_ns("H100-SXM") == pytest.approx(expected * 1000, rel=1e-12)


def test_a_client_stages_through_host_memory_by_option_or_by_hardware_override() -> None:
    """host_staged: 7.1 + 1.8 + 11.4 µs + 1.25 MiB at 4.0 GB/s per all-reduce, 64 x 2 of them."""
    expected = 64 * 2 * (20_300 + MESSAGE / 4.0)
    assert collectives_ns("RTX-PRO-6000", options={"link_path": "host_staged"}) == pytest.approx(expected)
    assert collectives_ns("RTX-PRO-6000", overrides={"intra_node_path": 3.0}) == pytest.approx(expected)
    assert collectives_ns("RTX-PRO-6000", options={"link_path": "host_staged", "link_host_staged_gbps": 8.0}) == \
        pytest.approx(64 * 2 * (20_300 + MESSAGE / 8.0))


def test_the_path_scales_with_the_link_bandwidth_option() -> None:
    """link_gbps=32 halves the P2P bandwidth (the sensitivity table's knob)."""
    assert collectives_ns("RTX-PRO-6000", options={"link_gbps": 32}) == pytest.approx(
        64 * 2 * (21_500 + MESSAGE / (0.67 * 32)))


@pytest.mark.skipif(not QWEN3_30B_A3B.is_dir(), reason="Qwen3-30B-A3B bundle not found")
def test_ep2_gathers_and_scatters_over_the_path() -> None:
    """Qwen3-30B-A3B (48 layers, hidden 2048), EP2: an all-gather and a reduce-scatter of 2 x the
    rank's 128 tokens per layer, each one ring step over P2P."""
    link = path_link("switch", 64, latency_us=8.3, bus_efficiency=0.67)
    message = 128 * 2048 * 2
    got = collectives_ns("RTX-PRO-6000", tp=1, ep=2, model="qwen3-30b-a3b", bundle=QWEN3_30B_A3B)
    assert got == pytest.approx(48 * 2 * path_all_to_all_ns(2 * message, 2, link))


def test_a_p2p_path_without_its_figures_is_invalid() -> None:
    with pytest.raises(InvalidArgument, match="link_path_latency_us and link_path_bus_efficiency"):
        collectives_ns("H100-SXM", options={"link_path": "p2p"})
    with pytest.raises(InvalidArgument, match="spec.options.link_path"):
        collectives_ns("RTX-PRO-6000", options={"link_path": "nvswitch"})
    with pytest.raises(InvalidArgument, match="spec.hardware.extra.intra_node_path"):
        collectives_ns("RTX-PRO-6000", overrides={"intra_node_path": 7.0})
