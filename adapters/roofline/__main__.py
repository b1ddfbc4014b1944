"""``python -m cosim.adapters.roofline [--port N] [--host H]``: serves the roofline backend."""

from cosim.adapters.sdk.server import main

main(backend="cosim.adapters.roofline:RooflineBackend")
