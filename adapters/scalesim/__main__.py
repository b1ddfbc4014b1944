"""``python -m cosim.adapters.scalesim [--port N] [--host H]``: serves the scalesim backend."""

from cosim.adapters.sdk.server import main

main(backend="cosim.adapters.scalesim:ScaleSimBackend")
