"""``python -m cosim.adapters.aiconfigurator [--port N] [--host H]``: serves the aiconfigurator backend."""

from cosim.adapters.sdk.server import main

main(backend="cosim.adapters.aiconfigurator:AiconfiguratorBackend")
