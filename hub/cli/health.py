"""``cosim health HOST:PORT``: the gRPC health check, for container health checks and scripts."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "health", help="check that a backend or hub answers SERVING",
        description="Ask grpc.health.v1.Health at HOST:PORT; exit 0 when it answers SERVING, 1 otherwise.")
    parser.add_argument("address", help="host:port")
    parser.add_argument("--service", default="", help="service name to check (default: the whole server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer")
    parser.add_argument("--tls-ca", metavar="FILE", help="connect over TLS (a hub started with --tls-cert), "
                                                         "trusting certificates this PEM CA signed")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from ..service.auth import hub_channel

    with hub_channel(args.address, tls_ca=args.tls_ca) as channel:  # health checks need no token
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
        except grpc.RpcError as err:
            print(f"{args.address}: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{args.address}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1
