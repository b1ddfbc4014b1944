"""``ScaleSimBackend``: step times from SCALE-Sim cycles plus memory-bound operators.

A step's duration is ``compute + memory + communication``, not overlapped:

- compute: the sum over the step's GEMMs (:mod:`.workload`) of SCALE-Sim
  cycles (:mod:`.engine`, prefetch and stalls included) / ``clock_ghz``;
- memory: the memory-bound operators' bytes / ``hardware.mem_bandwidth_gbps``;
- communication: two ring all-reduces per layer under tensor parallelism,
  ``2 (tp-1)/tp x bytes / hardware.intra_node_gbps``.

Computation reuse (LLMServingSim §III-E): one decoder layer is simulated
and its time multiplied by the number of layers, and each GEMM shape, and each
SCALE-Sim run behind it, is simulated once per session (``reuse``), with M
optionally bucketed (``bucket_m``). Without reuse, shapes repeated within
a step are still simulated once, but nothing is kept between steps.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.json_format import MessageToDict

from cosim.adapters.sdk import InvalidArgument, RuntimeBackend, Session
from cosim.adapters.sdk.cache import LRUCache
from cosim.v1 import types_pb2 as pb

from .config import ArrayConfig, array_config
from .engine import GemmCycles, RunMemo, simulate_gemm
from .workload import Gemm, Shape, make_shape, step_work

log = logging.getLogger(__name__)

STEP_CACHE_SIZE = 4096


@dataclass
class ScaleSimState:
    """A session's array, model shape, GEMM results and step cache."""

    config: ArrayConfig
    shape: Shape
    mem_bandwidth: float  # bytes/s
    link_bandwidth: float  # bytes/s
    gemms: dict[Gemm, GemmCycles] = field(default_factory=dict)
    runs: RunMemo = field(default_factory=dict)
    steps: LRUCache[tuple[tuple[int, ...], tuple[int, ...]], pb.StepTiming] = field(
        default_factory=lambda: LRUCache(STEP_CACHE_SIZE))
    num_simulations: int = 0


class ScaleSimBackend(RuntimeBackend):
    """Cycle-level systolic-array timing via SCALE-Sim (PyPI ``scalesim``)."""

    name = "scalesim"
    version = "0.1.0"
    fidelity = pb.FIDELITY_CYCLE_LEVEL
    description = "SCALE-Sim systolic arrays (cycle-level GEMMs) + memory-bound operators by bandwidth"
    capabilities = ("mixed_batches", "tensor_parallel", "computation_reuse")

    def open_session(self, spec: pb.SessionSpec) -> ScaleSimState:
        options: dict[str, Any] = MessageToDict(spec.options) if spec.HasField("options") else {}
        config = array_config(spec, options)
        hw, tp = spec.hardware, spec.parallelism.tensor or 1
        if hw.mem_bandwidth_gbps <= 0:
            raise InvalidArgument("spec.hardware.mem_bandwidth_gbps", hw.mem_bandwidth_gbps,
                                  "must be > 0 to time the memory-bound operators")
        if tp > 1 and hw.intra_node_gbps <= 0:
            raise InvalidArgument("spec.hardware.intra_node_gbps", hw.intra_node_gbps,
                                  f"must be > 0 when tensor={tp}")
        log.info("scalesim session for %s: %s", spec.client or "-", config)
        return ScaleSimState(config=config, shape=make_shape(spec), mem_bandwidth=hw.mem_bandwidth_gbps * 1e9,
                             link_bandwidth=hw.intra_node_gbps * 1e9)

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        state: ScaleSimState = session.state
        key = (tuple(batch.new_tokens), tuple(batch.context_tokens))
        cached = state.steps.lookup(key) if state.config.reuse else None
        if cached is not None:
            return cached
        if not state.config.reuse:
            state.gemms.clear()  # without reuse every step simulates its shapes afresh
            state.runs.clear()
        timing = self._time(state, list(key[0]), list(key[1]))
        state.steps.store(key, timing)
        return timing

    def _time(self, state: ScaleSimState, new_tokens: list[int], context_tokens: list[int]) -> pb.StepTiming:
        config = state.config
        work = step_work(state.shape, config, new_tokens, context_tokens)
        cycles = stalls = 0.0
        for gemm, count in work.gemms.items():
            result = self._gemm(state, gemm)
            cycles += count * result.total
            stalls += count * result.stall
        compute_ns = cycles / config.clock_ghz
        memory_ns = work.memory_bytes / state.mem_bandwidth * 1e9
        tp = state.shape.tp
        comm_ns = (2 * (tp - 1) / tp * work.allreduce_bytes / state.link_bandwidth * 1e9) if tp > 1 else 0.0
        duration = compute_ns + memory_ns + comm_ns
        return pb.StepTiming(duration_ns=math.ceil(duration), compute_ns=round(compute_ns),
                             memory_ns=round(memory_ns), communication_ns=round(comm_ns),
                             breakdown={"gemm_cycles": cycles, "stall_cycles": stalls,
                                        "num_gemm_shapes": float(len(work.gemms))})

    def _gemm(self, state: ScaleSimState, gemm: Gemm) -> GemmCycles:
        """Cycles of one GEMM shape, from the session's results when there."""
        m, n, k = gemm
        if state.config.bucket_m and m & (m - 1):
            low = 1 << (m.bit_length() - 1)
            a, b = self._gemm(state, (low, n, k)), self._gemm(state, (2 * low, n, k))
            w = (m - low) / low
            return GemmCycles(a.compute + w * (b.compute - a.compute), a.stall + w * (b.stall - a.stall),
                              a.prefetch + w * (b.prefetch - a.prefetch), 0)
        if gemm not in state.gemms:
            result = simulate_gemm(state.config, m, n, k, state.runs)
            state.num_simulations += result.num_simulated
            state.gemms[gemm] = result
        return state.gemms[gemm]
