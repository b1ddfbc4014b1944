"""The model configs aiconfigurator-core ships, sorted for cosim, and the presets generated from them.

Every ``<org>--<name>_config.json`` in the library's ``model_configs`` folder is one of:

* a **preset** cosim times from that config (:data:`LIBRARY_MODELS`: preset name -> library id):
  hand-written in ``hub/config/presets/models.yaml`` (:data:`HAND_WRITTEN`), or generated from the
  library's config into ``hub/config/presets/models_aiconfigurator.yaml`` (:data:`GENERATED`, through
  :func:`cosim.hub.config.presets.hf.from_hf_config`, with the published total parameters);
* a **quantized variant** of a preset (:data:`QUANTIZED`): the same shape with 8-bit weights,
  reached with the preset and ``dtype: fp8``; or with 4-bit weights, which cosim's dtypes do not
  hold (refused, saying so);
* **refused by family** (:data:`FAMILY_REFUSALS`): attention or layer kinds the hub does not
  schedule (MLA, linear attention, Mamba, mixed sliding-window layers, vision encoders), each
  with the reason.

The generated file lives in the project, so the presets work without the library (an optional
extra). Rewrite it after a library upgrade, and check it is current, with::

    python -m cosim.adapters.aiconfigurator.catalog           # writes hub/config/presets/models_aiconfigurator.yaml
    python -m cosim.adapters.aiconfigurator.catalog --check   # exit 1 when the file differs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

LIBRARY = "aiconfigurator-core 0.12.0"

# Presets in hub/config/presets/models.yaml that aiconfigurator ships a config for: preset name -> library id.
HAND_WRITTEN: dict[str, str] = {
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "mistralai/Mixtral-8x7B-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "openai/gpt-oss-20b": "openai/gpt-oss-20b",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
    "deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-V3",  # MLA: a preset for the roofline; refused here by family
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-R1",  # the same
}


@dataclasses.dataclass(frozen=True)
class Generated:
    """One preset generated from a library config.

    Attributes:
        name: the preset's name (the model's current Hugging Face id).
        num_params: the published total parameters; 0 where none is published precisely (then the
            shape's count stands, and ``note`` says so).
        note: where ``num_params`` comes from, and what the preset does not model.
    """

    name: str
    num_params: int
    note: str


GENERATED: dict[str, Generated] = {
    "Qwen/Qwen3-0.6B": Generated("Qwen/Qwen3-0.6B", 600_000_000, "num_params 0.6B of the Qwen3-0.6B model card"),
    "Qwen/Qwen3-1.7B": Generated("Qwen/Qwen3-1.7B", 1_700_000_000, "num_params 1.7B of the Qwen3-1.7B model card"),
    "Qwen/Qwen3-235B-A22B": Generated("Qwen/Qwen3-235B-A22B", 235_000_000_000,
                                      "num_params 235B total (22B activated) of the Qwen3-235B-A22B model card"),
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": Generated(
        "Qwen/Qwen3-Coder-480B-A35B-Instruct", 480_000_000_000,
        "num_params 480B total (35B active) of the Qwen3-Coder-480B-A35B-Instruct model card"),
    "meta-llama/Meta-Llama-3.1-405B": Generated("meta-llama/Llama-3.1-405B", 405_000_000_000,
                                                "num_params 405B of Meta's Llama 3.1 model card"),
    "mistralai/Mixtral-8x22B-v0.1": Generated("mistralai/Mixtral-8x22B-v0.1", 141_000_000_000,
                                              "num_params 141B total (39B active) of Mistral AI's Mixtral 8x22B "
                                              "announcement"),
    "XiaomiMiMo/MiMo-7B-Base": Generated("XiaomiMiMo/MiMo-7B-Base", 0,
                                         "num_params from the shape (the model card names it 7B); its "
                                         "multi-token-prediction layer is not modelled"),
    "MiniMaxAI/MiniMax-M2.5": Generated("MiniMaxAI/MiniMax-M2.5", 230_000_000_000,
                                        "num_params 230B total (10B active) of the MiniMax-M2 model card; weights "
                                        "ship in fp8 (dtype fp8); its multi-token-prediction modules are not "
                                        "modelled"),
    "MiniMaxAI/MiniMax-M2.7": Generated("MiniMaxAI/MiniMax-M2.7", 230_000_000_000,
                                        "num_params 230B total (10B active) of the MiniMax-M2 model card (M2.7 has "
                                        "the M2 shape); weights ship in fp8 (dtype fp8); its multi-token-prediction "
                                        "modules are not modelled"),
}

# Every preset timed from the library's own config: preset name -> library id.
LIBRARY_MODELS: dict[str, str] = {**HAND_WRITTEN, **{g.name: lib for lib, g in GENERATED.items()}}

# Quantized variants of a preset's shape: library id -> (preset, cosim dtype, or "" when cosim has none).
QUANTIZED: dict[str, tuple[str, str]] = {
    "Qwen/Qwen3-32B-FP8": ("Qwen/Qwen3-32B", "fp8"),
    "Qwen/Qwen3-32B-FP8-Static-PerTensor": ("Qwen/Qwen3-32B", "fp8"),
    "Qwen/Qwen3-30B-A3B-FP8": ("Qwen/Qwen3-30B-A3B", "fp8"),
    "Qwen/Qwen3-235B-A22B-FP8": ("Qwen/Qwen3-235B-A22B", "fp8"),
    "nvidia/Llama-3.1-70B-Instruct-FP8": ("meta-llama/Llama-3.1-70B", "fp8"),
    "nvidia/Qwen3-235B-A22B-NVFP4": ("Qwen/Qwen3-235B-A22B", ""),
    "nvidia/MiniMax-M2.5-NVFP4": ("MiniMaxAI/MiniMax-M2.5", ""),
    "nvidia/MiniMax-M2.7-NVFP4": ("MiniMaxAI/MiniMax-M2.7", ""),
}
FOUR_BIT = "4-bit (NVFP4) weights, which cosim's dtypes (fp32, fp16, bf16, fp8, int8) do not hold"

# The library's model families (its ARCHITECTURE_TO_MODEL_FAMILY) whose attention and KV cache the hub
# models as GQA, and why every other family is refused.
SCHEDULABLE_FAMILIES = ("LLAMA", "MOE")
_MLA = "multi-head latent attention (MLA): the step timer evaluates GQA attention operators only"
FAMILY_REFUSALS: dict[str, str] = {
    "DEEPSEEK": _MLA,
    "DEEPSEEKV32": f"{_MLA}, and DeepSeek sparse attention",
    "KIMIK25": f"{_MLA}, and a vision encoder",
    "KIMIK3": _MLA,
    "DEEPSEEKV4": "DeepSeek-V4's compressed, indexed sparse attention (compress_ratios, index_topk)",
    "QWEN35": "hybrid: linear-attention (Gated DeltaNet) layers between full-attention ones, whose recurrent "
              "state the hub's KV cache does not model",
    "NEMOTRONH": "hybrid: Mamba-2 layers between attention layers, whose recurrent state the hub's KV cache "
                 "does not model",
    "NEMOTRONNAS": "layers of different shapes (found by architecture search), which one ModelSpec cannot hold",
    "HYBRIDMOE": "chunked or sliding-window attention layers interleaved with global ones, and dense layers "
                 "interleaved with MoE ones (Llama 4, MiMo-V2)",
    "GEMMA4MIX": "sliding-window and global attention layers mixed, and a vision encoder",
    "STEP3P7": "sliding-window and full-attention layers mixed (its layer_types)",
    "MINIMAXM3": "MiniMax-M3's sparse attention (sparse_attention_config) and MoE layers interleaved with dense ones",
    "QWEN3VL": "multimodal: a vision encoder before the language model, which the hub does not schedule",
    "QWEN3VL_MOE": "multimodal: a vision encoder before the language model, which the hub does not schedule",
}

OUTPUT = Path(__file__).resolve().parents[2] / "hub" / "config" / "presets" / "models_aiconfigurator.yaml"
HEADER = f"""\
# Model presets generated from the model configs {LIBRARY} ships (its model_configs/*_config.json,
# copies of each model's Hugging Face config.json), by cosim.hub.config.presets.hf.from_hf_config.
# Do not edit: the table is GENERATED in adapters/aiconfigurator/catalog.py; rewrite with
#   python -m cosim.adapters.aiconfigurator.catalog
# (tests/contract/test_aiconfigurator_presets.py checks it is current when the library is installed).
# Conventions as models.yaml. Presets of the library's other configs are hand-written there, or
# refused by family (docs/aiconfigurator.md, "Presets").
"""


def library_config(library_id: str) -> dict[str, Any]:
    """The config.json the library ships for ``library_id`` (needs the library)."""
    from importlib import resources

    path = resources.files("aiconfigurator_core") / "model_configs" / f"{library_id.replace('/', '--')}_config.json"
    config: dict[str, Any] = json.loads(path.read_text())
    return config


def shipped_ids() -> list[str]:
    """Every model id the library ships a config for (its ``model_configs`` folder), sorted."""
    from importlib import resources

    folder = resources.files("aiconfigurator_core") / "model_configs"
    names = [p.name for p in folder.iterdir() if p.name.endswith("_config.json")
             and not p.name.endswith("_hf_quant_config.json")]
    return sorted(n.removesuffix("_config.json").replace("--", "/") for n in names)


def classify(library_id: str) -> tuple[str, str]:
    """What cosim does with a shipped config: ``("preset", name)``, ``("quantized", "preset, dtype")``,
    ``("refused", reason)``; ``("unknown", family)`` for a config this catalog has not sorted."""
    from aiconfigurator_core.sdk.common import ARCHITECTURE_TO_MODEL_FAMILY

    presets = {lib: name for name, lib in LIBRARY_MODELS.items()}
    if library_id in presets:
        return "preset", presets[library_id]
    if library_id in QUANTIZED:
        preset, dtype = QUANTIZED[library_id]
        return ("quantized", f"{preset}, dtype {dtype}") if dtype else ("refused", f"{FOUR_BIT} (shape: {preset})")
    architecture = (library_config(library_id).get("architectures") or [""])[0]
    family = ARCHITECTURE_TO_MODEL_FAMILY.get(architecture, "")
    if family in FAMILY_REFUSALS:
        return "refused", f"{family}: {FAMILY_REFUSALS[family]}"
    return "unknown", family or architecture


def generated_entries() -> list[dict[str, Any]]:
    """The presets of :data:`GENERATED`, as models.yaml entries (needs the library)."""
    from cosim.hub.config.presets.hf import from_hf_config

    entries = []
    for library_id, gen in GENERATED.items():
        source = (f"{LIBRARY} model_configs/{library_id.replace('/', '--')}_config.json "
                  f"(huggingface.co/{library_id}/config.json)")
        preset = from_hf_config(library_config(library_id), name=gen.name, source=source)
        fields = preset.model_dump(exclude_defaults=True)
        fields["source"] = f"{preset.source}; {gen.note}"
        fields["num_params"] = gen.num_params or preset.param_count()
        if library_id != gen.name:
            fields["aliases"] = [library_id]
        order = ["name", "aliases", *(k for k in fields if k not in ("name", "aliases", "source")), "source"]
        entries.append({key: fields[key] for key in order if key in fields})
    return entries


def render() -> str:
    """The text of ``hub/config/presets/models_aiconfigurator.yaml``."""
    body = yaml.safe_dump({"models": generated_entries()}, sort_keys=False, width=120, allow_unicode=True)
    return HEADER + "\n" + body


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cosim.adapters.aiconfigurator.catalog",
                                     description="Write (or --check) hub/config/presets/models_aiconfigurator.yaml.")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is not current")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            sys.stderr.write(f"{args.output} is not current; rewrite it with python -m "
                             "cosim.adapters.aiconfigurator.catalog\n")
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    unsorted = [(i, c) for i in shipped_ids() if (c := classify(i))[0] == "unknown"]
    for library_id, (_, family) in unsorted:
        sys.stderr.write(f"not sorted: {library_id} (family {family}); add it to catalog.py\n")
    return 1 if unsorted else 0


if __name__ == "__main__":
    sys.exit(main())
