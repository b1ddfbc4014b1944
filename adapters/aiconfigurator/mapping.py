"""The SessionSpec in aiconfigurator's terms: a system, an engine version, a model and its parallelism.

aiconfigurator (PyPI ``aiconfigurator-core``) keys its measured tables by
*system* (``h100_sxm``, ``rtx_pro_6000_server``, ...), serving *engine*
(``vllm``, ``sglang``, ``trtllm``) and engine *version*, and builds a model
from a Hugging Face ``config.json``. Here a cosim device preset becomes a
system (:data:`SYSTEMS`; ``options.system`` names one directly), a model
preset becomes the library's shipped config where it has one
(:data:`~.catalog.LIBRARY_MODELS`, checked against the ModelSpec's shape) or a config
written from the ModelSpec's own shape (dense gated-MLP and MoE decoders),
and TP/PP/EP plus the data-parallel ranks of a lock-step batch become its
``tp_size``/``pp_size``/``moe_ep_size``/``moe_tp_size``/``attention_dp_size``.
Nothing falls back: a device, model, engine version or quantization the
library has no data for is an :class:`InvalidArgument` that names it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

from cosim.adapters.sdk import InvalidArgument
from cosim.v1 import types_pb2 as pb

from .catalog import FAMILY_REFUSALS, LIBRARY_MODELS, SCHEDULABLE_FAMILIES

ENGINES = ("vllm", "sglang", "trtllm")
DATABASE_MODES = ("SILICON", "HYBRID", "EMPIRICAL", "SOL")
VERSION_ALIASES = ("current", "previous", "next")

# cosim device preset (hub/config/presets/devices.yaml) -> aiconfigurator system (its systems/*.yaml): every
# system the library ships measured tables for. A100-80GB: the library's a100_sxm.yaml is the 80 GB
# part (mem_capacity 80 GiB, 2039 GB/s). RTX-PRO-6000: the library measured the Server Edition;
# cosim's preset quotes the Workstation Edition's datasheet, the same GB202 chip, 1792 GB/s GDDR7
# and 600 W (both NVIDIA datasheets). docs/aiconfigurator.md, "Presets", lists where the figures differ.
SYSTEMS: dict[str, str] = {
    "A100-80GB": "a100_sxm",
    "H100-SXM": "h100_sxm",
    "H200": "h200_sxm",
    "B200": "b200_sxm",
    "B300": "b300_sxm",
    "GB200": "gb200",
    "GB300": "gb300",
    "L40S": "l40s",
    "RTX-PRO-6000": "rtx_pro_6000_server",
    "Arc-Pro-B60": "b60",
}

# The library's estimate-only systems: a spec YAML without measured tables ("for SOL/EMPIRICAL/HYBRID
# exploration", its comment says), which its engine cannot compile; and cosim's presets of them.
ESTIMATE_ONLY_SYSTEMS = ("a100_pcie", "a30", "h100_pcie", "l4")
ESTIMATE_ONLY: dict[str, str] = {"H100-PCIe": "h100_pcie", "L4": "l4"}

_QUANT_BY_BYTES = {2.0: "bfloat16", 1.0: "fp8"}
# An MoE model's 1-byte experts, as the library's MoE quant modes in the order they are tried (the first
# with tables for the shape is used). Published FP8 MoE checkpoints are block-scaled (Qwen's
# Qwen3-30B-A3B-FP8: 128x128 blocks in its config's quantization_config) or per-channel with per-token
# activations (RedHatAI's "FP8-dynamic", e.g. Llama-4-Scout-17B-16E-Instruct-FP8-dynamic). vLLM serves
# both with its Triton (or CUTLASS) FP8 experts: its FlashInfer experts take per-tensor and 128-block
# scales only (vllm/model_executor/layers/fused_moe/oracle/fp8.py, select_fp8_moe_backend, and each
# experts class's _supports_quant_scheme). The library's `fp8_block` rows are vLLM's FP8 experts for
# block scales (h100_sxm, vLLM 0.24.0: kernel_source vllm_fp8moe_triton_tritonexperts and FlashInfer's
# block path); its `fp8` rows are FlashInfer's CUTLASS experts for ModelOpt's per-tensor checkpoints
# (vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts), 4-5x slower for Llama-4-Scout's experts at
# 16-512 tokens. AISimulate 0.13 reads Qwen3-30B-A3B-FP8's config as fp8_block too. Systems without
# fp8_block rows for a shape (rtx_pro_6000_server) keep `fp8`; options.moe_quant_mode pins a mode.
FP8_MOE_MODES = ("fp8_block", "fp8")
# MXFP4 (gpt-oss's expert weights): 4-bit elements and one 8-bit scale per 32, 4.25 bits. The library
# measured gpt-oss's MoE layers only so (w4a16_mxfp4); its attention and LM head stay bf16.
MXFP4_BYTES = 4.25 / 8


@dataclasses.dataclass(frozen=True)
class AicOptions:
    """Session options (``SessionSpec.options``) the aiconfigurator backend reads.

    Attributes:
        engine: the serving engine whose kernels were measured: vllm, sglang or trtllm.
        engine_version: a version the system has data for, or an alias (current,
            previous, next); default: the library's ``current`` slot, the newest
            version with a complete collection for the system.
        database_mode: SILICON (measured tables; the library's default), HYBRID
            (measured, else speed-of-light x empirical factor), EMPIRICAL or SOL.
        system: an aiconfigurator system name, overriding the device mapping.
        model: a model id aiconfigurator ships a config for, overriding the model mapping.
        moe_quant_mode: the library's MoE quant mode for the experts (e.g. ``fp8`` for a ModelOpt
            per-tensor checkpoint), instead of the one the element size gives (:data:`FP8_MOE_MODES`).
    """

    engine: str = "vllm"
    engine_version: str = ""
    database_mode: str = "SILICON"
    system: str = ""
    model: str = ""
    moe_quant_mode: str = ""


def parse_options(options: dict[str, Any]) -> AicOptions:
    """Checks options; errors name ``spec.options.<key>``."""
    known = {f.name for f in dataclasses.fields(AicOptions)}
    for key, value in options.items():
        field = f"spec.options.{key}"
        if key not in known:
            raise InvalidArgument(field, value, f"is not an aiconfigurator option; known: {sorted(known)}")
        if not isinstance(value, str):
            raise InvalidArgument(field, value, "must be a string")
    parsed = AicOptions(**options)
    if parsed.engine not in ENGINES:
        raise InvalidArgument("spec.options.engine", parsed.engine, f"must be one of {list(ENGINES)}")
    if parsed.database_mode not in DATABASE_MODES:
        raise InvalidArgument("spec.options.database_mode", parsed.database_mode,
                              f"must be one of {list(DATABASE_MODES)}")
    return parsed


def system_name(spec: pb.SessionSpec, options: AicOptions, versions: Callable[[str], list[str]],
                supported: Callable[[], dict[str, dict[str, list[str]]]]) -> tuple[str, list[str]]:
    """The aiconfigurator system for the session's device, and the versions it lists for the engine.

    Args:
        versions: the versions the library lists for ``options.engine`` on a system (its
            ``get_supported_databases()[system][engine]``, empty where it lists none), read for that
            system alone.
        supported: the library's whole ``get_supported_databases()``: system -> engine -> versions. It
            parses every system's files, so it is read only to name the choices in an error.

    Raises:
        InvalidArgument: the device maps to no system, or the system has no data for the engine.
    """
    device = spec.hardware.device
    if options.system:
        system, field, value = options.system, "spec.options.system", options.system
    else:
        field, value = "spec.hardware.device", device
        system = SYSTEMS.get(device, "")
        if device in ESTIMATE_ONLY:
            raise InvalidArgument(field, value, f"aiconfigurator ships only an estimate-only spec for it "
                                  f"({ESTIMATE_ONLY[device]}.yaml, no measured tables); mapped devices: "
                                  f"{sorted(SYSTEMS)}")
        if not system:
            raise InvalidArgument(field, value, f"has no aiconfigurator system; mapped devices: {sorted(SYSTEMS)} "
                                  f"(or name a system with options.system, one of {sorted(supported())})")
    found = versions(system)
    if found:
        return system, found
    systems = supported()
    if system not in systems:
        raise InvalidArgument(field, value, f"aiconfigurator has no measured data for system {system!r}; "
                              f"systems with data: {sorted(systems)}")
    raise InvalidArgument("spec.options.engine", options.engine, f"has no data on system {system!r}; "
                          f"engines there: {sorted(systems[system])}")


def engine_version(system: str, options: AicOptions, slots: dict[str, str] | None, versions: list[str]) -> str:
    """The literal engine version to load: the requested one, or the ``current`` slot.

    Args:
        slots: the library's ``get_version_slots(system, engine)`` (alias -> version), or None.
        versions: the versions the system declares for the engine.

    Raises:
        InvalidArgument: the version is neither a slot version nor an alias the system has.
    """
    requested = options.engine_version or "current"
    queryable = dict(slots or {})
    if requested in VERSION_ALIASES:
        if requested in queryable:
            return queryable[requested]
        if not queryable and requested == "current" and versions:
            return max(versions)  # a system without slots: its newest declared version
    elif requested in queryable.values() or (not queryable and requested in versions):
        return requested
    choices = sorted(set(queryable.values()) or versions)
    raise InvalidArgument("spec.options.engine_version", requested,
                          f"has no {options.engine} data on {system}; queryable versions: {choices} "
                          f"(aliases {sorted(queryable)})")


def quant_modes(model: pb.ModelSpec) -> dict[str, str]:
    """aiconfigurator quant modes from the ModelSpec's element sizes (2 bytes: bfloat16, 1: fp8; for an
    MoE model, :data:`MXFP4_BYTES`: MXFP4 experts with bf16 attention, as gpt-oss ships)."""
    weights = _QUANT_BY_BYTES.get(float(model.bytes_per_param or 2.0))
    kv = _QUANT_BY_BYTES.get(float(model.bytes_per_kv_element or 2.0))
    moe = weights
    if model.num_experts > 1 and float(model.bytes_per_param) == MXFP4_BYTES:
        weights, moe = "bfloat16", "w4a16_mxfp4"
    if weights is None:
        raise InvalidArgument("spec.model.bytes_per_param", model.bytes_per_param,
                              f"has no aiconfigurator quant mode; supported: {sorted(_QUANT_BY_BYTES)}, and "
                              f"{MXFP4_BYTES} (MXFP4 experts) for an MoE model")
    if kv is None:
        raise InvalidArgument("spec.model.bytes_per_kv_element", model.bytes_per_kv_element,
                              f"has no aiconfigurator KV-cache mode; supported: {sorted(_QUANT_BY_BYTES)}")
    return {"gemm_quant_mode": weights, "moe_quant_mode": moe or weights, "kvcache_quant_mode": kv,
            "fmha_quant_mode": "bfloat16"}


def moe_quant_candidates(model: pb.ModelSpec, options: AicOptions, quant: dict[str, str]) -> tuple[str, ...]:
    """The MoE quant modes to try for the experts, in order: ``options.moe_quant_mode`` alone where set,
    :data:`FP8_MOE_MODES` for 1-byte experts, else the one :func:`quant_modes` gave."""
    if options.moe_quant_mode:
        return (options.moe_quant_mode,)
    if model.num_experts > 1 and quant["moe_quant_mode"] == "fp8":
        return FP8_MOE_MODES
    return (quant["moe_quant_mode"],)


def parallel_sizes(spec: pb.SessionSpec, num_dp_ranks: int) -> dict[str, int]:
    """aiconfigurator parallel sizes for the session with ``num_dp_ranks`` lock-step DP ranks.

    The MoE layers span every rank of every DP replica (vLLM: EP size = DP x TP), so
    ``moe_tp_size x moe_ep_size = tp_size x attention_dp_size`` (the library's own invariant).

    Raises:
        InvalidArgument: the expert-parallel degree does not divide TP x DP ranks.
    """
    par = spec.parallelism
    tp, pp, ep = par.tensor or 1, par.pipeline or 1, par.expert or 1
    width = tp * num_dp_ranks
    if spec.model.num_experts <= 1:
        return {"tp_size": tp, "pp_size": pp, "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 1}
    if width % ep:
        raise InvalidArgument("spec.parallelism.expert", ep,
                              f"must divide tensor ({tp}) x data-parallel ranks ({num_dp_ranks}) = {width}: "
                              "aiconfigurator spreads the experts over the attention ranks")
    return {"tp_size": tp, "pp_size": pp, "attention_dp_size": num_dp_ranks, "moe_tp_size": width // ep,
            "moe_ep_size": ep}


def _shipped_config(model_id: str) -> dict[str, Any] | None:
    from importlib import resources

    path = resources.files("aiconfigurator_core") / "model_configs" / f"{model_id.replace('/', '--')}_config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _shape_of(config: dict[str, Any]) -> dict[str, int]:
    """The shape fields of a Hugging Face config, in ModelSpec's names."""
    heads = int(config["num_attention_heads"])
    moe = int(config.get("num_local_experts") or config.get("num_experts") or 0)
    return {"num_layers": int(config["num_hidden_layers"]), "hidden_size": int(config["hidden_size"]),
            "num_attention_heads": heads, "num_kv_heads": int(config.get("num_key_value_heads") or heads),
            "intermediate_size": int(config.get("moe_intermediate_size") or config["intermediate_size"])
            if moe else int(config["intermediate_size"]),
            "vocab_size": int(config["vocab_size"]), "num_experts": moe if moe > 1 else 0}


def _spec_shape(model: pb.ModelSpec) -> dict[str, int]:
    return {"num_layers": model.num_layers, "hidden_size": model.hidden_size,
            "num_attention_heads": model.num_attention_heads, "num_kv_heads": model.num_kv_heads,
            "intermediate_size": model.intermediate_size, "vocab_size": model.vocab_size,
            "num_experts": model.num_experts if model.num_experts > 1 else 0}


def _config_from_spec(model: pb.ModelSpec) -> dict[str, Any]:
    """A Hugging Face config.json with the ModelSpec's shape: Llama (dense) or Mixtral (MoE)."""
    if not model.gated_mlp and model.num_experts <= 1:
        raise InvalidArgument("spec.model.gated_mlp", False,
                              f"model {model.name!r}: aiconfigurator times gated-MLP (SwiGLU) decoders only")
    config: dict[str, Any] = {
        "num_hidden_layers": model.num_layers, "hidden_size": model.hidden_size,
        "num_attention_heads": model.num_attention_heads, "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_dim or model.hidden_size // model.num_attention_heads,
        "intermediate_size": model.intermediate_size, "vocab_size": model.vocab_size,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
        "tie_word_embeddings": model.tie_word_embeddings, "hidden_act": "silu",
    }
    if model.num_experts > 1:
        config.update(architectures=["MixtralForCausalLM"], model_type="mixtral",
                      num_local_experts=model.num_experts,
                      # the routed top-k; the engine adds the shared experts (engine.SharedExperts)
                      num_experts_per_tok=max(model.experts_per_token - model.shared_experts, 1))
    else:
        config.update(architectures=["LlamaForCausalLM"], model_type="llama")
    return config


# Files named by their content, which sessions in every process share: model configs, compiled engine specs.
SCRATCH = os.path.join(tempfile.gettempdir(), "cosim-aiconfigurator")


def write_once(path: str, data: bytes) -> None:
    """Writes ``path`` unless it exists, atomically: sessions in other processes may write the same file."""
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        scratch = f"{path}.{os.getpid()}"
        with open(scratch, "wb") as handle:
            handle.write(data)
        os.replace(scratch, path)


def _config_folder(config: dict[str, Any]) -> str:
    """A folder holding ``config.json`` (the library reads a local model as one), named by its content."""
    text = json.dumps(config, sort_keys=True)
    folder = os.path.join(SCRATCH, hashlib.sha256(text.encode()).hexdigest()[:16])
    write_once(os.path.join(folder, "config.json"), text.encode())
    return folder


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where the library's model comes from: ``path`` is what its ``get_model`` reads.

    Attributes:
        path: a Hugging Face id the library ships a config for, or a folder holding a config.json.
        origin: ``library`` (its shipped config) or ``spec`` (written from the ModelSpec's shape).
        family: the library's model family (LLAMA, MOE, ...).
    """

    path: str
    origin: str
    family: str


def model_source(model: pb.ModelSpec, options: AicOptions, shipped_ids: set[str]) -> ModelSource:
    """The library model for the ModelSpec: its own config where it ships one, else the spec's shape.

    Args:
        shipped_ids: the Hugging Face ids the library reads without a download (its DefaultHFModels).

    Raises:
        InvalidArgument: an unknown ``options.model``; a shipped config whose shape differs from the
            ModelSpec's (the scenario changed the preset); a family the hub cannot schedule.
    """
    from aiconfigurator_core.sdk.common import ARCHITECTURE_TO_MODEL_FAMILY

    model_id = options.model or LIBRARY_MODELS.get(model.name, "")
    shipped = _shipped_config(model_id) if model_id else None
    if options.model and shipped is None:
        raise InvalidArgument("spec.options.model", options.model, "is not a model aiconfigurator ships a "
                              f"config for; shipped: {sorted(shipped_ids)}")
    config = shipped if shipped is not None else _config_from_spec(model)
    architecture = (config.get("architectures") or [""])[0]
    family = ARCHITECTURE_TO_MODEL_FAMILY.get(architecture, "")
    if family not in SCHEDULABLE_FAMILIES:
        why = FAMILY_REFUSALS.get(family, "not a family the hub schedules")
        raise InvalidArgument("spec.model", model.name, f"is a {architecture or 'unknown'} model (aiconfigurator "
                              f"family {family or 'none'}: {why}); the hub schedules {list(SCHEDULABLE_FAMILIES)} "
                              "families with GQA attention only")
    if shipped is None:
        return ModelSource(path=_config_folder(config), origin="spec", family=family)
    spec_shape = _spec_shape(model)
    differ = [f"{k} (library {v}, spec {spec_shape[k]})" for k, v in _shape_of(shipped).items() if spec_shape[k] != v]
    if differ and not options.model:
        raise InvalidArgument("spec.model", model.name, f"differs from aiconfigurator's config for {model_id} in "
                              f"{', '.join(differ)}; use the preset's shape, or a model name of its own to time "
                              "the spec's shape")
    path = model_id if model_id in shipped_ids else _config_folder(shipped)
    return ModelSource(path=path, origin="library", family=family)
