"""Open presets: `cosim presets`, a scenario's own presets file, and models imported from a HF config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import cosim
from cosim.hub.cli import main
from cosim.hub.config.loading import ScenarioProblems, load_config, parse_config
from cosim.hub.config.presets import builtin_devices, builtin_models, get_model
from cosim.hub.config.presets.hf import from_hf_config
from cosim.hub.config.resolve import resolve_device, resolve_model
from cosim.hub.errors import ScenarioError
from cosim.hub.studies.suite.runs import DATA_DIR
from tests.scenarios.helpers import scenario

# The config.json keys of each model, as on huggingface.co (the fields the mapping reads).
HF_CONFIGS: dict[str, dict[str, Any]] = {
    "deepseek-v3": {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
                    "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
                    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
                    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                    "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False},
    "gpt-oss-120b": {"model_type": "gpt_oss", "num_hidden_layers": 36, "hidden_size": 2880, "head_dim": 64,
                     "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 2880,
                     "num_local_experts": 128, "num_experts_per_tok": 4, "vocab_size": 201088,
                     "attention_bias": True, "sliding_window": 128, "layer_types": ["sliding_attention"] * 36,
                     "max_position_embeddings": 131072, "tie_word_embeddings": False},
    "gpt-oss-20b": {"model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880, "head_dim": 64,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 2880,
                    "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
                    "attention_bias": True, "max_position_embeddings": 131072},
    "deepseek-r1": {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
                    "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
                    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
                    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                    "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False},
    "phi4": {"model_type": "phi3", "num_hidden_layers": 40, "hidden_size": 5120, "num_attention_heads": 40,
             "num_key_value_heads": 10, "intermediate_size": 17920, "vocab_size": 100352,
             "max_position_embeddings": 16384, "tie_word_embeddings": False, "attention_bias": False},
    # Gemma 3's config.json: a multimodal wrapper whose text_config leaves vocab_size, the context length and
    # the tied embeddings to transformers' Gemma3TextConfig defaults
    "gemma-3-27b": {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                    "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376,
                                    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                                    "intermediate_size": 21504, "query_pre_attn_scalar": 168,
                                    "sliding_window": 1024, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
                    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152}},
    "llama3.3-70b": {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
                     "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
                     "vocab_size": 128256, "max_position_embeddings": 131072},
}
SHAPE = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "effective_head_dim",
         "intermediate_size", "vocab_size", "num_experts", "experts_per_token", "shared_experts", "qkv_bias", "qk_norm",
         "max_position_embeddings")

PRESETS_FILE = {
    "models": [{"name": "lab/tiny-7b", "family": "llama3", "num_layers": 4, "hidden_size": 1024,
                "num_attention_heads": 8, "num_kv_heads": 8, "intermediate_size": 2048, "vocab_size": 32000,
                "source": "our lab's design doc"}],
    "devices": [{"name": "LabChip", "kind": "npu", "vendor": "Lab", "peak_tflops": {"fp16": 100},
                 "mem_bandwidth_gbps": 1000, "mem_capacity_gib": 64, "intra_node_link": "pcie",
                 "intra_node_gbps": 32, "intra_node_latency_us": 10, "intra_node_hop_latency_us": 1,
                 "intra_node_bus_efficiency": 0.7, "inter_node_gbps": 25, "devices_per_node": 8, "tdp_w": 300,
                 "sources": {k: "our lab's bring-up measurements" for k in (
                     "peak_tflops", "mem_bandwidth_gbps", "mem_capacity_gib", "intra_node_link", "intra_node_gbps",
                     "intra_node_latency_us", "intra_node_hop_latency_us", "intra_node_bus_efficiency",
                     "inter_node_gbps", "devices_per_node", "tdp_w")}}],
}


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_hf_config_import_gives_the_preset_shape(name: str) -> None:
    """The built-in presets of these models are what their config.json imports to."""
    imported, preset = from_hf_config(HF_CONFIGS[name], name=name), get_model(name)
    assert {f: getattr(imported, f) for f in SHAPE} == {f: getattr(preset, f) for f in SHAPE}
    assert imported.kv_bytes_per_token() == preset.kv_bytes_per_token()


def test_llama4_scouts_config_imports_to_its_preset() -> None:
    """The Llama-4-Scout config.json in the repository (blis-h100's, text_config) imports to the built-in
    preset's shape, its shared expert included although the config names none."""
    config = json.loads((DATA_DIR / "blis-h100/model_configs/llama-4-scout-17b-16e-instruct-fp8-dynamic"
                         / "config.json").read_text())
    imported, preset = from_hf_config(config), get_model("llama4-scout")
    assert {f: getattr(imported, f) for f in SHAPE} == {f: getattr(preset, f) for f in SHAPE}
    assert imported.kv_bytes_per_token() == preset.kv_bytes_per_token() == 2 * 48 * 8 * 128 * 2


def test_mla_caches_one_latent_per_token_and_layer() -> None:
    """DeepSeek-V3 in vLLM: (kv_lora_rank + qk_rope_head_dim) x layers x 2 bytes per token."""
    model = from_hf_config(HF_CONFIGS["deepseek-v3"])
    assert model.kv_bytes_per_token() == (512 + 64) * 61 * 2
    assert "MLA" in model.source and "shared expert" in model.source


def test_llama4_runs_the_shared_expert_its_config_does_not_name() -> None:
    """Llama-4-Scout's config.json (the validation run's copy) names 16 routed experts, top-1; every MoE
    layer also runs one shared expert (transformers' Llama4TextMoe.shared_expert): 2 experts a token."""
    config = json.loads((DATA_DIR / "blis-h100/model_configs/llama-4-scout-17b-16e-instruct-fp8-dynamic"
                         / "config.json").read_text())
    model = from_hf_config(config)
    assert (model.num_experts, model.experts_per_token, model.shared_experts) == (16, 2, 1)
    assert model.intermediate_size == 8192 and "1 shared expert" in model.source


def test_hf_config_without_a_needed_key_names_it() -> None:
    with pytest.raises(ValueError, match="num_hidden_layers or n_layer or num_layers"):
        from_hf_config({"hidden_size": 8})


@pytest.mark.parametrize(("key", "value"), [("num_hidden_layers", 4.9), ("num_key_value_heads", "8"),
                                            ("intermediate_size", True), ("head_dim", 127.5)])
def test_hf_config_fraction_or_non_number_is_an_error_not_truncated(key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"config.json's {key} must be a whole number, got {value!r}"):
        from_hf_config({**HF_CONFIGS["llama3.3-70b"], key: value})


@pytest.mark.parametrize(("key", "value", "message"), [
    ("num_attention_heads", -1, "num_attention_heads: input should be greater than 0, got -1"),
    ("num_key_value_heads", 3, "num_kv_heads=3 must divide num_attention_heads=64"),
])
def test_hf_config_impossible_model_is_one_readable_line(key: str, value: int, message: str) -> None:
    """Found by fuzzing: pydantic's own dump (headline, error types, a link) was passed on."""
    with pytest.raises(ValueError) as err:
        from_hf_config({**HF_CONFIGS["llama3.3-70b"], key: value})
    assert str(err.value) == f"config.json gives an impossible model: {message}"


def test_hf_config_whole_float_is_taken() -> None:
    as_float = from_hf_config({**HF_CONFIGS["llama3.3-70b"], "num_hidden_layers": 80.0})
    assert as_float == from_hf_config(HF_CONFIGS["llama3.3-70b"])


def test_hf_config_fraction_names_the_model_key(tmp_path: Path) -> None:
    path = _write_scenario(tmp_path)
    (tmp_path / "models" / "config.json").write_text(json.dumps({**HF_CONFIGS["llama3.3-70b"],
                                                                  "num_hidden_layers": 4.9}))
    with pytest.raises(ScenarioError, match="models.imported.hf_config: config.json's num_hidden_layers must be"):
        config, _ = load_config(path)
        resolve_model(config, "imported")


def _write_scenario(tmp_path: Path, **changes: Any) -> Path:
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(PRESETS_FILE))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "config.json").write_text(json.dumps(HF_CONFIGS["llama3.3-70b"]))
    config = scenario(presets="lab.yaml", hardware={"h": {"preset": "LabChip"}})
    config["models"] = {"m": {"preset": "lab/tiny-7b"}, "imported": {"hf_config": "models/config.json"}}
    config.update(changes)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_hf_config_shape_beyond_the_wire_names_the_hf_config(tmp_path: Path) -> None:
    """Found by fuzzing: the error was located at models.imported, not at the file the user wrote."""
    path = _write_scenario(tmp_path)
    (tmp_path / "models" / "config.json").write_text(json.dumps({**HF_CONFIGS["llama3.3-70b"], "hidden_size": 2**40}))
    config, _ = load_config(path)
    with pytest.raises(ScenarioError, match=r"^models\.imported\.hf_config: gives an impossible model: hidden_size"):
        resolve_model(config, "imported")


@pytest.mark.parametrize(("key", "content", "problem"), [
    ("presets", [1], "must be a mapping with models: and/or devices: lists"),
    ("models.imported.hf_config", [1], "is not a JSON object"),
])
def test_a_file_of_the_wrong_shape_is_one_problem(tmp_path: Path, key: str, content: Any, problem: str) -> None:
    """Found by fuzzing: the file's problem came with pydantic's about the path left in its place."""
    path = _write_scenario(tmp_path)
    name = "lab.yaml" if key == "presets" else "models/config.json"
    (tmp_path / name).write_text(json.dumps(content))
    with pytest.raises(ScenarioProblems) as err:
        load_config(path)
    assert [(p.where, problem in p.message) for p in err.value.problems] == [(key, True)]


def test_scenario_presets_file_and_hf_config_resolve_and_run(tmp_path: Path) -> None:
    path = _write_scenario(tmp_path)
    config, _ = load_config(path)
    assert resolve_device(config, "h").name == "LabChip"
    assert resolve_model(config, "m").num_layers == 4
    assert resolve_model(config, "imported").num_params == 0 and resolve_model(config, "imported").num_layers == 80
    again = parse_config(config.model_dump())  # the files' content travels with the parsed config
    assert resolve_model(again, "imported") == resolve_model(config, "imported")
    result = cosim.run(path)
    assert result.summary["requests"]["completed"] == 4
    assert result.summary["clients"]["c0"]["device"] == "LabChip"


def test_a_user_preset_may_not_shadow_a_built_in(tmp_path: Path) -> None:
    clash = {"models": [{**PRESETS_FILE["models"][0], "aliases": ["llama3-8b"]}]}
    (tmp_path / "clash.yaml").write_text(yaml.safe_dump(clash))
    with pytest.raises(ScenarioProblems, match=r"presets.*'llama3-8b' is the built-in preset"):
        parse_config(scenario(presets="clash.yaml"), folder=tmp_path)


@pytest.mark.parametrize(("field", "value", "message"), [
    # found by fuzzing: the roofline overflowed on the first (a backend's ValueError) and the second
    ("intra_node_latency_us", 2**63, "less than or equal to 1000000"),
    ("intra_node_latency_us", float("inf"), "finite number"),
    ("mem_bandwidth_gbps", 1e-300, "greater than or equal to 0.001"),
    ("inter_node_gbps", 1e300, "less than or equal to 1000000000"),
    ("tdp_w", True, "not a boolean"),
    ("intra_node_bus_efficiency", 1e-300, "greater than or equal to 0.001"),
])
def test_a_presets_file_figure_out_of_bounds_is_refused_at_its_path(tmp_path: Path, field: str, value: Any,
                                                                    message: str) -> None:
    """A presets file's device figures are bounded as hardware overrides are (README's table)."""
    devices = [{**PRESETS_FILE["devices"][0], field: value}]
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump({"devices": devices}))
    with pytest.raises(ScenarioProblems, match=rf"presets.devices\[0\]\.{field}: .*{message}"):
        parse_config(scenario(presets="lab.yaml"), folder=tmp_path)


def test_missing_files_are_named_by_their_config_path(tmp_path: Path) -> None:
    config = scenario(presets="nowhere.yaml")
    config["models"]["m"] = {"hf_config": "absent/config.json"}
    with pytest.raises(ScenarioProblems) as err:
        parse_config(config, folder=tmp_path)
    text = str(err.value)
    assert "presets: cannot read" in text and "nowhere.yaml" in text
    assert "models.m.hf_config: cannot read" in text


def test_cosim_presets_lists_every_preset_with_its_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for preset in [*builtin_models(), *builtin_devices()]:
        assert preset.name in out, preset.name
    assert out.count("    source: ") == len(builtin_models())
    assert out.count("    peak_tflops: ") == len(builtin_devices())
    path = _write_scenario(tmp_path)
    assert main(["presets", "models", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "lab/tiny-7b" in out and "our lab's design doc" in out and "lab.yaml" in out
    assert "models.imported.hf_config" in out and "models/config.json" in out
    assert "LabChip" not in out  # models only
    assert main(["presets", "devices", "--presets", str(tmp_path / "lab.yaml"), "-s"]) == 0
    out = capsys.readouterr().out
    assert "LabChip" in out and "tdp_w: our lab's bring-up measurements" in out
