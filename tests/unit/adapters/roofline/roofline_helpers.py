"""Builders shared by the roofline tests."""

from __future__ import annotations

from typing import Any

from cosim.adapters.roofline import SessionModel, batch_stats, estimate, open_model
from cosim.v1 import types_pb2 as pb

LLAMA2_70B = dict(name="llama2-70b", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                  intermediate_size=28672, vocab_size=32000, bytes_per_param=2, bytes_per_kv_element=2,
                  gated_mlp=True)
H100 = dict(device="test-h100", peak_tflops=989.0, mem_bandwidth_gbps=3350.0, intra_node_gbps=450.0,
            devices_per_node=8)


def make_spec(*, model: dict[str, Any] | None = None, hardware: dict[str, Any] | None = None, tp: int = 1,
              pp: int = 1, ep: int = 1, options: dict[str, Any] | None = None,
              extra: dict[str, float] | None = None) -> pb.SessionSpec:
    """A session spec: Llama-2-70B on H100-like devices unless told otherwise, under BestServe's
    parameters (the hand-worked tests below are BestServe's model; tests of the fitted default pass
    ``profile: auto``)."""
    hw = dict(H100 if hardware is None else hardware)
    spec = pb.SessionSpec(client="test", model=pb.ModelSpec(**(model or LLAMA2_70B)),
                          hardware=pb.HardwareSpec(count=tp * pp, **hw),
                          parallelism=pb.Parallelism(tensor=tp, pipeline=pp, expert=ep))
    spec.hardware.extra.update(extra or {})
    spec.options.update({"profile": "bestserve", **(options or {})})
    return spec


def make_model(**kwargs: Any) -> SessionModel:
    return open_model(make_spec(**kwargs))


def time_step(model: SessionModel, batch: list[tuple[int, int]]) -> pb.StepTiming:
    """Times ``[(new, context), ...]``."""
    return estimate(model, batch_stats([n for n, _ in batch], [c for _, c in batch]))
