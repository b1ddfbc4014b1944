"""Device presets carry their intra-node link, and the roofline times collectives on it."""

from __future__ import annotations

from typing import Any

import pytest

from cosim.adapters.roofline import batch_stats, estimate, open_model
from cosim.adapters.sdk import InvalidArgument
from cosim.hub.config.presets import LINK_EXTRA_KEYS, device_names, get_device, get_model, hardware_spec
from cosim.v1 import types_pb2 as pb


def preset_spec(model: str, device: str, *, tp: int = 1, ep: int = 1, options: dict[str, Any] | None = None,
                extra: dict[str, float] | None = None) -> pb.SessionSpec:
    """The session spec the hub builds from presets (profile none unless told)."""
    spec = pb.SessionSpec(client="c", model=get_model(model).to_model_spec(),
                          hardware=hardware_spec(device, max(tp, ep), "bf16"),
                          parallelism=pb.Parallelism(tensor=tp, expert=ep))
    spec.hardware.extra.update(extra or {})
    spec.options.update({"profile": "none", **(options or {})})
    return spec


def test_every_device_names_its_link_kind_and_per_direction_bandwidth() -> None:
    links = {name: (get_device(name).intra_node_link, get_device(name).intra_node_gbps) for name in device_names()}
    assert links["RTX-PRO-6000"] == ("pcie", 64)   # PCIe Gen5 x16, no NVLink
    assert links["H100-PCIe"] == ("pcie", 64)
    assert links["L40S"] == links["RTX-4090"] == ("pcie", 32)  # PCIe Gen4 x16
    assert links["H100-SXM"] == links["H200"] == ("nvlink", 450)  # NVLink 4: 900 GB/s both ways
    assert links["A100-40GB"] == links["A100-80GB"] == ("nvlink", 300)
    for name in device_names():
        sources = get_device(name).sources
        assert all(f"intra_node_{key}" in sources for key in ("link", "gbps", "latency_us", "hop_latency_us",
                                                              "bus_efficiency")), name


def test_hardware_spec_carries_the_link_figures_in_extra() -> None:
    extra = hardware_spec("RTX-PRO-6000", 2, "bf16").extra
    assert {key: extra[key] for key in LINK_EXTRA_KEYS} == {
        "intra_node_latency_us": 18, "intra_node_hop_latency_us": 1.0, "intra_node_bus_efficiency": 0.72}


def test_tp2_qwen3_32b_on_rtx_pro_6000_pays_pcie_gen5_all_reduces() -> None:
    """Two all-reduces per layer, 64 layers, on the switch path with NCCL's Simple protocol (faster from
    1 MiB up): 8.3 + 1.8 µs, 2 steps of 5.7 µs, and S / (0.67 x 64 GB/s)."""
    model = open_model(preset_spec("qwen3-32b", "RTX-PRO-6000", tp=2))
    bus_bytes_per_ns = 0.67 * 64
    for tokens in (128, 2048):
        timing = estimate(model, batch_stats([tokens], [0]))
        size = tokens * 5120 * 2
        simple = (8_300 + 1_800 + 2 * 5_700) + size / bus_bytes_per_ns
        assert timing.communication_ns == pytest.approx(2 * 64 * simple, abs=1)


def test_h100_all_reduce_is_faster_than_pcie_at_the_same_size() -> None:
    nvlink = estimate(open_model(preset_spec("qwen3-32b", "H100-SXM", tp=2)), batch_stats([2048], [0]))
    # NVLink 4: 20 µs + 2 x 0.47 µs + S / (0.73 x 450 GB/s)
    assert nvlink.communication_ns == round(2 * 64 * (20_000 + 2 * 470 + 2048 * 5120 * 2 / (0.73 * 450)))


def test_ep2_all_to_all_uses_the_link() -> None:
    """Qwen3-30B-A3B, EP2: dispatch and combine each send half of a rank's T x 8 / 2 token copies, one
    step of NCCL's Simple protocol on the switch path."""
    model = open_model(preset_spec("qwen3-30b-a3b", "RTX-PRO-6000", ep=2))
    timing = estimate(model, batch_stats([1024], [0]))
    buffer = 2 * 2048 * 1024 * 8 / 2
    all_to_all = 8_300 + 1_800 + 5_700 + buffer / 2 / (0.67 * 64)
    assert timing.communication_ns == pytest.approx(48 * 2 * all_to_all, abs=1)


def test_a_profile_keeps_its_own_collective_parameters() -> None:
    """The calibrated H100 profile was fitted without link latencies; the link does not add them."""
    params = open_model(preset_spec("llama3-70b", "H100-SXM", tp=4, options={"profile": "calibrated"})).params
    assert (params.allreduce_latency_us, params.hop_latency_us) == (0.0, 0.0)
    assert params.decode.comm_eff != 0.73


def test_options_override_the_link() -> None:
    params = open_model(preset_spec("qwen3-32b", "RTX-PRO-6000", tp=2,
                                    options={"allreduce_formula": "bestserve", "hop_latency_us": 0})).params
    assert (params.allreduce_formula, params.hop_latency_us, params.prefill.comm_eff) == ("bestserve", 0.0, 0.72)


def test_a_link_figure_out_of_range_is_invalid_argument() -> None:
    spec = preset_spec("qwen3-32b", "RTX-PRO-6000", tp=2, extra={"intra_node_bus_efficiency": 1.5})
    with pytest.raises(InvalidArgument, match="spec.hardware.extra.intra_node_bus_efficiency"):
        open_model(spec)


def test_without_link_figures_the_bestserve_defaults_hold() -> None:
    spec = preset_spec("qwen3-32b", "RTX-PRO-6000", tp=2)
    for key in LINK_EXTRA_KEYS:
        del spec.hardware.extra[key]
    params = open_model(spec).params
    assert (params.allreduce_formula, params.prefill.comm_eff, params.decode.comm_eff) == ("bestserve", 0.6, 0.3)
