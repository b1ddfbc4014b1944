"""Model presets: transformer shapes and the sizes derived from them.

:class:`ModelPreset` mirrors ``cosim.v1.ModelSpec`` plus provenance. Parameter
counts follow the Llama/Qwen/Mistral decoder layout: token embedding, per
layer q/k/v/o projections (with optional q/k/v bias and q/k RMSNorm), an MLP
that is gated (SwiGLU: gate, up, down) or plain (up, down), replicated per
expert with a router for MoE models, two RMSNorms per layer, a final norm and
an LM head unless tied to the embedding.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from cosim.hub.config.frozen import FrozenModel
from cosim.v1 import types_pb2 as pb


class ModelPreset(FrozenModel):
    """One model's architecture, as read from its Hugging Face config.json.

    Its numbers are finite, and never booleans: a scenario's presets file holds them too.
    """

    name: str = Field(description="Hugging Face repository id, e.g. 'meta-llama/Meta-Llama-3-8B'.")
    aliases: tuple[str, ...] = Field(default=(), description="Other names, matched case-insensitively.")
    family: str = Field(description="Architecture family, e.g. 'llama3', 'qwen3_moe'.")
    num_layers: int = Field(gt=0, description="Decoder layers.")
    hidden_size: int = Field(gt=0, description="Hidden (embedding) size.")
    num_attention_heads: int = Field(gt=0, description="Query heads.")
    num_kv_heads: int = Field(gt=0, description="Key/value heads (GQA); equal to num_attention_heads for MHA.")
    head_dim: int = Field(default=0, ge=0, description="Size of one head; 0 = hidden_size / num_attention_heads.")
    intermediate_size: int = Field(gt=0, description="MLP intermediate size (per expert for MoE models).")
    vocab_size: int = Field(gt=0, description="Vocabulary size.")
    num_experts: int = Field(default=0, ge=0, description="Routed experts per MoE layer; 0 = dense.")
    experts_per_token: int = Field(default=0, ge=0, description="Experts each token runs: its top-k routed "
                                   "ones plus shared_experts.")
    shared_experts: int = Field(default=0, ge=0, description="Of experts_per_token, the shared experts every "
                                "token runs unrouted (DeepSeek's n_shared_experts, Llama 4's shared expert).")
    bytes_per_param: float = Field(default=2.0, gt=0, description="Bytes per weight element (2 = bf16/fp16).")
    bytes_per_kv_element: float = Field(default=2.0, gt=0, description="Bytes per KV-cache element.")
    gated_mlp: bool = Field(default=True, description="SwiGLU MLP (gate, up and down projections).")
    tie_word_embeddings: bool = Field(default=False, description="LM head shares the embedding matrix.")
    qkv_bias: bool = Field(default=False, description="q/k/v projections have biases (Qwen2).")
    qk_norm: bool = Field(default=False, description="Per-head RMSNorm on queries and keys (Qwen3).")
    max_position_embeddings: int = Field(
        default=0, ge=0, description="Longest context the model supports; 0 = unknown.")
    num_params: int = Field(default=0, ge=0, description="Published total parameters; 0 = derive from the shape.")
    source: str = Field(description="Where the shape was taken from (the config.json).")

    @model_validator(mode="after")
    def _check_shape(self) -> ModelPreset:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads={self.num_kv_heads} must divide "
                             f"num_attention_heads={self.num_attention_heads}")
        if self.head_dim == 0 and self.hidden_size % self.num_attention_heads:
            raise ValueError("head_dim must be given when num_attention_heads does not divide hidden_size")
        if self.is_moe and not 0 < self.experts_per_token <= self.num_experts:
            raise ValueError(f"experts_per_token={self.experts_per_token} must be in 1..num_experts={self.num_experts}")
        if self.shared_experts and not self.shared_experts < self.experts_per_token:
            raise ValueError(f"shared_experts={self.shared_experts} must be below experts_per_token="
                             f"{self.experts_per_token} (which counts them beside at least one routed expert)")
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def effective_head_dim(self) -> int:
        """head_dim, or hidden_size / num_attention_heads when unset."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def _layer_params(self, experts: int) -> int:
        """Parameters of one decoder layer with ``experts`` MLP copies."""
        h, d = self.hidden_size, self.effective_head_dim
        q, kv = self.num_attention_heads * d, self.num_kv_heads * d
        attn = h * (q + 2 * kv) + q * h
        if self.qkv_bias:
            attn += q + 2 * kv
        if self.qk_norm:
            attn += 2 * d
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate_size * experts
        router = h * self.num_experts if self.is_moe else 0
        return attn + mlp + router + 2 * h  # + input and post-attention norms

    def _other_params(self) -> int:
        embed = self.vocab_size * self.hidden_size
        return embed * (1 if self.tie_word_embeddings else 2) + self.hidden_size  # + final norm

    def param_count(self) -> int:
        """Total parameters derived from the shape (all experts, routed and shared)."""
        experts = self.num_experts + self.shared_experts if self.is_moe else 1
        return self.num_layers * self._layer_params(experts) + self._other_params()

    def active_param_count(self) -> int:
        """Parameters one token touches: top-k experts instead of all (= total for dense)."""
        experts = self.experts_per_token if self.is_moe else 1
        return self.num_layers * self._layer_params(experts) + self._other_params()

    def total_params(self) -> int:
        """The published total when known, else :meth:`param_count`."""
        return self.num_params or self.param_count()

    def weight_bytes(self) -> int:
        """Bytes of all weights at ``bytes_per_param`` (unsharded)."""
        return int(self.total_params() * self.bytes_per_param)

    def expert_weight_bytes(self) -> int:
        """Bytes of the routed experts' MLPs over all layers (0 for dense), the part expert
        parallelism splits; the rest (attention, router, norms, embeddings) is
        ``weight_bytes() - expert_weight_bytes()``."""
        if not self.is_moe:
            return 0
        per_expert = (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size
        return int(self.num_layers * self.num_experts * per_expert * self.bytes_per_param)

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies in the full model (K and V, all layers)."""
        per_layer = 2 * self.num_kv_heads * self.effective_head_dim
        return int(self.num_layers * per_layer * self.bytes_per_kv_element)

    def to_model_spec(self) -> pb.ModelSpec:
        """The wire form sent to backends in ``SessionSpec.model``."""
        return pb.ModelSpec(
            name=self.name, num_layers=self.num_layers, hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads, num_kv_heads=self.num_kv_heads,
            head_dim=self.effective_head_dim, intermediate_size=self.intermediate_size,
            vocab_size=self.vocab_size, num_experts=self.num_experts,
            experts_per_token=self.experts_per_token, shared_experts=self.shared_experts,
            bytes_per_param=self.bytes_per_param,
            bytes_per_kv_element=self.bytes_per_kv_element, gated_mlp=self.gated_mlp,
            tie_word_embeddings=self.tie_word_embeddings, num_params=self.total_params(),
        )
