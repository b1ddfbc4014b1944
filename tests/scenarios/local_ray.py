"""A Ray instance on this machine, for the tests of Ray tasks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

# Ray waits a fixed time for its GCS and raylet to start, which a busy 2-core machine can miss.
STARTUP_FAILURES = ("timed out during startup", "Failed to start GCS", "Timed out waiting for file")


@contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    """``ray.init`` here, tried up to three times where it failed to start in time; shut down at the end.

    Token authentication is off, as in the two-node cluster's fixture (test_search_ray_cluster.py): Ray
    reads the mode once per process, so a local start after the cluster's (or before it) must agree with
    it, or the driver and the new GCS disagree ("Authentication token is missing")."""
    import ray

    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        for attempt in range(3):
            try:
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
                break
            except Exception as err:  # Ray raises bare Exceptions and RuntimeErrors for these
                ray.shutdown()
                if not any(failure in str(err) for failure in STARTUP_FAILURES) or attempt == 2:
                    raise
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved
