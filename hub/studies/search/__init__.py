"""Deployment search: goodput by bisection (BestServe §3.5) and sweeps over deployments (MIST §V-A).

- :func:`goodput` (``cosim goodput``): the highest request rate at which a
  scenario's SLOs hold, with a confidence interval (:mod:`.stats` says how).
- :func:`search` (``cosim search``): every deployment of a space (SKU, TP/PP,
  xm vs ypzd, batching, chunk size, max_num_seqs) ranked by goodput,
  goodput or tokens per dollar, or tokens per joule; serial, on a process
  pool, or as Ray tasks; resumable.
"""

from .deployments import SearchResult, search
from .goodput import goodput
from .results import GoodputResult, RatePoint
from .space import Candidate, SearchSpace, enumerate_candidates, load_space
from .stats import Bound, Verdict

__all__ = ["Bound", "Candidate", "GoodputResult", "RatePoint", "SearchResult", "SearchSpace", "Verdict",
           "enumerate_candidates", "goodput", "load_space", "search"]
