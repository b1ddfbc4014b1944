"""The decodes of a mixed step on GPUs that run FlashAttention-2's varlen kernel.

aiconfigurator-core times a mixed step's attention as two measured kernels: context attention of
each chunk and generation attention of the decodes. vLLM V1 runs them as one varlen call, and on
FlashAttention-2 GPUs (A100, Ada, Blackwell RTX) that call gives each decode one CTA per query head
that scans its KV alone, with neither the GQA packing nor the KV split a decode-only call gets
(:mod:`cosim.adapters.roofline.varlen`). LLMServingSim's vLLM 0.19 shots measure it: on an RTX PRO
6000, Llama-3.1-8B's 512-token chunk beside 64 decodes at 512 keys takes 221 us a layer, against
25 us for the chunk alone and 127 us for the decodes alone.

The library's measured kernels stay the base; the decodes' generation attention is scaled by::

    alpha = (varlen(chunks + decodes) - varlen(chunks)) / decode_only(decodes)

at the step's own shapes, all three calls from the varlen model of the device's family
(``profiles/varlen.yaml``: fitted on the same bundles' mixed, chunk-alone and decode-only shots, so
its biases cancel in the ratio): the model supplies only what the tables lack, as :mod:`.untabled`
does for RoPE and the KV write. On the bundles' mixed shots, the chunk alone plus alpha x the decodes
alone (both measured) is within 10-13% (median, leaving the model out) where their plain sum is off by
25-42%, short on average. Families that run another kernel (Hopper's FlashAttention-3, which splits varlen
KV and packs GQA too; Blackwell data-centre GPUs) get no scaling: ``MixedAttention.of`` is None.

Main names: :class:`MixedAttention`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cosim.adapters.roofline import fitted, varlen
from cosim.adapters.roofline.presets import device_presets
from cosim.v1 import types_pb2 as pb


@functools.cache
def _preset(device: str) -> dict[str, Any] | None:
    """The device preset named ``device`` (or one of its aliases), if any."""
    name = device.lower()
    for entry in device_presets().values():
        if name == str(entry["name"]).lower() or name in (str(a).lower() for a in entry.get("aliases", [])):
            return entry
    return None


def _bf16_peak_tflops(preset: dict[str, Any] | None, spec: pb.SessionSpec) -> float:
    """The dense bf16 peak the attention runs at (an FP8 model's KV and attention stay bf16), as the
    model was fitted; the spec's own peak where the preset lists none."""
    peaks = (preset or {}).get("peak_tflops") or {}
    return float(peaks.get("bf16") or spec.hardware.peak_tflops)


@dataclass(frozen=True)
class MixedAttention:
    """The varlen model of one rank's attention shape on one device.

    Attributes:
        heads, kv_heads, head_dim: the rank's attention shape (a rank holds one KV head at least).
        kv_bytes: bytes per cached K or V element.
        params: the family's varlen parameters.
        device: the GPU's SMs, dense bf16 peak and bandwidth.
    """

    heads: int
    kv_heads: int
    head_dim: int
    kv_bytes: float
    params: varlen.VarlenParams
    device: varlen.Device

    @classmethod
    def of(cls, spec: pb.SessionSpec) -> MixedAttention | None:
        """The models of ``spec``'s rank, or None where its device's family runs no FA2 varlen
        kernel or the device has no preset with an SM count."""
        family, _basis = fitted.family_of(spec.hardware.device)
        params = varlen.load_family(family)
        if params is None:
            return None  # before the presets are read: most sessions (Hopper, Blackwell) end here
        preset = _preset(spec.hardware.device)
        sms = spec.hardware.extra.get("num_sms") or (preset or {}).get("num_sms")
        if not sms:
            return None
        model = spec.model
        tp = spec.parallelism.tensor or 1
        head_dim = model.head_dim or model.hidden_size // max(model.num_attention_heads, 1)
        return cls(heads=max(model.num_attention_heads // tp, 1),
                   kv_heads=max((model.num_kv_heads or model.num_attention_heads) // tp, 1),
                   head_dim=head_dim, kv_bytes=model.bytes_per_kv_element or 2.0, params=params,
                   device=varlen.Device(int(sms), _bf16_peak_tflops(preset, spec) * 1e12,
                                        spec.hardware.mem_bandwidth_gbps * 1e9))

    def decode_scale(self, chunks: Sequence[tuple[int, int]], decodes: Sequence[int]) -> float:
        """alpha of the module docstring: what the decodes cost inside the chunks' varlen call, per
        unit of their decode-only call."""
        shape = {"heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                 "p": self.params, "device": self.device, "kv_bytes": self.kv_bytes}
        added = varlen.call_us(chunks, decodes, **shape) - varlen.call_us(chunks, (), **shape)
        return added / varlen.decode_only_us(decodes, kv_heads=self.kv_heads, head_dim=self.head_dim, p=self.params,
                                             device=self.device, kv_bytes=self.kv_bytes)
