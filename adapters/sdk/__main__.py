"""``python -m cosim.adapters.sdk module:Class --port N`` serves any backend class."""

from .server import main

main()
