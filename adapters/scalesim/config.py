"""Session options of the scalesim backend: the array and how hard to simulate it.

Defaults describe a TPU-v4-like chip: 8 weight-stationary 128x128 arrays
(2 TensorCores x 4 MXUs) at 1.05 GHz, i.e. 8 x 128 x 128 x 2 x 1.05e9 =
275 TFLOP/s, Google's published bf16 peak for TPU v4.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from cosim.adapters.sdk import InvalidArgument
from cosim.v1 import types_pb2 as pb

DATAFLOWS = ("ws", "os", "is")


@dataclass(frozen=True)
class ArrayConfig:
    """One device's systolic arrays and the simulation knobs (each a session option of the same name).

    Attributes:
        rows, cols: array height and width (processing elements), at most :data:`MAX_ARRAY_SIDE`.
        dataflow: ``ws`` (weight), ``os`` (output) or ``is`` (input) stationary.
        num_arrays: arrays per device; a GEMM's N (and attention heads) split evenly over them.
        clock_ghz: array clock; cycles / clock_ghz = ns.
        ifmap_sram_kb, filter_sram_kb, ofmap_sram_kb: SCALE-Sim SRAM sizes (kB of words).
        dram_words_per_cycle: DRAM words per cycle per array; 0 derives it from
            ``hardware.mem_bandwidth_gbps / (clock_ghz x bytes_per_param x num_arrays)``.
        max_folds: most folds simulated per spatial dimension (0: all); see :mod:`.engine`.
        max_stream: longest streaming dimension simulated (0: all); see :mod:`.engine`.
        reuse: keep GEMM results per (M, N, K) across steps (LLMServingSim §III-E).
        bucket_m: let reuse round M (tokens in the step) to powers of two and
            interpolate linearly between them (an approximation; off by default).
        act_bytes: bytes per activation element for the memory-bound operators.
    """

    rows: int = 128
    cols: int = 128
    dataflow: str = "ws"
    num_arrays: int = 8
    clock_ghz: float = 1.05
    ifmap_sram_kb: int = 4096
    filter_sram_kb: int = 4096
    ofmap_sram_kb: int = 2048
    dram_words_per_cycle: int = 0
    max_folds: int = 2
    max_stream: int = 256
    reuse: bool = True
    bucket_m: bool = False
    act_bytes: float = 2.0

    @property
    def peak_tflops(self) -> float:
        """Peak of all arrays of one device, TFLOP/s."""
        return 2 * self.rows * self.cols * self.num_arrays * self.clock_ghz / 1e3


# SCALE-Sim simulates every PE of a fold cycle by cycle: one mixed step of Llama-3.1-8B (a 512-token chunk
# and two decodes, reuse off) took 4 CPU s at 128 x 128 and 55 s at 512 x 512 here, and over two minutes
# at 2048 x 2048. The largest arrays built are 256 x 256 (TPU v6e's MXU); past this side a run stalls.
MAX_ARRAY_SIDE = 1024

_POSITIVE_INT = ("rows", "cols", "num_arrays", "ifmap_sram_kb", "filter_sram_kb", "ofmap_sram_kb")
_NON_NEGATIVE_INT = ("dram_words_per_cycle", "max_folds", "max_stream")


def _check(name: str, value: Any, default: Any) -> Any:
    field = f"spec.options.{name}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise InvalidArgument(field, value, "must be true or false")
        return value
    if isinstance(default, str):
        if value not in DATAFLOWS:
            raise InvalidArgument(field, value, f"must be one of {list(DATAFLOWS)}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(field, value, "must be a number")
    if name in _POSITIVE_INT + _NON_NEGATIVE_INT:
        if value != int(value):
            raise InvalidArgument(field, value, "must be a whole number")
        value = int(value)
    if name in _NON_NEGATIVE_INT:
        if value < 0:
            raise InvalidArgument(field, value, "must be >= 0")
    elif not value > 0:
        raise InvalidArgument(field, value, "must be > 0")
    if name in ("rows", "cols") and value > MAX_ARRAY_SIDE:
        raise InvalidArgument(field, value, f"must be <= {MAX_ARRAY_SIDE}: SCALE-Sim simulates every processing "
                              "element cycle by cycle, and a larger array takes minutes a step")
    if name == "max_stream" and value == 1:
        raise InvalidArgument(field, value, "must be 0 (no limit) or >= 2")
    return value


def array_config(spec: pb.SessionSpec, options: dict[str, Any]) -> ArrayConfig:
    """The session's array config from its options (unknown keys are rejected).

    Raises:
        InvalidArgument: naming ``spec.options.<key>``.
    """
    defaults = ArrayConfig()
    known = {f.name for f in dataclasses.fields(ArrayConfig)}
    values: dict[str, Any] = {}
    for name, value in options.items():
        if name not in known:
            raise InvalidArgument(f"spec.options.{name}", value, f"is not a scalesim option; known: {sorted(known)}")
        values[name] = _check(name, value, getattr(defaults, name))
    config = dataclasses.replace(defaults, **values)
    if config.dram_words_per_cycle == 0:
        bandwidth = spec.hardware.mem_bandwidth_gbps
        if bandwidth <= 0:
            raise InvalidArgument("spec.hardware.mem_bandwidth_gbps", bandwidth,
                                  "must be > 0, or give options.dram_words_per_cycle")
        words = bandwidth / (config.clock_ghz * (spec.model.bytes_per_param or 2) * config.num_arrays)
        config = dataclasses.replace(config, dram_words_per_cycle=max(1, int(words)))
    return config
