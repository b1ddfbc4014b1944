"""``python -m cosim.adapters.genz [--port N] [--host H]``: serves the genz backend."""

from cosim.adapters.sdk.server import main

main(backend="cosim.adapters.genz:GenzBackend")
