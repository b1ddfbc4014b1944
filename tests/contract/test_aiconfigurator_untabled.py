"""The kernels cosim times beside aiconfigurator-core's tables: every layer's RoPE and KV-cache write."""

from __future__ import annotations

import pytest

from cosim.adapters.aiconfigurator.untabled import UntabledKernels
from cosim.adapters.roofline import fitted
from cosim.hub.config import presets
from cosim.v1 import types_pb2 as pb


def spec(model: str, device: str, tp: int) -> pb.SessionSpec:
    return pb.SessionSpec(client="c", model=presets.get_model(model).to_model_spec(),
                          hardware=presets.hardware_spec(device, tp), parallelism=pb.Parallelism(tensor=tp))


def test_llama_70b_over_tp4_on_h100_by_hand() -> None:
    """80 layers; a rank holds 16 of 64 query heads and 2 of 8 KV heads of 128: RoPE moves the query and key
    in and out in bf16, 2 x 2 x (2048 + 256) = 9,216 B a token; the cache write stores key and value,
    2 x 2 x 256 = 1,024 B; each kernel takes the hopper family's element-wise floor plus its bytes."""
    kernels = UntabledKernels.of(spec("meta-llama/Llama-3.1-70B-Instruct", "H100-SXM", 4))
    params = fitted.params_for("H100-SXM")
    floor_ns, ns_per_byte = params["elem_floor_us"] * 1e3, 1 / (params["elem_mem_eff"] * 3350)
    assert (kernels.layers, kernels.rope_bytes, kernels.kv_bytes) == (80, 9216, 1024)
    rope, write = kernels.entries(32)
    assert rope[0] == "rope" and rope[1] == pytest.approx(80 * (floor_ns + 32 * 9216 * ns_per_byte) / 1e6)
    assert write[0] == "kv_cache_write" and write[1] == pytest.approx(80 * (floor_ns + 32 * 1024 * ns_per_byte) / 1e6)


def test_a_rank_keeps_one_kv_head_when_tp_exceeds_them() -> None:
    """Llama-3.1-8B has 8 KV heads: over TP 16 vLLM replicates them, one a rank."""
    assert UntabledKernels.of(spec("meta-llama/Llama-3.1-8B", "H100-SXM", 16)).kv_bytes == 2 * 2 * 128


def test_the_step_holds_them_beside_the_librarys_operators() -> None:
    """A step's breakdown names both, and its duration is the library's operators plus them."""
    from cosim.adapters.aiconfigurator import AiconfiguratorBackend
    from cosim.adapters.sdk import Session

    backend = AiconfiguratorBackend()
    session_spec = spec("meta-llama/Llama-3.1-8B", "H100-SXM", 1)
    session = Session("s", session_spec, backend.open_session(session_spec))
    timing = backend.predict(session, pb.StepBatch(new_tokens=[1] * 8, context_tokens=[512] * 8))
    rope, write = UntabledKernels.of(session_spec).entries(8)
    assert timing.breakdown["rope"] == pytest.approx(rope[1] * 1e6)
    assert timing.breakdown["kv_cache_write"] == pytest.approx(write[1] * 1e6)
    assert timing.duration_ns == pytest.approx(sum(timing.breakdown.values()), abs=1)
