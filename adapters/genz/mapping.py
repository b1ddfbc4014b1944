"""The SessionSpec in GenZ's terms: a ``ModelConfig``, a ``System`` and parallelism.

GenZ reads memory sizes in binary MB and bandwidths in binary GB/s
(``Unit``: 2^20, 2^30), compute in decimal TFLOP/s and link latency in µs;
the contract speaks bytes, decimal GB/s and TFLOP/s, converted here. GenZ
scales compute time by its ``compute_multiplier[bits]`` (fp8 runs at 2x the
bf16 rate); ``HardwareSpec.peak_tflops`` is already the peak for the model's
dtype, so the System is given ``peak_tflops x multiplier``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cosim.adapters.sdk import InvalidArgument
from cosim.v1 import types_pb2 as pb

MIB, GIB = float(1 << 20), float(1 << 30)
_BITS_BY_BYTES = {0.5: "int4", 1.0: "fp8", 2.0: "bf16", 4.0: "f32"}
_MULTIPLIERS = {"int8": 0.5, "bf16": 1, "f32": 2, "int4": 0.25, "fp8": 0.5, "fp6": 0.5, "fp4": 0.25}


@dataclass(frozen=True)
class GenzOptions:
    """Session options (``SessionSpec.options``) the genz backend reads.

    Attributes:
        compute_efficiency: GenZ's compute efficiency (share of peak reached).
        memory_efficiency: GenZ's memory-bandwidth efficiency.
        comm_efficiency: GenZ's interconnect efficiency.
        bits: GenZ dtype name; default from ``model.bytes_per_param``.
        link_latency_us: interconnect latency per hop, µs (GenZ's default 1.9).
        bucket_tokens: round contexts up to a multiple of this before caching (0: exact).
    """

    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    comm_efficiency: float = 1.0
    bits: str = ""
    link_latency_us: float = 1.9
    bucket_tokens: int = 0


def parse_options(options: dict[str, Any]) -> GenzOptions:
    """Checks options; errors name ``spec.options.<key>``."""
    defaults = GenzOptions()
    values: dict[str, Any] = {}
    for key, value in options.items():
        field = f"spec.options.{key}"
        if not hasattr(defaults, key):
            raise InvalidArgument(field, value, f"is not a genz option; known: {sorted(vars(defaults))}")
        if key == "bits":
            if value not in _MULTIPLIERS:
                raise InvalidArgument(field, value, f"must be one of {sorted(_MULTIPLIERS)}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArgument(field, value, "must be a number")
        elif key.endswith("efficiency") and not 0 < value <= 1:
            raise InvalidArgument(field, value, "must be in (0, 1]")
        elif key == "bucket_tokens" and (value < 0 or value != int(value)):
            raise InvalidArgument(field, value, "must be a whole number >= 0")
        elif value < 0:
            raise InvalidArgument(field, value, "must be >= 0")
        values[key] = int(value) if key == "bucket_tokens" else value
    return GenzOptions(**{**vars(defaults), **values})


def bits_of(spec: pb.SessionSpec, options: GenzOptions) -> str:
    """GenZ's dtype name for the model."""
    if options.bits:
        return options.bits
    size = spec.model.bytes_per_param or 2.0
    if size not in _BITS_BY_BYTES:
        raise InvalidArgument("spec.model.bytes_per_param", size,
                              f"has no GenZ dtype; use one of {sorted(_BITS_BY_BYTES)} or options.bits")
    return _BITS_BY_BYTES[size]


def model_config(model: pb.ModelSpec) -> Any:
    """A GenZ ``ModelConfig`` with the ModelSpec's shape (SwiGLU: ``num_ffi`` = 2)."""
    from GenZ import ModelConfig

    moe = model.num_experts > 1
    return ModelConfig(model=model.name or "cosim-model", vocab_size=model.vocab_size,
                       hidden_size=model.hidden_size, intermediate_size=model.intermediate_size,
                       num_ffi=2 if model.gated_mlp else 1, num_decoder_layers=model.num_layers,
                       num_attention_heads=model.num_attention_heads, num_key_value_heads=model.num_kv_heads,
                       head_dim=model.head_dim or None, num_experts=model.num_experts if moe else 1,
                       expert_top_k=model.experts_per_token if moe else 1,
                       moe_intermediate_size=model.intermediate_size if moe else None)


def system(spec: pb.SessionSpec, options: GenzOptions, bits: str) -> Any:
    """A GenZ ``System`` for one device of ``spec.hardware``.

    Raises:
        InvalidArgument: a zero peak or bandwidth (an unknown device).
    """
    from GenZ import System, Unit

    hw, par = spec.hardware, spec.parallelism
    for name in ("peak_tflops", "mem_bandwidth_gbps"):
        if getattr(hw, name) <= 0:
            raise InvalidArgument(f"spec.hardware.{name}", getattr(hw, name), f"must be > 0 for device {hw.device!r}")
    link = hw.intra_node_gbps or hw.inter_node_gbps
    tp, pp, ep = par.tensor or 1, par.pipeline or 1, par.expert or 1
    if tp * pp * ep > 1 and link <= 0:
        raise InvalidArgument("spec.hardware.intra_node_gbps", hw.intra_node_gbps,
                              f"must be > 0 when tensor={tp}, pipeline={pp}, expert={ep}")
    memory_mb = hw.mem_capacity_bytes / MIB if hw.mem_capacity_bytes else float("inf")
    return System(Unit(), frequency=1000, flops=hw.peak_tflops * _MULTIPLIERS[bits],
                  off_chip_mem_size=memory_mb, offchip_mem_bw=hw.mem_bandwidth_gbps * 1e9 / GIB,
                  interchip_link_bw=(link or 25.0) * 1e9 / GIB, interchip_link_latency=options.link_latency_us,
                  compute_efficiency=options.compute_efficiency, memory_efficiency=options.memory_efficiency,
                  comm_efficiency=options.comm_efficiency, bits=bits,
                  parallelism_heirarchy=f"TP{{{tp}}}_EP{{{ep}}}_PP{{{pp}}}")
