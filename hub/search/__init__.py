"""Deployment search: goodput by bisection (BestServe) and sweeps over deployments (MIST §V-A).

- :func:`goodput` (``cosim goodput``): the highest request rate at which a
  scenario's SLOs hold, with a confidence interval.
"""

from .goodput import GoodputResult, RatePoint, goodput
from .stats import Bound, Verdict

__all__ = ["Bound", "GoodputResult", "RatePoint", "Verdict", "goodput"]
