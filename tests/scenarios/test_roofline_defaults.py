"""A bare ``{kind: roofline}`` times steps with the fused kernels a vLLM engine runs (docs/roofline.md)."""

from __future__ import annotations

from typing import Any

import cosim


def llama_on_l40s(backend: dict[str, Any]) -> dict[str, Any]:
    """Llama-3-8B on one L40S (a device no shipped roofline profile covers), 20 short chats."""
    return {"seed": 3, "models": {"m": {"preset": "meta-llama/Meta-Llama-3-8B"}},
            "hardware": {"h": {"preset": "L40S"}}, "backends": {"roof": backend},
            "clients": [{"name": "c", "model": "m", "backend": "roof",
                         "hardware": {"device": "h", "count": 1},
                         "scheduler": {"batching": "chunked", "max_num_batched_tokens": 2048}}],
            "workload": {"requests": 20, "arrival": {"process": "poisson", "rate_per_s": 20},
                         "input_tokens": {"dist": "fixed", "value": 1500},
                         "output_tokens": {"dist": "fixed", "value": 16}}}


def test_bare_roofline_uses_fused_kernels() -> None:
    bare, fused, eager = (
        [(r.first_token_ns, r.finish_ns) for r in cosim.run(llama_on_l40s(backend)).requests]
        for backend in ({"kind": "roofline"}, {"kind": "roofline", "options": {"kernels": "fused"}},
                        {"kind": "roofline", "options": {"kernels": "eager"}}))
    assert bare == fused
    # Eager kernels materialize 1500 x 1500 attention scores per head: every prefill is slower.
    assert all(e[0] > f[0] for e, f in zip(eager, fused))
