"""The simulator's semantics: event kernel, coordinator, router, clients, schedulers, KV blocks, workload, records.

Nothing here exists for speed alone (that is :mod:`cosim.hub.timing`'s), and nothing here imports
the timing devices, the studies or the service: the direction is a test (tests/unit/test_layers.py).
"""
