"""aiconfigurator adapter: step times from NVIDIA's silicon-measured operator tables (PyPI ``aiconfigurator-core``).

``AiconfiguratorBackend`` maps a ``SessionSpec`` onto the library's system,
engine version, model config and parallelism (:mod:`.mapping`), compiles the
library's engine (:mod:`.engine`) and times every step, prefill chunks with
their cached context, decodes, or both, from its per-operator tables
(:mod:`.step`). ``docs/aiconfigurator.md`` compares it with the regression
and roofline backends.

Session options (INVALID_ARGUMENT names ``spec.options.<key>``): ``engine``
(vllm, sglang or trtllm; default vllm), ``engine_version`` (a version the
system has data for, or current/previous/next; default current),
``database_mode`` (SILICON, HYBRID, EMPIRICAL or SOL; default SILICON),
``system`` (an aiconfigurator system, instead of the device mapping),
``model`` (a model id it ships a config for, instead of the model mapping) and
``moe_quant_mode`` (the library's quant mode for an MoE model's experts;
default: from the dtype, ``fp8_block`` before ``fp8`` for 1-byte experts).
"""

from .backend import AiconfiguratorBackend, AicState
from .mapping import LIBRARY_MODELS, SYSTEMS, AicOptions, parse_options
from .step import time_step

__all__ = ["LIBRARY_MODELS", "SYSTEMS", "AicOptions", "AicState", "AiconfiguratorBackend", "parse_options",
           "time_step"]
