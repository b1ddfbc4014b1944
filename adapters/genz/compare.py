"""``python -m cosim.adapters.genz.compare``: GenZ vs the roofline backend on the same steps.

Prints the Markdown table kept in ``docs/genz.md``: Llama-3-8B on one
H100-SXM (and two with TP=2), both backends with their default parameters (the roofline's kernels
are ``fused``, as a vLLM engine runs them), and the roofline also with ``kernels: eager``
(BestServe's Hugging Face eager tables).
"""

from __future__ import annotations

import sys

from cosim.adapters.roofline import RooflineBackend
from cosim.adapters.sdk import RuntimeBackend, Session
from cosim.adapters.sdk.testing import sample_session_spec
from cosim.v1 import types_pb2 as pb

from .backend import GenzBackend

# (label, tensor parallel, new tokens, context tokens)
CASES: list[tuple[str, int, list[int], list[int]]] = [
    ("prefill 128", 1, [128], [0]),
    ("prefill 512", 1, [512], [0]),
    ("prefill 2048", 1, [2048], [0]),
    ("prefill 8192", 1, [8192], [0]),
    ("decode 1 x ctx 1024", 1, [1], [1024]),
    ("decode 16 x ctx 1024", 1, [1] * 16, [1024] * 16),
    ("decode 64 x ctx 1024", 1, [1] * 64, [1024] * 64),
    ("decode 256 x ctx 1024", 1, [1] * 256, [1024] * 256),
    ("decode 64 x ctx 4096", 1, [1] * 64, [4096] * 64),
    ("chunk 512 after 1024 + 32 decodes", 1, [512] + [1] * 32, [1024] + [2048] * 32),
    ("TP=2 prefill 2048", 2, [2048], [0]),
    ("TP=2 decode 64 x ctx 1024", 2, [1] * 64, [1024] * 64),
]


def _ms(backend: RuntimeBackend, tp: int, new: list[int], ctx: list[int], **options: str) -> float:
    spec = sample_session_spec()
    spec.hardware.count, spec.parallelism.tensor = tp, tp
    spec.options.update(options)
    session = Session(id="compare", spec=spec, state=backend.open_session(spec))
    return backend.predict(session, pb.StepBatch(new_tokens=new, context_tokens=ctx)).duration_ns / 1e6


def table() -> str:
    """The comparison as a Markdown table."""
    rows = ["| step (Llama-3-8B, H100-SXM) | genz ms | roofline ms | roofline eager ms | genz / roofline |",
            "|---|---:|---:|---:|---:|"]
    genz, roofline = GenzBackend(), RooflineBackend()
    for label, tp, new, ctx in CASES:
        g, r = _ms(genz, tp, new, ctx), _ms(roofline, tp, new, ctx)
        e = _ms(roofline, tp, new, ctx, kernels="eager")
        rows.append(f"| {label} | {g:.3f} | {r:.3f} | {e:.3f} | {g / r:.2f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(table() + "\n")
