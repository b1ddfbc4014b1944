#!/usr/bin/env python3
"""Container health check: exit 0 when the gRPC server at HOST:PORT answers SERVING.

`cosim health HOST:PORT` does the same, but importing the whole cosim package costs
seconds of CPU on every check; this imports grpc alone.
"""
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"
try:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
except grpc.RpcError as err:
    sys.exit(f"{address}: {err.code().name}")
sys.exit(0 if reply.status == health_pb2.HealthCheckResponse.SERVING else f"{address}: not serving")
