"""A model preset from a Hugging Face ``config.json``: :func:`from_hf_config`.

Reads the keys the decoder layouts of Llama, Qwen2/3, Mistral, Mixtral,
Qwen3-MoE, DeepSeek-V3 and gpt-oss use (``num_hidden_layers``,
``num_key_value_heads``, ``moe_intermediate_size``, ``n_routed_experts`` or
``num_local_experts``, ...), including a multimodal model's ``text_config``, and
the defaults of the family's transformers config class where the file leaves a key
to them (Gemma 3's ``vocab_size``).
What :class:`~cosim.hub.config.presets.ModelPreset` cannot hold is mapped so that
the KV cache and the per-token compute stay right, and said in ``source``:

- multi-head latent attention (DeepSeek-V2/V3, ``kv_lora_rank``): vLLM caches
  one latent of ``kv_lora_rank + qk_rope_head_dim`` elements per token and
  layer, replicated on every TP rank; this is one KV head of half that size
  (K and V count twice), so ``num_kv_heads = 1`` and ``head_dim = (512 + 64) / 2``.
- shared experts (``n_shared_experts``) run for every token beside the routed
  ones, and are as large: they count in ``experts_per_token``. Llama 4's MoE layers
  each hold one shared expert that its config does not name (``Llama4TextMoe.shared_expert``
  in transformers, ``Llama4MoE.shared_expert`` in vLLM, of ``intermediate_size``): counted
  the same way.
- dense first layers (``first_k_dense_replace``), dense layers between MoE ones
  (``interleave_moe_layer_step``), sliding-window layers and attention sinks are not
  modelled (every layer is as the others).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from .models import ModelPreset

# HF key(s) -> ModelPreset field, first present wins.
_KEYS: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "vocab_size": ("vocab_size",),
}


# Families whose MoE layers run a shared expert their config.json has no key for.
_IMPLICIT_SHARED_EXPERTS = {"llama4": 1, "llama4_text": 1}

# Keys a family's config.json may leave out because its transformers config class defaults them
# (transformers' Gemma3TextConfig: the Gemma 3 releases' text_config names no vocab_size,
# max_position_embeddings or tie_word_embeddings).
_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "tie_word_embeddings": True},
}


def _whole(config: Mapping[str, Any], key: str) -> int | None:
    """``config[key]`` as an int (None when absent); a fraction (4.9 layers) or a non-number is an error,
    not truncated."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"config.json's {key} must be a whole number, got {value!r}")
    return value


def _first(config: Mapping[str, Any], keys: tuple[str, ...], field: str) -> int:
    for key in keys:
        value = _whole(config, key)
        if value is not None:
            return value
    raise ValueError(f"config.json has no {' or '.join(keys)} (needed for {field})")


def _any(config: Mapping[str, Any], *keys: str) -> int:
    """The first of ``keys`` present and not zero, else 0 (keys a model may leave out or null)."""
    return next((value for value in (_whole(config, key) for key in keys) if value), 0)


def _experts(config: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(routed experts, routed experts per token, shared experts, MLP size of one expert);
    (0, 0, 0, dense MLP) for dense."""
    routed = _any(config, "n_routed_experts", "num_local_experts", "num_experts")
    if routed <= 1:
        return 0, 0, 0, _first(config, ("intermediate_size", "n_inner", "ffn_dim"), "intermediate_size")
    top_k = _first(config, ("num_experts_per_tok", "num_experts_per_token", "moe_topk"), "experts_per_token")
    shared = _any(config, "n_shared_experts") or _IMPLICIT_SHARED_EXPERTS.get(str(config.get("model_type")), 0)
    size = _any(config, "moe_intermediate_size") or _first(config, ("intermediate_size",), "intermediate_size")
    return routed, top_k, shared, size


def from_hf_config(config: Mapping[str, Any], *, name: str = "", source: str = "config.json") -> ModelPreset:
    """The preset a Hugging Face ``config.json`` describes (see the module docstring).

    Args:
        config: the parsed config.json.
        name: the preset's name; default its ``_name_or_path``, else ``model_type``.
        source: where the config came from (a path), for the preset's ``source``.

    Raises:
        ValueError: a key the shape needs is missing, or the shape is impossible; the message names it.
    """
    if isinstance(config.get("text_config"), Mapping):  # multimodal: the language model's config
        config = {**config["text_config"], "_name_or_path": config.get("_name_or_path", "")}
    config = {**_CLASS_DEFAULTS.get(str(config.get("model_type")), {}), **config}
    fields: dict[str, Any] = {field: _first(config, keys, field) for field, keys in _KEYS.items()}
    heads = fields["num_attention_heads"]
    notes = []
    if _any(config, "kv_lora_rank"):
        latent = _any(config, "kv_lora_rank") + _any(config, "qk_rope_head_dim")
        fields.update(num_kv_heads=1, head_dim=-(-latent // 2))
        notes.append(f"MLA latent of {latent} elements as one KV head of {fields['head_dim']}")
    else:
        fields["num_kv_heads"] = _any(config, "num_key_value_heads", "n_head_kv") or heads
        fields["head_dim"] = _any(config, "head_dim")
    routed, top_k, shared, size = _experts(config)
    fields.update(num_experts=routed, experts_per_token=top_k + shared, shared_experts=shared, intermediate_size=size)
    if shared:
        notes.append(f"{shared} shared expert(s) counted in experts_per_token")
    if config.get("first_k_dense_replace"):
        notes.append(f"its {config['first_k_dense_replace']} dense first layers taken as MoE layers")
    if _any(config, "interleave_moe_layer_step") > 1:
        notes.append("its dense layers between MoE layers taken as MoE layers")
    if config.get("sliding_window") and config.get("layer_types"):
        notes.append("sliding-window layers taken as full attention")
    fields.update(
        name=name or str(config.get("_name_or_path") or config.get("model_type") or "hf-model"),
        family=str(config.get("model_type") or "unknown"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bool(config.get("attention_bias", False) or config.get("qkv_bias", False)),
        qk_norm=str(config.get("model_type", "")).startswith(("qwen3", "gemma3")),  # per-head q/k RMSNorm
        max_position_embeddings=_any(config, "max_position_embeddings"),
        source=source + (f" ({'; '.join(notes)})" if notes else ""),
    )
    try:
        return ModelPreset(**fields)
    except ValidationError as err:
        raise ValueError(f"config.json gives an impossible model: {_problems(err)}") from None


def _problems(err: ValidationError) -> str:
    """A pydantic error as one line: ``field: message, got value`` per problem, without pydantic's headline,
    error types and links (its text is a user's, not a traceback's)."""
    problems = []
    for item in err.errors():
        where = ".".join(map(str, item["loc"]))
        message = str(item["msg"]).removeprefix("Value error, ")
        message = message[:1].lower() + message[1:]
        got = "" if item["type"] == "missing" or isinstance(item.get("input"), dict) else f", got {item['input']!r}"
        problems.append(f"{where}: {message}{got}" if where else f"{message}{got}")
    return "; ".join(problems)
