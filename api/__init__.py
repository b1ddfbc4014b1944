"""cosim: a co-simulation hub for LLM inference serving.

The Python API mirrors the CLI::

    import cosim
    result = cosim.run("examples/quickstart.yaml", overrides=["seed=3"])
    result.summary["latency"]["ttft_s"]["p90"]
"""

from cosim.hub.errors import BackendError, CosimError, HubError, ScenarioError
from cosim.hub.runner import RunResult, run

__version__ = "0.1.0"

__all__ = ["BackendError", "CosimError", "HubError", "RunResult", "ScenarioError", "run"]
