"""A Ray instance on this machine, for the tests of Ray tasks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

# Ray waits a fixed time for its GCS and raylet to start, which a busy 2-core machine can miss.
STARTUP_FAILURES = ("timed out during startup", "Failed to start GCS")


@contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    """``ray.init`` here, tried up to three times where it failed to start in time; shut down at the end."""
    import ray

    for attempt in range(3):
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
            break
        except Exception as err:  # Ray raises bare Exceptions and RuntimeErrors for these
            ray.shutdown()
            if not any(failure in str(err) for failure in STARTUP_FAILURES) or attempt == 2:
                raise
    try:
        yield
    finally:
        ray.shutdown()
