"""A bearer token and TLS for a hub reachable beyond loopback.

Server side (``cosim hub --token-file F --tls-cert F --tls-key F``):
:class:`TokenInterceptor` refuses every call without the metadata
``authorization: Bearer <token>`` with ``UNAUTHENTICATED``; the gRPC health
service stays open, so health checks and load balancers need no token.
:func:`server_credentials` loads a certificate and key for TLS.

Client side (``cosim submit --tls-ca F --token-file F``): :func:`hub_channel`
opens a channel to a hub, over TLS when given a CA certificate, adding the
token (when there is one) to every call. Both sides read the token with
:func:`read_token`: a file's first line, else ``$COSIM_HUB_TOKEN``.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

from ..errors import ScenarioError

TOKEN_ENV = "COSIM_HUB_TOKEN"
OPEN_PREFIXES = ("/grpc.health.v1.Health/",)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
_Handler = grpc.RpcMethodHandler


def read_token(path: str | Path | None, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The token in ``path`` (its first line, stripped), else ``$COSIM_HUB_TOKEN``, else None.

    Raises:
        ScenarioError: the file cannot be read or holds no token.
    """
    if path is None:
        token = (os.environ if environ is None else environ).get(TOKEN_ENV, "").strip()
        return token or None
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(str(path), f"cannot read the token file: {getattr(err, 'strerror', None) or err}") \
            from None
    token = lines[0].strip() if lines else ""
    if not token:
        raise ScenarioError(str(path), "the token file is empty; its first line is the token")
    return token


def _denied(handler: grpc.RpcMethodHandler[Any, Any], message: str) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of ``handler``'s shape that ends the call with UNAUTHENTICATED."""

    def unary(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    def streaming(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - a generator, as streaming handlers are

    make: Callable[..., grpc.RpcMethodHandler[Any, Any]] = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return make(streaming if handler.response_streaming else unary,
                request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)


class TokenInterceptor(grpc.ServerInterceptor):
    """Lets through calls carrying ``authorization: Bearer <token>`` (and health checks); refuses the rest."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], _Handler[Any, Any] | None],
                          details: grpc.HandlerCallDetails) -> _Handler[Any, Any] | None:
        handler = continuation(details)
        if handler is None or details.method.startswith(OPEN_PREFIXES):
            return handler
        given = next((str(value) for key, value in details.invocation_metadata or () if key == "authorization"), "")
        if hmac.compare_digest(given.encode(), self._expected):  # constant time: no guessing by timing
            return handler
        reason = "wrong token" if given else "no token"
        return _denied(handler, f"this hub needs a token ({reason}): cosim submit --token-file FILE, "
                                f"or ${TOKEN_ENV}")


def server_credentials(cert: str | Path, key: str | Path) -> grpc.ServerCredentials:
    """TLS credentials from a PEM certificate (chain) and its private key.

    Raises:
        ScenarioError: a file cannot be read.
    """
    return grpc.ssl_server_credentials([(_read_pem(key, "--tls-key"), _read_pem(cert, "--tls-cert"))])


def _read_pem(path: str | Path, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ScenarioError(f"{flag} {path}", f"cannot read: {err.strerror}") from None


class _TokenMetadata(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every call of a channel."""

    def __init__(self, token: str) -> None:
        self._entry = ("authorization", f"Bearer {token}")

    def _with_token(self, details: Any) -> Any:
        metadata = (*(details.metadata or ()), self._entry)
        return details._replace(metadata=metadata) if hasattr(details, "_replace") else \
            _Details(details.method, details.timeout, metadata, details.credentials, details.wait_for_ready,
                     details.compression)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, method: str, timeout: float | None, metadata: tuple[tuple[str, str | bytes], ...],
                 credentials: Any, wait_for_ready: bool | None, compression: Any) -> None:
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = credentials, wait_for_ready, compression


def hub_channel(address: str, *, tls_ca: str | Path | None = None, token: str | None = None,
                options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    """A channel to the hub at ``address``: TLS verified against ``tls_ca`` when given, and ``token``
    sent with every call when given.

    Raises:
        ScenarioError: the CA file cannot be read.
    """
    if tls_ca is not None:
        credentials = grpc.ssl_channel_credentials(root_certificates=_read_pem(tls_ca, "--tls-ca"))
        channel = grpc.secure_channel(address, credentials, options=list(options))
    else:
        channel = grpc.insecure_channel(address, options=list(options))
    return grpc.intercept_channel(channel, _TokenMetadata(token)) if token else channel


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server reachable from this machine only."""
    return host in LOOPBACK_HOSTS or host.startswith("127.")
