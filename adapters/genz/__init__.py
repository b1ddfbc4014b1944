"""GenZ adapter: wraps PyPI ``genz-llm`` (GenZ, the LLM analytical model).

``GenzBackend`` maps a ``SessionSpec`` onto GenZ's ``ModelConfig`` and
``System`` (:mod:`.mapping`) and times every step, prefill, decode or mixed
/ chunked, as one GenZ chunked model (:mod:`.backend`), caching timings
per batch signature. ``docs/genz.md`` compares it with the roofline backend.

Session options (INVALID_ARGUMENT names ``spec.options.<key>``):
``compute_efficiency``, ``memory_efficiency``, ``comm_efficiency`` (GenZ's
efficiencies, default 1), ``bits`` (GenZ dtype; default from
``bytes_per_param``), ``link_latency_us`` (1.9) and ``bucket_tokens`` (round
contexts up before caching; 0 = exact).
"""

from .backend import GenzBackend, GenzState, genz_step_ms
from .mapping import GenzOptions, model_config, parse_options, system

__all__ = ["GenzBackend", "GenzOptions", "GenzState", "genz_step_ms", "model_config", "parse_options", "system"]
