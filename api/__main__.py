"""``python -m cosim`` is the ``cosim`` command."""

from cosim.hub.cli import main

main()
