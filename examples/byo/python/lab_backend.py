"""A lab's step-time model on the cosim SDK: an affine fit of its own measurements.

duration = base_us + us_per_token x new tokens + us_per_kv_token x context tokens,
divided over tensor-parallel devices; coefficients come from the session options.
"""
import argparse

from cosim.adapters.sdk import RuntimeBackend, serve
from cosim.v1 import types_pb2 as pb


class LabBackend(RuntimeBackend):
    name = "lab-affine"
    version = "0.1.0"
    fidelity = pb.FIDELITY_EMPIRICAL
    description = "a lab's affine step model (options base_us, us_per_token, us_per_kv_token)"

    def open_session(self, spec: pb.SessionSpec) -> tuple[float, float, float]:
        options, tp = dict(spec.options), max(1, spec.parallelism.tensor)
        return (options.get("base_us", 4000.0), options.get("us_per_token", 60.0) / tp,
                options.get("us_per_kv_token", 0.05) / tp)

    def predict(self, session, batch: pb.StepBatch) -> pb.StepTiming:
        base_us, per_token_us, per_kv_us = session.state
        us = base_us + per_token_us * sum(batch.new_tokens) + per_kv_us * sum(batch.context_tokens)
        return pb.StepTiming(duration_ns=round(us * 1e3), compute_ns=round(us * 1e3))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=50051)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    serve(LabBackend(), port=args.port, host=args.host)
