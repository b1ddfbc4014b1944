"""The cosim hub: event kernel, coordinator, clients, schedulers, backend proxies, CLI."""

from .native import check_build

check_build()  # a native build compiled from older sources would run them silently (see .native)
