"""cosim: a co-simulation hub for LLM inference serving.

The Python API mirrors the CLI::

    import cosim
    result = cosim.run("examples/quickstart.yaml", overrides=["seed=3"])
    result.summary["latency"]["ttft_s"]["p90"]
    cosim.goodput("examples/quickstart.yaml").goodput_rps       # highest rate meeting the SLOs
    cosim.search("examples/search/math_reasoning.yaml").rows    # deployments ranked per dollar
    cosim.validate("examples/quickstart.yaml")                  # every problem, without running ([] = ok)
    cosim.sweep("examples/quickstart.yaml", ["workload.arrival.rate_per_s=1,2,4,8"]).df()  # sweep.csv (pandas)
    cosim.compare(["runs/a", "runs/b"], output_dir="runs/compare").table                  # metrics side by side
    result.requests_df(), result.summary_df()                   # pandas DataFrames (pip install 'cosim[pandas]')
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cosim.hub.errors import BackendError, CosimError, HubError, ScenarioError

if TYPE_CHECKING:
    from cosim.hub.studies.compare import Comparison, compare
    from cosim.hub.studies.runner import RunResult, run
    from cosim.hub.studies.search import GoodputResult, SearchResult, goodput, search
    from cosim.hub.studies.sweep import SweepResult, sweep
    from cosim.hub.studies.validation import validate

__version__ = "0.1.0"

__all__ = ["BackendError", "Comparison", "CosimError", "GoodputResult", "HubError", "RunResult", "ScenarioError",
           "SearchResult", "SweepResult", "compare", "goodput", "run", "search", "sweep", "validate"]

# The studies, imported at first use: ``import cosim.hub.X`` (every CLI command) runs this file, and a
# command needs one study at most (a run's CLI imports neither search nor sweep nor compare).
_STUDIES = {"Comparison": "compare", "compare": "compare", "RunResult": "runner", "run": "runner",
            "GoodputResult": "search", "SearchResult": "search", "goodput": "search", "search": "search",
            "SweepResult": "sweep", "sweep": "sweep", "validate": "validation"}


def __getattr__(name: str) -> Any:
    if name not in _STUDIES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"cosim.hub.studies.{_STUDIES[name]}"), name)
    globals()[name] = value
    return value
