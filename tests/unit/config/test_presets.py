"""Model and device presets: shapes against published totals, lookups, wire forms."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

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


# Parameters a Llama 4 model has that the preset's one layer shape does not count: Maverick's 24 MoE layers
# each hold a shared expert (3 x 5120 x 8192) and its 24 dense layers a 16384-wide MLP (two such), 72 in
# all, where its 48 layers of one shape hold 48 shared experts. Scout's shape counts all of its own.
LLAMA4_UNCOUNTED = {"meta-llama/Llama-4-Scout-17B-16E": 0, "meta-llama/Llama-4-Maverick-17B-128E": 24 * 3 * 5120 * 8192}


def test_every_model_shape_agrees_with_its_published_total() -> None:
    for name in model_names():
        model = get_model(name)
        # MLA held as one wide KV head, and dense first layers as MoE ones, count 8.0% more for DeepSeek-V3.
        count = model.param_count() + LLAMA4_UNCOUNTED.get(model.name, 0)
        assert count == pytest.approx(model.num_params, rel=0.085 if "MLA" in model.source else 0.02), name


def test_llama4_shapes_count_the_published_totals_with_their_shared_experts() -> None:
    """109B and 400B of Meta's model card (the vision encoder, about 0.9B, included): the shape's count, with
    its shared experts (and what Maverick's one layer shape cannot hold), is within 1.5% of it; without the
    shared experts it would be 7% and 2% short."""
    for name, total in (("llama4-scout", 109e9), ("llama4-maverick", 400e9)):
        model = get_model(name)
        assert model.num_params == total and model.shared_experts == 1
        assert model.param_count() + LLAMA4_UNCOUNTED[model.name] == pytest.approx(total, rel=0.015), name
        assert model.active_param_count() == pytest.approx(17e9, rel=0.02)  # "17B active" for both
    # Maverick's 24 x 128 experts held as 48 x 64: the expert weights are the model's, 3072 MLPs of 5120 x 8192.
    assert get_model("llama4-maverick").expert_weight_bytes() == 2 * 24 * 128 * 3 * 5120 * 8192


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
                 "gpt-oss-120b", "llama4-scout", "llama4-maverick", "deepseek-r1", "gemma3-27b", "phi4"]:
        get_model(name)


# --- the presets of issue 36: figures against the datasheets and config.json files they cite -----------

@pytest.mark.parametrize(("name", "peaks", "bandwidth", "capacity_gib", "link", "link_gbps", "tdp_w"), [
    # NVIDIA L4 datasheet: 242 FP16/BF16 and 485 FP8/INT8 with sparsity, 30.3 FP32; 300 GB/s; 24 GB; 72 W
    ("L4", {"bf16": 121, "fp16": 121, "fp8": 242, "int8": 242, "fp32": 30.3}, 300, 24, "pcie", 32, 72),
    # A10G (AWS): 70 TFLOPS FP16 tensor, 600 GB/s GDDR6, 24 GB, 300 W power limit, PCIe Gen4 x16
    ("A10G", {"bf16": 70, "fp16": 70}, 600, 24, "pcie", 32, 300),
    # H20: 148 BF16, 296 FP8 dense; 96 GB HBM3 at 4.0 TB/s; NVLink 900 GB/s both ways; 400 W
    ("H20", {"bf16": 148, "fp8": 296, "int8": 296, "tf32": 74, "fp32": 44}, 4000, 96, "nvlink", 450, 400),
    # MI325X: MI300X compute (1307.4 / 2614.9), 256 GB HBM3E at 6 TB/s, 896 GB/s Infinity Fabric, 1000 W
    ("MI325X", {"bf16": 1307.4, "fp8": 2614.9}, 6000, 256, "infinity_fabric", 448, 1000),
    # MI355X: 2.5 PF FP16, 5.0 PF FP8, 10 PF MXFP4 dense; 288 GB at 8 TB/s; 7 x 153.6 GB/s links; 1400 W
    ("MI355X", {"bf16": 2516.6, "fp8": 5033.2, "fp4": 10066.3}, 8000, 288, "infinity_fabric", 537.6, 1400),
    # Gaudi 3: 1835 BF16 and FP8 matrix; 128 GB HBM2e at 3.67 TB/s; 21 x 200 GbE all to all; 900 W
    ("Gaudi-3", {"bf16": 1835, "fp8": 1835}, 3670, 128, "roce", 21 * 200 / 8, 900),
])
def test_new_devices_hold_their_datasheet_figures(name: str, peaks: dict[str, float], bandwidth: float,
                                                  capacity_gib: float, link: str, link_gbps: float,
                                                  tdp_w: float) -> None:
    device = get_device(name)
    assert {dtype: device.peak_tflops_for(dtype) for dtype in peaks} == peaks
    assert (device.mem_bandwidth_gbps, device.mem_capacity_gib, device.tdp_w) == (bandwidth, capacity_gib, tdp_w)
    assert (device.intra_node_link, device.intra_node_gbps, device.devices_per_node) == (link, link_gbps, 8)
    assert all(device.sources[field] for field in ("peak_tflops", "mem_bandwidth_gbps", "intra_node_gbps"))


def test_new_device_aliases_and_dtypes_resolve() -> None:
    assert get_device("gaudi3").name == "Gaudi-3" and get_device("nvidia-l4").name == "L4"
    assert get_device("instinct-mi355x").name == "MI355X" and get_device("hgx-h20").name == "H20"
    with pytest.raises(UnknownPreset, match="bf16"):  # Intel publishes no FP16 matrix peak for Gaudi 3
        hardware_spec("Gaudi-3", count=8, dtype="fp16")
    assert hardware_spec("Gaudi-3", count=8, dtype="bf16").peak_tflops == 1835


@pytest.mark.parametrize(("name", "shape", "kv_bytes"), [
    # huggingface.co/meta-llama/Llama-4-Scout-17B-16E config.json text_config; 1 routed + 1 shared expert
    ("llama4-scout", (48, 5120, 40, 8, 128, 8192, 202048, 16, 2), 2 * 48 * 8 * 128 * 2),
    # Llama-4-Maverick-17B-128E: 24 MoE layers of 128 experts held as 48 of 64 (source says so)
    ("llama4-maverick", (48, 5120, 40, 8, 128, 8192, 202048, 64, 2), 2 * 48 * 8 * 128 * 2),
    # DeepSeek-R1: the DeepSeek-V3 shape, MLA latent 512 + 64 as one KV head of 288
    ("deepseek-r1", (61, 7168, 128, 1, 288, 2048, 129280, 256, 9), 61 * 576 * 2),
    # google/gemma-3-27b-it text_config: 62 layers, 32 heads of 128 over 5376, 16 KV heads
    ("gemma3-27b", (62, 5376, 32, 16, 128, 21504, 262208, 0, 0), 2 * 62 * 16 * 128 * 2),
    # microsoft/phi-4: 40 layers, 40 heads of 128, 10 KV heads, 17920 MLP, 100352 vocabulary
    ("phi4", (40, 5120, 40, 10, 128, 17920, 100352, 0, 0), 2 * 40 * 10 * 128 * 2),
])
def test_new_models_hold_their_config_shapes(name: str, shape: tuple[int, ...], kv_bytes: int) -> None:
    model = get_model(name)
    assert (model.num_layers, model.hidden_size, model.num_attention_heads, model.num_kv_heads,
            model.effective_head_dim, model.intermediate_size, model.vocab_size, model.num_experts,
            model.experts_per_token) == shape
    assert model.kv_bytes_per_token() == kv_bytes
    assert model.source.startswith("huggingface.co/")


def test_deepseek_r1_is_the_deepseek_v3_architecture() -> None:
    fields = {"name", "aliases", "source"}
    assert get_model("deepseek-r1").model_dump(exclude=fields) == get_model("deepseek-v3").model_dump(exclude=fields)



@pytest.mark.parametrize("filename", ["models.yaml", "models_aiconfigurator.yaml", "devices.yaml"])
def test_the_preset_files_read_the_same_with_either_safe_loader(filename: str) -> None:
    from cosim.hub.config import presets

    text = resources.files(presets.__name__).joinpath(filename).read_text(encoding="utf-8")
    pure = yaml.load(text, Loader=yaml.SafeLoader)
    assert yaml.load(text, Loader=presets._SAFE_LOADER) == pure
    assert pure and all(pure.values())  # not two empty documents
