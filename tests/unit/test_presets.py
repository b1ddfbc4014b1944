"""Model and device presets: shapes against published totals, lookups, wire forms."""

from __future__ import annotations

import pytest

from cosim.hub.config.presets import UnknownPreset, device_names, get_device, get_model, hardware_spec, model_names


@pytest.mark.parametrize(("name", "published"), [
    ("meta-llama/Meta-Llama-3-8B", 8.03e9),
    ("meta-llama/Llama-2-70b-hf", 6.90e10),
    ("mistralai/Mixtral-8x7B-v0.1", 4.67e10),
    ("Qwen/Qwen3-30B-A3B", 3.05e10),
    ("Qwen/Qwen3-32B", 3.28e10),
])
def test_param_count_from_shape_matches_published_total(name: str, published: float) -> None:
    assert get_model(name).param_count() == pytest.approx(published, rel=0.02)


def test_every_model_shape_agrees_with_its_published_total() -> None:
    for name in model_names():
        model = get_model(name)
        # MLA held as one wide KV head, and dense first layers as MoE ones, count 7.6% more for DeepSeek-V3.
        assert model.param_count() == pytest.approx(model.num_params, rel=0.08 if "MLA" in model.source else 0.02), name


def test_moe_active_params_are_a_fraction_of_total() -> None:
    mixtral = get_model("mixtral-8x7b")
    assert mixtral.active_param_count() == pytest.approx(12.9e9, rel=0.02)
    assert get_model("qwen3-30b-a3b").active_param_count() == pytest.approx(3.3e9, rel=0.03)


def test_expert_weight_bytes_are_the_routed_experts_mlps() -> None:
    assert get_model("mixtral-8x7b").expert_weight_bytes() == 2 * 32 * 8 * 3 * 4096 * 14336  # layers x experts x SwiGLU
    assert get_model("llama3-8b").expert_weight_bytes() == 0


def test_kv_bytes_per_token_llama3_8b_fp16() -> None:
    assert get_model("llama3-8b").kv_bytes_per_token() == 131072  # 2 * 32 layers * 8 heads * 128 * 2 B


def test_weight_bytes_uses_bytes_per_param() -> None:
    llama = get_model("llama3-8b")
    assert llama.weight_bytes() == 2 * 8030261248
    fp8 = llama.model_copy(update={"bytes_per_param": 1.0})
    assert fp8.weight_bytes() == 8030261248


def test_model_spec_carries_the_shape() -> None:
    spec = get_model("Qwen/Qwen3-32B").to_model_spec()
    assert (spec.name, spec.num_layers, spec.hidden_size, spec.head_dim) == ("Qwen/Qwen3-32B", 64, 5120, 128)
    assert spec.num_kv_heads == 8 and spec.gated_mlp and spec.num_params == 32762123264
    assert get_model("mixtral-8x7b").to_model_spec().experts_per_token == 2


def test_lookup_ignores_case_and_accepts_aliases() -> None:
    assert get_model("LLAMA3-8B").name == "meta-llama/Meta-Llama-3-8B"
    assert get_model("meta-llama-3-8b").name == "meta-llama/Meta-Llama-3-8B"  # the part after "/"
    assert get_model("codellama/CodeLlama-34b-Instruct-hf").name == "codellama/CodeLlama-34b-hf"
    assert get_device("h100").name == "H100-SXM"
    assert get_device("ascend-910b3").name == "Ascend-910B3"


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(UnknownPreset, match="did you mean 'llama3-8b'") as info:
        get_model("llama3-9b")
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)


def test_unknown_device_suggests_close_names() -> None:
    with pytest.raises(UnknownPreset, match="'H100-SXM'"):
        get_device("H100-SMX")


def test_unknown_name_without_close_match_lists_known_names() -> None:
    with pytest.raises(UnknownPreset, match="known: .*MI300X"):
        get_device("zzz")


def test_peak_tflops_resolves_dtype_spellings() -> None:
    h100 = get_device("H100-SXM")
    assert h100.peak_tflops_for("bfloat16") == h100.peak_tflops_for("bf16") == 989.4
    assert h100.peak_tflops_for("fp8") == 1978.9
    with pytest.raises(UnknownPreset, match="fp16"):
        get_device("A100-80GB").peak_tflops_for("fp8")


def test_hardware_spec_fills_figures_and_extra() -> None:
    spec = hardware_spec("A100-80GB", count=4, dtype="fp16")
    assert (spec.device, spec.count, spec.peak_tflops) == ("A100-80GB", 4, 312)
    assert spec.mem_capacity_bytes == 80 * 2**30 and spec.mem_bandwidth_gbps == 2039
    assert spec.devices_per_node == 8 and spec.intra_node_gbps == 300
    assert spec.extra["tdp_w"] == 400 and spec.extra["price_per_hour_usd"] > 0


def test_hardware_spec_omits_unknown_price() -> None:
    spec = hardware_spec(get_device("Ascend-910B3"), count=8)
    assert spec.peak_tflops == 313 and "price_per_hour_usd" not in spec.extra


def test_every_device_has_the_required_figures() -> None:
    names = device_names()
    assert {"A100-40GB", "H100-SXM", "H200", "L40S", "MI300X", "Ascend-910B3", "RTX-PRO-6000", "B200",
            "GB200"} <= set(names)
    for name in names:
        device = get_device(name)
        assert device.peak_tflops_for("bf16") > 0 or device.peak_tflops_for("fp16") > 0
        assert {"peak_tflops", "mem_bandwidth_gbps", "tdp_w"} <= set(device.sources)


def test_requested_models_are_present() -> None:
    for name in ["llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-8b",
                 "llama3.1-70b", "codellama-34b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b",
                 "qwen3-30b-a3b", "mistral-7b", "mixtral-8x7b", "llama3.3-70b", "deepseek-v3", "gpt-oss-20b",
                 "gpt-oss-120b"]:
        get_model(name)
