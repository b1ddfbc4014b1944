"""The cosim hub: event kernel, coordinator, clients, schedulers, backend proxies, CLI."""
