"""Presets from aiconfigurator: every shipped system and model config sorted, figures against the library's
YAML, and the issue's four ``cosim run``s against the library's own estimate.

Skipped, saying so, where ``aiconfigurator-core`` (the ``cosim[aiconfigurator]`` extra, part of ``dev``) is
not installed; the presets themselves load without it (tests/unit/config/test_presets.py).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed: pip install "
                    "'cosim[aiconfigurator]' (the dev extra includes it)")

import cosim
from cosim.adapters.aiconfigurator import AiconfiguratorBackend, catalog
from cosim.adapters.aiconfigurator.engine import Engine
from cosim.adapters.aiconfigurator.mapping import (
    ESTIMATE_ONLY,
    ESTIMATE_ONLY_SYSTEMS,
    MXFP4_BYTES,
    SYSTEMS,
    _shape_of,
    _spec_shape,
)
from cosim.adapters.sdk import InvalidArgument, Session
from cosim.hub.config import presets
from cosim.v1 import types_pb2 as pb
from tests import paths

SYSTEMS_DIR = resources.files("aiconfigurator_core") / "systems"
NOT_SYSTEMS = {"attention_lane_defaults", "perf_data_reuse_manifest", "query_versions"}
EXAMPLES = paths.EXAMPLES / "aiconfigurator"
BACKEND = AiconfiguratorBackend()


def system_yaml(system: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SYSTEMS_DIR / f"{system}.yaml").read_text())
    return data


def session(model: str, device: str, *, tp: int = 1, ep: int = 1, bytes_per_param: float = 2.0
            ) -> Session[pb.SessionSpec]:
    spec = pb.SessionSpec(client="c", model=presets.get_model(model).to_model_spec(),
                          hardware=presets.hardware_spec(device, tp), parallelism=pb.Parallelism(tensor=tp, expert=ep))
    spec.model.bytes_per_param = bytes_per_param
    return Session("s", spec, BACKEND.open_session(spec))


def step_ms(sess: Session[pb.SessionSpec], new: list[int], context: list[int]) -> float:
    """The step's time as the library composes it: without the kernels cosim adds beside its tables
    (every layer's RoPE and KV-cache write, adapters/aiconfigurator/untabled.py)."""
    timing = BACKEND.predict(sess, pb.StepBatch(new_tokens=new, context_tokens=context))
    return (timing.duration_ns - timing.breakdown["rope"] - timing.breakdown["kv_cache_write"]) / 1e6


def untabled_ms(engine: Engine, tokens: int) -> float:
    """What cosim adds to a step of ``tokens`` tokens beside the library's tables."""
    assert engine.untabled is not None
    return sum(ms for _, ms, _, _ in engine.untabled.entries(tokens))


# --- devices -------------------------------------------------------------------------------------------

def test_every_system_the_library_ships_is_mapped_to_a_preset_and_back() -> None:
    from aiconfigurator_core.sdk.perf_database import get_supported_databases

    shipped = {p.name.removesuffix(".yaml") for p in SYSTEMS_DIR.iterdir() if p.name.endswith(".yaml")} - NOT_SYSTEMS
    assert set(SYSTEMS.values()) == set(get_supported_databases())  # every system with measured tables
    assert set(SYSTEMS.values()) | set(ESTIMATE_ONLY_SYSTEMS) == shipped  # and the estimate-only ones
    assert len(SYSTEMS) == len(set(SYSTEMS.values())) == 10
    for device, system in {**SYSTEMS, **ESTIMATE_ONLY}.items():
        assert presets.get_device(device).name == device, system
        assert (SYSTEMS_DIR / f"{system}.yaml").is_file()
    for system in ESTIMATE_ONLY_SYSTEMS:
        assert "Estimate-only" in (SYSTEMS_DIR / f"{system}.yaml").read_text()


# A source citing the library: "aiconfigurator-core 0.12.0 systems/b300_sxm.yaml gpu.mem_bw, ...".
CITATION = re.compile(r"aiconfigurator-core [\d.]+ systems/(\w+)\.yaml ((?:(?:gpu|node)\.\w+(?:, )?)+)")
TC_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp4": "fp4", "int8": "int8", "float32": "fp32"}


def _cited_value(field: str, key: str, value: float) -> tuple[str, float]:
    """The preset field (a peak_tflops dtype: ``peak_tflops.bf16``) and its value in cosim's units."""
    if field == "peak_tflops":
        return f"peak_tflops.{TC_DTYPES[key.removesuffix('_tc_flops')]}", value / 1e12
    scale = {"mem_bandwidth_gbps": 1e9, "intra_node_gbps": 1e9, "inter_node_gbps": 1e9,
             "mem_capacity_gib": 2**30}.get(field, 1)
    return field, value / scale


def test_preset_figures_cited_from_the_library_equal_its_system_yaml() -> None:
    checked: dict[str, int] = {}
    for device in presets.builtin_devices():
        for field, text in device.sources.items():
            match = CITATION.search(text)
            if match is None:
                continue
            data = system_yaml(match.group(1))
            assert match.group(1) == {**SYSTEMS, **ESTIMATE_ONLY}.get(device.name), (device.name,
                                                                             "cites another system's YAML")
            for dotted in match.group(2).split(", "):
                section, key = dotted.split(".")
                name, expected = _cited_value(field, key, float(data[section][key]))
                actual = device.peak_tflops[name.split(".")[1]] if "." in name else getattr(device, name)
                assert actual == pytest.approx(expected, rel=1e-9), (device.name, dotted)
                checked[device.name] = checked.get(device.name, 0) + 1
    # Every figure of the presets made from the library's YAML is checked, not a few (L4: its
    # estimate-only spec, which the backend refuses but whose figures are NVIDIA's datasheet's).
    assert checked == {"B300": 10, "GB300": 10, "Arc-Pro-B60": 9, "L4": 9}


def test_every_mapped_preset_agrees_with_the_library_on_power_bandwidth_and_peak() -> None:
    """Presets from datasheets (H100-SXM, B200, ...) may round differently from the library, but are the
    same part: same TDP, bandwidth within 4% (B200: HGX datasheet 8 TB/s, the library 7.7), bf16 peak within
    7% (RTX PRO 6000: Workstation datasheet 500, the library scales the Server Edition to its clock, 467.8),
    memory within 8% (datasheet GB read as GiB against nvidia-smi's total)."""
    for device, system in SYSTEMS.items():
        preset, gpu = presets.get_device(device), system_yaml(system)["gpu"]
        assert preset.tdp_w == gpu["power"], device
        assert preset.mem_bandwidth_gbps == pytest.approx(gpu["mem_bw"] / 1e9, rel=0.04), device
        assert preset.peak_tflops["bf16"] == pytest.approx(gpu["bfloat16_tc_flops"] / 1e12, rel=0.07), device
        memory = preset.mem_reported_bytes or preset.mem_capacity_bytes
        assert memory == pytest.approx(gpu["mem_capacity"], rel=0.08), device


def test_one_decode_of_llama_8b_reads_its_weights_at_each_systems_bandwidth() -> None:
    """One sequence's decode is bound by reading the 16 GB of weights: at least weights / bandwidth on the
    device the preset names, and (kernels reach 50-95% of it) less than twice that. A device mapped to
    another's tables (B60 on B200's) would fall outside."""
    weights = presets.get_model("meta-llama/Llama-3.1-8B").weight_bytes()
    for device in SYSTEMS:
        bound_ms = weights / presets.get_device(device).mem_bandwidth_gbps / 1e6
        measured = step_ms(session("meta-llama/Llama-3.1-8B", device), [1], [128])
        assert bound_ms < measured < 2 * bound_ms, device


@pytest.mark.parametrize(("device", "system"), [("H100-PCIe", "h100_pcie"), ("L4", "l4")])
def test_a_device_with_an_estimate_only_spec_is_refused_naming_it(device: str, system: str) -> None:
    with pytest.raises(InvalidArgument, match=rf"estimate-only spec for it \({system}\.yaml") as err:
        session("meta-llama/Llama-3.1-8B", device)
    assert err.value.field == "spec.hardware.device"


# --- models --------------------------------------------------------------------------------------------

def test_every_shipped_model_config_is_a_preset_a_quantized_variant_or_refused_with_a_reason() -> None:
    kinds: dict[str, list[str]] = {}
    for library_id in catalog.shipped_ids():
        kind, detail = catalog.classify(library_id)
        assert kind != "unknown", f"{library_id} (family {detail}) is not sorted in catalog.py"
        kinds.setdefault(kind, []).append(library_id)
    assert sorted(kinds["preset"]) == sorted(catalog.LIBRARY_MODELS.values())
    assert len(kinds["preset"]) == 19 and len(kinds["quantized"]) == 5


def test_every_library_preset_has_the_shape_of_the_config_it_is_timed_from() -> None:
    for name, library_id in catalog.LIBRARY_MODELS.items():
        preset = presets.get_model(name)
        assert preset.name == name
        if "MLA" in preset.source:  # DeepSeek-V3: latent held as one KV head (hub/config/presets/hf.py); refused
            continue
        assert _spec_shape(preset.to_model_spec()) == _shape_of(catalog.library_config(library_id)), name
    for library_id, (name, _dtype) in catalog.QUANTIZED.items():
        assert _spec_shape(presets.get_model(name).to_model_spec()) == _shape_of(catalog.library_config(library_id))


def test_the_generated_presets_file_is_current() -> None:
    assert catalog.OUTPUT.read_text(encoding="utf-8") == catalog.render()
    assert presets.get_model("meta-llama/Meta-Llama-3.1-405B").name == "meta-llama/Llama-3.1-405B"


@pytest.mark.parametrize(("model", "device", "tp", "ep"), [
    ("meta-llama/Llama-3.1-405B", "B200", 8, 1), ("mistralai/Mixtral-8x22B-v0.1", "H200", 4, 1),
    ("Qwen/Qwen3-235B-A22B", "H200", 8, 8), ("MiniMaxAI/MiniMax-M2.5", "H200", 4, 4), ("Qwen/Qwen3-0.6B", "L40S", 1, 1),
])
def test_generated_presets_are_timed_as_the_librarys_own_static_estimate(model: str, device: str, tp: int,
                                                                         ep: int) -> None:
    sess = session(model, device, tp=tp, ep=ep)
    context_ms, _, _ = sess.state.engine(1).handle.run_static(batch_size=4, isl=1024, osl=2)
    assert step_ms(sess, [1024] * 4, [0] * 4) == pytest.approx(context_ms, rel=1e-6)


def test_gpt_oss_is_timed_with_mxfp4_experts_and_refused_in_bf16() -> None:
    """The library measured gpt-oss's MoE layers in MXFP4 only; a bf16 gpt-oss fails at open, naming it."""
    with pytest.raises(InvalidArgument, match=r'MoE data missing .*quant: "bfloat16"') as err:
        session("openai/gpt-oss-20b", "H100-SXM")
    assert err.value.field == "spec"
    sess = session("openai/gpt-oss-20b", "H100-SXM", bytes_per_param=MXFP4_BYTES)
    context_ms, generation_ms, _ = sess.state.engine(1).handle.run_static(batch_size=8, isl=1000, osl=2)
    assert step_ms(sess, [1000] * 8, [0] * 8) == pytest.approx(context_ms, rel=1e-6)
    assert step_ms(sess, [1] * 8, [1000] * 8) == pytest.approx(generation_ms, rel=1e-6)


# --- the four runs of the "Done when" ----------------------------------------------------------

# example file -> (model, device, TP, EP, DP ranks): the engine the library's own estimate is asked of.
DONE_WHEN = {
    "llama-3.1-8b-rtx-pro-6000": ("meta-llama/Llama-3.1-8B", "RTX-PRO-6000", 1, 1, 1),
    "qwen3-32b-h100-tp2": ("Qwen/Qwen3-32B", "H100-SXM", 2, 1, 1),
    "qwen3-30b-a3b-h100-dp2-ep2": ("Qwen/Qwen3-30B-A3B", "H100-SXM", 1, 2, 2),
    "llama-3.1-70b-h200-tp4": ("meta-llama/Llama-3.1-70B", "H200", 4, 1, 1),
}
BATCH, ISL, OSL = 4, 512, 16


@pytest.mark.parametrize("name", list(DONE_WHEN))
def test_the_example_runs_and_its_static_batch_is_the_librarys_estimate(name: str, tmp_path: Path) -> None:
    """Each example validates and runs as written (a handful of requests); then ``BATCH`` requests per DP rank arriving
    at once, batched statically, give TTFT = the library's prefill of the batch and TPOT = its static
    estimate's decode phase per token (it samples the context every 32 tokens; cosim times each step)."""
    path = EXAMPLES / f"{name}.yaml"
    assert cosim.validate(path) == []  # the DP x EP ranks' probe carries both ranks' tokens, as a run's steps
    result = cosim.run(path, overrides=["workload.requests=8"], output_dir=tmp_path / "as-written")
    assert len(result.requests) == 8 and all(r.finish_ns > r.first_token_ns > r.arrival_ns for r in result.requests)

    model, device, tp, ep, ranks = DONE_WHEN[name]
    overrides = [f"workload.requests={BATCH * ranks}", "workload.arrival={process: constant}",
                 f"workload.input_tokens={{dist: fixed, value: {ISL}}}",
                 f"workload.output_tokens={{dist: fixed, value: {OSL}}}"]
    overrides += [f"clients[{i}].scheduler={{batching: static, max_num_seqs: {BATCH}, "
                  f"max_num_batched_tokens: {BATCH * ISL}}}" for i in range(ranks)]
    if ranks > 1:
        overrides.append("router.policy=round_robin")  # BATCH requests on each rank
    result = cosim.run(path, overrides=overrides, output_dir=tmp_path / "static")
    engine = session(model, device, tp=tp, ep=ep).state.engine(ranks)
    context_ms, generation_ms, _ = engine.handle.run_static(batch_size=BATCH, isl=ISL, osl=OSL)
    context_ms += untabled_ms(engine, BATCH * ISL)  # every layer's RoPE and KV-cache write, beside the tables
    decode_ms = generation_ms / (OSL - 1) + untabled_ms(engine, BATCH)
    for request in result.requests:
        assert (request.first_token_ns - request.arrival_ns) / 1e6 == pytest.approx(context_ms, rel=1e-6)
        tpot_ms = (request.finish_ns - request.first_token_ns) / (OSL - 1) / 1e6
        assert tpot_ms == pytest.approx(decode_ms, rel=1e-3)
