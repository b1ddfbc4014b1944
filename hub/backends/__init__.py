"""Backend proxies (gRPC clients with deadlines, retries and caching) and launchers."""

from .kinds import BUILTIN_BACKENDS, BUILTIN_KINDS
from .launchers import (
    LaunchedBackend,
    attach_address,
    free_port,
    launch_command,
    launch_image,
    launch_python,
    wait_healthy,
)
from .rpc import BackendClient, MemoryClient, NetworkClient, RuntimeClient

__all__ = [
    "BUILTIN_BACKENDS", "BUILTIN_KINDS", "BackendClient", "LaunchedBackend", "MemoryClient", "NetworkClient",
    "RuntimeClient",
    "attach_address", "free_port", "launch_command", "launch_image", "launch_python", "wait_healthy",
]
