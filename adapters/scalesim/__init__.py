"""SCALE-Sim adapter: cycle-level systolic-array step times (PyPI ``scalesim``).

``ScaleSimBackend`` maps each step's GEMMs (QKV, attention per prefill
sequence and head, O, MLP, LM head; :mod:`.workload`) onto SCALE-Sim runs
of one array (:mod:`.engine`, in-process, no files), converts cycles to
time at ``clock_ghz``, divides the work over tensor-parallel ranks and the
device's arrays, and adds memory-bound operators by bandwidth and TP
all-reduces by link bandwidth (:mod:`.backend`). GEMM results are reused
across layers and steps (LLMServingSim §III-E).

Session options (``SessionSpec.options``; defaults: a TPU-v4-like chip),
each checked with INVALID_ARGUMENT naming ``spec.options.<key>``:

========================  =======  ================================================
key                       default  meaning
========================  =======  ================================================
``rows``, ``cols``        128      array height, width (PEs)
``dataflow``              ws       ws, os or is
``num_arrays``            8        arrays per device (TPU v4: 2 cores x 4 MXUs)
``clock_ghz``             1.05     array clock
``ifmap_sram_kb``         4096     SCALE-Sim input SRAM
``filter_sram_kb``        4096     SCALE-Sim weight SRAM
``ofmap_sram_kb``         2048     SCALE-Sim output SRAM
``dram_words_per_cycle``  0        DRAM words/cycle per array; 0: from mem_bandwidth_gbps
``max_folds``             2        folds simulated per spatial dimension, then scaled (0: all)
``max_stream``            256      streaming length simulated, then extrapolated (0: all)
``reuse``                 true     reuse GEMM results per (M, N, K) across steps
``bucket_m``              false    interpolate M between powers of two (approximate)
``act_bytes``             2        bytes per activation element
========================  =======  ================================================
"""

from .backend import ScaleSimBackend, ScaleSimState
from .config import ArrayConfig, array_config
from .engine import GemmCycles, closed_form_cycles, simulate_gemm
from .workload import make_shape, step_work

__all__ = ["ArrayConfig", "GemmCycles", "ScaleSimBackend", "ScaleSimState", "array_config", "closed_form_cycles",
           "make_shape", "simulate_gemm", "step_work"]
