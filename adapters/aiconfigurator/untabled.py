"""The kernels vLLM runs in every layer that aiconfigurator-core's composition has no operator for.

The library composes a vLLM step from its measured tables: GEMMs, attention, norms, activation,
collectives. Two kernels of every decoder layer are in none of them:

* **RoPE** (vLLM's ``RotaryEmbedding`` on the query and key, a kernel of its own: LLMServingSim's
  vLLM 0.19 profiles time ``rotary_emb`` apart, 2.7-2.9 us a layer at 1-64 tokens on an RTX PRO 6000);
* **the KV-cache write** (``reshape_and_cache_flash``): since vLLM 0.16 FlashAttention's ``forward``
  no longer writes the cache (``forward_includes_kv_cache_update = False``; the model runs
  ``unified_kv_cache_update`` before it), and the library's collector times ``forward`` alone
  (``collector/vllm/collect_attn.py``), so its attention tables hold no cache write.

Both are small element-wise kernels whose time is mostly their floor: on a 32-layer decode about
0.2 ms, on Llama-3.1-70B over TP4 about 0.5 ms a step (3%). They are timed as cosim's fitted roofline
times an element-wise kernel on the device's family (``elem_floor_us`` plus the bytes at
``elem_mem_eff`` of the datasheet bandwidth; fitted on Vidur's and LLMServingSim's measured kernels,
docs/roofline.md), the bytes as the roofline counts them (``adapters/roofline/operators.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cosim.adapters.roofline import fitted
from cosim.v1 import types_pb2 as pb

ACTIVATION_BYTES = 2  # the query and key RoPE rotates, in bf16


@dataclass(frozen=True)
class UntabledKernels:
    """RoPE and the KV-cache write of one pipeline stage's layers, per token of a step.

    Attributes:
        layers: decoder layers of the stage.
        rope_bytes: bytes RoPE reads and writes per token (the rank's query and key heads).
        kv_bytes: bytes the cache write stores per token (the rank's key and value heads).
        floor_ns: an element-wise kernel's floor on the device's family.
        ns_per_byte: its time per byte moved.
    """

    layers: int
    rope_bytes: float
    kv_bytes: float
    floor_ns: float
    ns_per_byte: float

    @classmethod
    def of(cls, spec: pb.SessionSpec) -> UntabledKernels:
        """The kernels of ``spec``'s model on its device, split over its tensor ranks (a rank holds
        at least one KV head: vLLM replicates them when TP exceeds their count). Every layer counts,
        pipeline stages included, as the library's own operators count them."""
        model = spec.model
        tp = spec.parallelism.tensor or 1
        head_dim = model.head_dim or model.hidden_size // max(model.num_attention_heads, 1)
        q = model.num_attention_heads * head_dim / tp
        kv = max((model.num_kv_heads or model.num_attention_heads) / tp, 1.0) * head_dim
        params = fitted.params_for(spec.hardware.device)
        return cls(layers=model.num_layers, rope_bytes=2 * ACTIVATION_BYTES * (q + kv),
                   kv_bytes=2 * (model.bytes_per_kv_element or 2.0) * kv,
                   floor_ns=float(params["elem_floor_us"]) * 1e3,
                   ns_per_byte=1e9 / (float(params["elem_mem_eff"]) * spec.hardware.mem_bandwidth_gbps * 1e9))

    def entries(self, tokens: int) -> list[tuple[str, float, float, str]]:
        """The two kernels over a step of ``tokens`` tokens, as the library's per-operator entries
        (name, latency ms, energy W*ms, source): every layer runs each once."""
        per_ms = self.layers / 1e6
        return [("rope", (self.floor_ns + tokens * self.rope_bytes * self.ns_per_byte) * per_ms, 0.0, "cosim"),
                ("kv_cache_write", (self.floor_ns + tokens * self.kv_bytes * self.ns_per_byte) * per_ms, 0.0, "cosim")]
