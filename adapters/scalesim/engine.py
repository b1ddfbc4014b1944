"""SCALE-Sim in-process: cycles of one GEMM on one systolic array.

:func:`simulate_gemm` builds SCALE-Sim's config and topology objects in
memory and runs its ``single_layer_sim`` (compute and double-buffered SRAM
/ DRAM model) for one GEMM, writing no files and printing nothing.

Big GEMMs are reduced before simulation (``max_folds``, ``max_stream``):
SCALE-Sim walks every cycle in Python (~0.1 ms a cycle), so one Llama-size
GEMM on a 128x128 array would take minutes. The array is mapped fold by
fold, and all full folds of a GEMM are alike, so cosim simulates at most
``max_folds`` folds per spatial dimension and scales the compute-and-stall
cycles by the fold ratio; a streaming dimension longer than ``max_stream``
is simulated at ``max_stream`` and ``max_stream / 2`` and extrapolated
along the line through the two (per-fold cycles are affine in it). Both
are exact for compute cycles of full folds and assume steady-state stalls;
``max_folds = 0`` and ``max_stream = 0`` simulate the whole GEMM.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from cosim.adapters.sdk.extras import require_extra

from .config import ArrayConfig

# Without SCALE-Sim, loading this backend answers with the pip command that installs it.
require_extra("scalesim")


def _install_numpy_compat() -> None:
    """Lets scalesim 3.0.0 run on NumPy >= 2.4.

    scalesim calls ``int(max(x))`` where ``max`` returns a one-element array;
    NumPy 2.4 made converting such arrays to ``int`` an error. Shadowing
    ``max`` in the two affected modules with a version returning a 0-d
    array keeps scalesim's arithmetic unchanged.
    """
    from scalesim.memory import double_buffered_scratchpad_mem, read_buffer

    def scalar_max(*args: Any, **kwargs: Any) -> Any:
        result = builtins.max(*args, **kwargs)
        if isinstance(result, np.ndarray) and result.ndim and result.size == 1:
            return result.reshape(())
        return result

    for module in (read_buffer, double_buffered_scratchpad_mem):
        module.max = scalar_max  # type: ignore[attr-defined]


_install_numpy_compat()


@dataclass(frozen=True)
class GemmCycles:
    """Cycles of one GEMM on one array.

    Attributes:
        compute: cycles with the array busy or stalled on memory (SCALE-Sim's "Total Cycles").
        stall: of which stalls waiting for DRAM.
        prefetch: cycles loading the first operands before compute starts.
        num_simulated: SCALE-Sim runs this answer took (0 when served from a cache).
    """

    compute: float
    stall: float
    prefetch: float
    num_simulated: int = 1

    @property
    def total(self) -> float:
        """All cycles of the GEMM, prefetch included."""
        return self.compute + self.prefetch


def spatial_dims(dataflow: str, m: int, n: int, k: int) -> tuple[int, int, int]:
    """(S_R, S_C, T) of a GEMM (M x K) . (K x N) under a dataflow (SCALE-Sim paper, Table II)."""
    if dataflow == "ws":
        return k, n, m
    if dataflow == "os":
        return m, n, k
    return k, m, n  # "is"


def gemm_dims(dataflow: str, s_r: int, s_c: int, t: int) -> tuple[int, int, int]:
    """The inverse of :func:`spatial_dims`: (M, N, K)."""
    if dataflow == "ws":
        return t, s_c, s_r
    if dataflow == "os":
        return s_r, s_c, t
    return s_c, t, s_r


def closed_form_cycles(config: ArrayConfig, m: int, n: int, k: int) -> int:
    """Compute cycles SCALE-Sim v2/v3 counts for a stall-free GEMM.

    Per fold the array streams T operands and fills and drains:
    ``2R + C + T - 2`` for ws and is, ``R + C + T - 2`` for os (outputs
    stay in place), times ``ceil(S_R/R) x ceil(S_C/C)`` folds; SCALE-Sim
    counts from cycle 0, so the total is one less.
    """
    s_r, s_c, t = spatial_dims(config.dataflow, m, n, k)
    rows, cols = config.rows, config.cols
    per_fold = (rows if config.dataflow == "os" else 2 * rows) + cols + t - 2
    return math.ceil(s_r / rows) * math.ceil(s_c / cols) * per_fold - 1


def _run(config: ArrayConfig, m: int, n: int, k: int) -> tuple[float, float, float]:
    """One SCALE-Sim run: (compute incl. stalls, stalls, prefetch) cycles."""
    from scalesim.layout_utils import layouts
    from scalesim.scale_config import scale_config
    from scalesim.single_layer_sim import single_layer_sim
    from scalesim.topology_utils import topologies

    conf = scale_config()
    conf.array_rows, conf.array_cols, conf.df = config.rows, config.cols, config.dataflow
    conf.ifmap_sz_kb, conf.filter_sz_kb, conf.ofmap_sz_kb = (config.ifmap_sram_kb, config.filter_sram_kb,
                                                             config.ofmap_sram_kb)
    # USER bandwidth mode: SCALE-Sim reads ifmap/filter DRAM bandwidth from the bank
    # settings and ofmap bandwidth from `bandwidths`; one bank keeps them equal.
    conf.use_user_bandwidth, conf.bandwidths = True, [config.dram_words_per_cycle]
    conf.ifmap_sram_bank_bandwidth = conf.filter_sram_bank_bandwidth = config.dram_words_per_cycle
    conf.ifmap_sram_bank_num = conf.filter_sram_bank_num = 1
    conf.valid_conf_flag = True
    topo = topologies()
    # SCALE-Sim's GEMM row: ifmap M x K, filter 1 x K, 1 channel, N filters, stride 1.
    topo.append_topo_arrays("gemm", ["gemm", m, k, 1, k, 1, n, 1, 1, 1, 1])
    topo.num_layers, topo.topo_load_flag = 1, True
    topo.topo_calc_hyperparams()
    layer = single_layer_sim()
    with contextlib.redirect_stdout(io.StringIO()):  # scalesim prints progress unconditionally in places
        layer.set_params(layer_id=0, config_obj=conf, topology_obj=topo, layout_obj=layouts(), verbose=False)
        layer.run()
        overall, compute, stall = layer.get_compute_report_items()[:3]
    return float(compute), float(stall), float(overall - compute)


RunMemo = dict[tuple[int, int, int], tuple[float, float, float]]


def _memo_run(config: ArrayConfig, memo: RunMemo | None,
              dims: tuple[int, int, int]) -> tuple[tuple[float, float, float], int]:
    """A SCALE-Sim run from ``memo`` when there (0 new runs), else a fresh one (1)."""
    if memo is not None and dims in memo:
        return memo[dims], 0
    result = _run(config, *dims)
    if memo is not None:
        memo[dims] = result
    return result, 1


def simulate_gemm(config: ArrayConfig, m: int, n: int, k: int, memo: RunMemo | None = None) -> GemmCycles:
    """Cycles of (M x K) . (K x N) on one array, reduced per the module docstring.

    ``memo`` keeps SCALE-Sim runs by their (reduced) dimensions, so GEMMs
    that reduce to the same runs (e.g. every M beyond ``max_stream``) share them.
    """
    s_r, s_c, t = spatial_dims(config.dataflow, m, n, k)
    folds_r, folds_c = math.ceil(s_r / config.rows), math.ceil(s_c / config.cols)
    if config.max_folds:
        s_r = min(s_r, config.rows * config.max_folds)
        s_c = min(s_c, config.cols * config.max_folds)
    scale = folds_r * folds_c / (math.ceil(s_r / config.rows) * math.ceil(s_c / config.cols))
    if not config.max_stream or t <= config.max_stream:
        (compute, stall, prefetch), runs = _memo_run(config, memo, gemm_dims(config.dataflow, s_r, s_c, t))
        if scale == 1:
            return GemmCycles(compute, stall, prefetch, num_simulated=runs)
        return _with_floor(config, (m, n, k), GemmCycles(compute * scale, stall * scale, prefetch, runs))
    long_t, short_t = config.max_stream, config.max_stream // 2
    (c1, s1, prefetch), runs1 = _memo_run(config, memo, gemm_dims(config.dataflow, s_r, s_c, long_t))
    (c2, s2, _), runs2 = _memo_run(config, memo, gemm_dims(config.dataflow, s_r, s_c, short_t))
    reach = (t - long_t) / (long_t - short_t)
    compute, stall = c1 + (c1 - c2) * reach, max(0.0, s1 + (s1 - s2) * reach)
    return _with_floor(config, (m, n, k), GemmCycles(compute * scale, stall * scale, prefetch, runs1 + runs2))


def _with_floor(config: ArrayConfig, gemm: tuple[int, int, int], cycles: GemmCycles) -> GemmCycles:
    """A reduced answer raised to the time DRAM needs to move each operand once.

    Reduction keeps compute exact but misses stalls that grow with the whole
    operands when DRAM is the bottleneck; this floor bounds that error.
    """
    m, n, k = gemm
    floor = (m * k + k * n + m * n) / config.dram_words_per_cycle
    if cycles.total >= floor:
        return cycles
    extra = floor - cycles.total
    return GemmCycles(cycles.compute + extra, cycles.stall + extra, cycles.prefetch, cycles.num_simulated)
