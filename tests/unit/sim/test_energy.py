"""The power model (cosim.hub.sim.power), the power figures of device presets, and ranking by tokens per joule."""

from __future__ import annotations

import copy
import pickle

import pytest
from pydantic import ValidationError

from cosim.hub.config.presets import get_device, get_model, hardware_spec
from cosim.hub.config.presets.devices import DevicePreset
from cosim.hub.sim.power import (
    IDLE_FRACTION,
    MEMORY_BOUND_FRACTION,
    DevicePower,
    Intensity,
    StepEnergy,
    StepJoules,
    model_intensity,
)
from cosim.hub.studies.search.report import rank
from cosim.hub.timing.cache import Timing

H100 = DevicePower(idle_w=75, memory_bound_w=380, peak_w=700)


def test_power_rises_linearly_from_idle_to_each_anchor() -> None:
    assert H100.power_w(0, 0) == 75
    assert H100.power_w(1, 0) == 700  # a compute-bound step draws the TDP
    assert H100.power_w(0, 1) == 380  # a memory-bound one the memory-bound figure
    assert H100.power_w(0.5, 0.5) == 75 + 625 * 0.5 + 305 * 0.5  # 540 W
    assert H100.power_w(0.9, 0.5) == 700  # capped at the TDP


def test_power_figures_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="idle_w <= memory_bound_w <= tdp_w"):
        DevicePower(idle_w=500, memory_bound_w=380, peak_w=700)


def test_presets_carry_measured_figures_and_others_take_h100s_fractions() -> None:
    h100 = DevicePower.from_extra(hardware_spec("H100-SXM", 1).extra)
    assert h100 == H100
    b200 = DevicePower.from_extra(hardware_spec("B200", 1).extra)  # a TDP (1,000 W) and no measurements
    assert b200 is not None and b200.peak_w == 1000
    assert (b200.idle_w, b200.memory_bound_w) == (pytest.approx(1000 * IDLE_FRACTION),
                                                  pytest.approx(1000 * MEMORY_BOUND_FRACTION))
    assert DevicePower.from_extra({}) is None  # no tdp_w: no power figure


def test_a_user_device_may_lack_power_but_not_order_it_wrongly() -> None:
    fields = get_device("L40S").model_dump(exclude={"tdp_w", "idle_w", "memory_bound_w", "aliases"})
    fields.update(name="LabChip", sources={k: v for k, v in fields["sources"].items() if k != "tdp_w"})
    assert DevicePreset(**fields).tdp_w is None
    with pytest.raises(ValidationError, match="idle_w <= memory_bound_w <= tdp_w"):
        DevicePreset(**{**fields, "tdp_w": 300, "idle_w": 400,
                        "sources": {**fields["sources"], "tdp_w": "lab", "idle_w": "lab"}})


def test_decode_is_memory_bound_and_a_long_prefill_compute_bound() -> None:
    model = get_model("meta-llama/Meta-Llama-3-8B")
    intensity = model_intensity(model.to_model_spec(), model.active_param_count(), hardware_spec("H100-SXM", 1))
    c, m = intensity.shares([1] * 8, [1000] * 8)
    assert m == 1 and c < 0.05  # 8 decodes read 16 GB of weights and 1 GB of KV for 8 tokens' FLOPs
    c, m = intensity.shares([8192], [0])
    assert c == 1 and 0 < m < 0.2


def test_a_decode_step_s_shares_are_the_general_formula_s() -> None:
    """Decodes only take a shorter path: the same FLOPs and bytes, worked out by hand here."""
    model = get_model("meta-llama/Meta-Llama-3-8B")
    i = model_intensity(model.to_model_spec(), model.active_param_count(), hardware_spec("H100-SXM", 1))
    context = [900 + 37 * k for k in range(48)]
    pairs = sum(context) + 48  # each token attends to its context and itself
    t_c = (i.flops_per_token * 48 + i.flops_per_pair * pairs) / i.peak_flops
    t_m = (i.weight_bytes + i.kv_bytes_per_token * (sum(context) + 48)) / i.mem_bytes_per_s
    assert i.shares([1] * 48, context) == (t_c / t_m, 1.0)
    assert i.shares((1,) * 48, tuple(context)) == i.shares([1] * 48, context)


def test_step_energy_uses_the_backends_split_and_the_clients_devices() -> None:
    energy = StepEnergy(power=H100, num_devices=4, stages=2)  # TP2 x PP2: 2 devices busy at a time
    step = energy.step(Timing(duration_ns=2_000_000, compute_ns=1_000_000, memory_ns=500_000), 2_000_000, [1], [9])
    # u_c = 0.5, u_m = 0.25: 75 + 625 x 0.5 + 305 x 0.25 = 463.75 W, x 2 ms x 2 devices
    assert step.joules == pytest.approx(463.75 * 0.002 * 2) and step.device_s == pytest.approx(0.004)
    assert not step.reported


def test_time_the_hub_adds_counts_at_idle_power() -> None:
    """Host time and swaps lengthen the step; the backend's compute share is of the longer step."""
    energy = StepEnergy(power=H100, num_devices=1)
    step = energy.step(Timing(duration_ns=1_000_000, compute_ns=1_000_000, memory_ns=1), 4_000_000, [1], [9])
    assert step.joules == pytest.approx((700 * 0.001 + 75 * 0.003), rel=1e-5)


def test_without_a_split_the_busy_time_is_split_by_the_batchs_intensity() -> None:
    intensity = Intensity(flops_per_token=1e9, flops_per_pair=0, weight_bytes=1e9, kv_bytes_per_token=0,
                          peak_flops=1e12, mem_bytes_per_s=1e12)  # t_c = 1 ms per token, t_m = 1 ms
    energy = StepEnergy(power=H100, num_devices=1, intensity=intensity)
    decode = Timing(duration_ns=1_000_000, compute_ns=1_000_000)  # memory_ns 0: no split reported
    assert energy.utilization(decode, 1_000_000, [1], [0]) == (1.0, 1.0)  # balanced: both bound
    assert energy.utilization(decode, 1_000_000, [4], [0]) == (1.0, 0.25)  # 4 tokens: compute-bound
    # busy = duration - communication - dispatch where compute_ns is 0 too (a backend reporting only time)
    only_time = Timing(duration_ns=1_000_000, communication_ns=250_000, dispatch_ns=250_000)
    assert energy.utilization(only_time, 1_000_000, [4], [0]) == (0.5, 0.125)


def test_a_reported_energy_stands_and_no_power_figure_leaves_it_unknown() -> None:
    timing = Timing(duration_ns=1_000_000, compute_ns=1_000_000, memory_ns=1, energy_j=0.25)
    assert StepEnergy(power=H100, num_devices=8).step(timing, 1_000_000, [1], [0]).joules == 0.25
    unknown = StepEnergy(power=None, num_devices=8).step(Timing(duration_ns=1_000_000), 1_000_000, [1], [0])
    assert unknown.joules is None and unknown.device_s == pytest.approx(0.008)


def test_search_ranks_by_tokens_per_joule() -> None:
    rows = [{"key": k, "label": k, "status": "ok", "goodput_rps": g, "cost_per_hour_usd": 1.0, "tokens_per_j": t}
            for k, g, t in (("a", 3.0, 2.0), ("b", 1.0, 5.0), ("c", 2.0, None), ("d", 0.0, 9.0))]
    ranked = rank(rows, "tokens_per_j")
    assert [r["label"] for r in ranked] == ["b", "a", "c", "d"]  # d has no goodput: after the live ones
    assert [r["rank"] for r in ranked] == [1, 2, 3, None]


def test_the_power_models_values_pickle_and_copy_by_their_fields() -> None:
    """They live in the core now; a run's client records (which hold a DevicePower) still cross processes."""
    intensity = Intensity(flops_per_token=1e9, flops_per_pair=2.0, weight_bytes=1e9, kv_bytes_per_token=3.0,
                          peak_flops=1e12, mem_bytes_per_s=1e12)
    for value in (H100, intensity, StepJoules(0.5, 2.0, reported=True), StepJoules(None, 1.0)):
        assert pickle.loads(pickle.dumps(value)) == value
        assert copy.deepcopy(value) == value
    assert DevicePower(idle_w=75, memory_bound_w=380, peak_w=699) != H100
    assert repr(StepJoules(0.5, 2.0)) == "StepJoules(joules=0.5, device_s=2.0, reported=False)"
