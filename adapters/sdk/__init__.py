"""The backend SDK: subclass one base class, implement one method, call serve().

    from cosim.adapters.sdk import RuntimeBackend, serve

    class MyBackend(RuntimeBackend):
        name = "mine"
        def predict(self, session, batch):
            return pb.StepTiming(duration_ns=...)

    serve(MyBackend(), port=50051)
"""

from .backend import Backend, MemoryBackend, NetworkBackend, PlainBatch, RuntimeBackend, Session
from .errors import BackendFault, FailedPrecondition, InvalidArgument, SessionNotFound, Unavailable
from .server import BackendServer, load_backend, serve, service_name

__all__ = [
    "Backend", "BackendFault", "BackendServer", "FailedPrecondition", "InvalidArgument", "MemoryBackend",
    "NetworkBackend", "PlainBatch", "RuntimeBackend", "Session", "SessionNotFound", "Unavailable", "load_backend",
    "serve", "service_name",
]
