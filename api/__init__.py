"""cosim: a co-simulation hub for LLM inference serving.

The Python API mirrors the CLI; see ``cosim --help``.
"""

__version__ = "0.1.0"
