"""KV capacity as vLLM V1 profiles device memory (cosim.hub.config.memory), with the arithmetic done by hand."""

from __future__ import annotations

from typing import Any

import pytest

import cosim
from cosim.hub.config import memory
from cosim.hub.config.loading import parse_config
from cosim.hub.config.presets import get_model
from cosim.hub.config.scheduler import SchedulerConfig
from cosim.hub.studies.validation import ClientCapacity, resolve_scenario

GIB, MIB = 2**30, 2**20
H100_TOTAL = 85_029_615_043  # 79.19 GiB, the total vLLM 0.19 logged on an H100 80GB
LLAMA_PARAMS = 8_030_261_248
LLAMA_BLOCK = 2 * 32 * 8 * 128 * 2 * 16  # K and V, 32 layers, 8 KV heads x 128, bf16, 16 tokens = 2 MiB


def scenario(device: str = "H100-SXM", model: str = "meta-llama/Llama-3.1-8B", dtype: str = "bf16",
             hardware: dict[str, Any] | None = None, **scheduler: Any) -> dict[str, Any]:
    """One client on ``device``: vLLM 0.19's serve defaults on a 24-80 GB card (2048 tokens, 256 sequences)."""
    return {
        "seed": 1, "models": {"m": {"preset": model, "dtype": dtype}}, "hardware": {"gpu": {"preset": device}},
        "backends": {"roofline": {"kind": "roofline"}},
        "clients": [{"name": "c0", "model": "m", "backend": "roofline",
                     "hardware": {"device": "gpu", **(hardware or {})},
                     "scheduler": {"batching": "chunked", "max_num_batched_tokens": 2048, "max_num_seqs": 256,
                                   **scheduler}}],
        "workload": {"requests": 2, "arrival": {"process": "poisson", "rate_per_s": 1},
                     "input_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 4}},
        "output": {"dir": None, "plots": False},
    }


def capacity(config: dict[str, Any]) -> ClientCapacity:
    resolution = resolve_scenario(parse_config(config))
    assert resolution.errors == []
    client, = resolution.clients
    return client


def test_llama_3_1_8b_on_an_h100_at_0_9_with_2048_batched_tokens() -> None:
    """Every term of vLLM's split, from the model's shape and the device's reported total."""
    weights = LLAMA_PARAMS * 2 + 131_072 * 128 * 2  # bf16 parameters + rotary cos/sin cache (131072 positions)
    # The sampler's peak beats the forward pass's (2048 x (4096 + 4096 + 3 x 14336) x 2 = 200 MiB): hidden
    # states of 2048 tokens and 2 x 256 sampled rows, 256 x 128256 logits in bf16 and three float32 copies
    # (logits, probabilities, noise), and the Triton top-k/top-p buffer of 132 rows (one per SM).
    activation = (2048 + 2 * 256) * 4096 * 2 + 256 * 128_256 * (2 + 3 * 4) + 132 * 128_256 * 4
    # FULL_AND_PIECEWISE: 51 PIECEWISE sizes (1, 2, 4, 8..248 by 8, 256..512 by 16), 35 FULL ones up to 256.
    graphs = (260 + 6 * (50 + 34)) * MIB
    non_torch = GIB // 4
    kv = int(H100_TOTAL * 0.9 - weights - activation - graphs - non_torch)
    client = capacity(scenario())
    assert client.kv_memory is not None
    assert client.kv_memory.as_dict() == {
        "total_bytes": H100_TOTAL, "gpu_memory_utilization": 0.9, "requested_bytes": int(H100_TOTAL * 0.9),
        "weight_bytes": 16_094_076_928, "activation_bytes": 548_360_192, "cudagraph_bytes": 801_112_064,
        "non_torch_bytes": 268_435_456, "reserve_bytes": 0, "kv_bytes": kv, "block_bytes": LLAMA_BLOCK,
        "num_blocks": kv // LLAMA_BLOCK}
    assert (weights, activation, graphs) == (16_094_076_928, 548_360_192, 801_112_064)
    assert client.kv_capacity_blocks == kv // LLAMA_BLOCK == 28_045


def test_without_cuda_graph_memory_the_kv_cache_gets_it() -> None:
    """--enforce-eager, or vLLM 0.19's default of no CUDA-graph estimate: 764 MiB more, 382 blocks."""
    with_graphs = capacity(scenario()).kv_capacity_blocks
    assert capacity(scenario(enforce_eager=True)).kv_capacity_blocks == with_graphs + 382
    assert capacity(scenario(memory_profiler_estimate_cudagraphs=False)).kv_capacity_blocks == with_graphs + 382


def test_reserve_bytes_is_held_back_on_top() -> None:
    plain = capacity(scenario()).kv_capacity_blocks
    client = capacity(scenario(reserve_bytes=GIB))
    assert client.kv_capacity_blocks == plain - 512
    assert client.kv_memory is not None and client.kv_memory.reserve_bytes == GIB


def test_the_h100_run_vllm_0_19_logged() -> None:
    """8192 tokens, 1024 sequences, 0.95, no graph estimate: 29,751 blocks recorded (476,016 tokens)."""
    client = capacity(scenario(gpu_memory_utilization=0.95, max_num_batched_tokens=8192, max_num_seqs=1024,
                               memory_profiler_estimate_cudagraphs=False))
    assert client.kv_memory is not None
    # The log: torch peak 1.89 GiB (1.85 here), weights 14.99 GiB, KV 58.11 GiB (58.14 here).
    assert round(client.kv_memory.activation_bytes / GIB, 2) == 1.85
    assert round(client.kv_memory.weight_bytes / GIB, 2) == 14.99
    assert client.kv_capacity_blocks == 29_766


def test_the_rtx_4090_run_of_the_data_set() -> None:
    """vLLM 0.19 recorded 2588 blocks; this model gives 2773 (+7.1%, docs/validation.md, KV capacity)."""
    client = capacity(scenario("RTX-4090", memory_profiler_estimate_cudagraphs=False))
    assert client.kv_memory is not None and client.kv_memory.total_bytes == 25_250_627_584
    assert client.kv_capacity_blocks == 2773


def test_tensor_parallelism_halves_weights_and_blocks_and_charges_nccl() -> None:
    client = capacity(scenario(hardware={"count": 2, "tensor_parallel": 2}))
    assert client.kv_memory is not None
    assert client.kv_memory.non_torch_bytes == int(2.07 * GIB)
    assert client.kv_memory.block_bytes == LLAMA_BLOCK // 2  # 4 of the 8 KV heads
    assert client.kv_memory.weight_bytes == LLAMA_PARAMS + 131_072 * 128 * 2  # the rotary cache is whole


def test_num_gpu_blocks_still_sets_the_capacity_and_the_split_is_reported() -> None:
    client = capacity(scenario(num_gpu_blocks=1000))
    assert client.kv_capacity_blocks == 1000 and client.from_num_gpu_blocks
    assert client.kv_memory is not None and client.kv_memory.num_blocks == 28_045


def test_an_overridden_capacity_is_taken_as_reported() -> None:
    config = scenario()
    config["hardware"]["gpu"]["overrides"] = {"mem_capacity_bytes": 40 * GIB}
    client = capacity(config)
    assert client.kv_memory is not None and client.kv_memory.total_bytes == 40 * GIB


def test_a_device_left_with_no_block_says_what_took_the_memory() -> None:
    """RTX 4090 at 0.7: 16.46 GiB requested; 14.99 of weights, 1.85 of activations (8192 tokens, 1024 rows),
    0.84 of CUDA graphs and 0.25 non-torch leave -1.47 GiB."""
    error, = cosim.validate(scenario("RTX-4090", gpu_memory_utilization=0.7, max_num_batched_tokens=8192,
                                     max_num_seqs=1024))
    assert error.where == "clients[0].hardware"
    assert "no memory left for one KV block of model meta-llama/Llama-3.1-8B on RTX-4090" in error.message
    assert "activation peak 1.85 - CUDA graphs 0.84 - non-torch 0.25 = KV -1.47 GiB" in error.message
    assert "lower max_num_batched_tokens" in error.message


@pytest.mark.parametrize(("max_num_seqs", "tokens", "sizes"), [(256, 2048, 51), (8, 2048, 5), (128, 64, 11)])
def test_capture_sizes_follow_vllm_defaults(max_num_seqs: int, tokens: int, sizes: int) -> None:
    """Largest size min(2 x max_num_seqs, 512, max_num_batched_tokens); 1, 2, 4, steps of 8, then 16."""
    scheduler = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=tokens)
    full = sum(1 for s in memory._capture_sizes(scheduler) if s <= max_num_seqs)
    assert len(memory._capture_sizes(scheduler)) == sizes
    assert memory.cudagraph_bytes(scheduler) == (260 + 6 * (sizes - 1 + full - 1)) * MIB


def test_a_float32_model_keeps_one_copy_of_its_logits() -> None:
    """No float32 copy to make: 256 x 128256 x (4 + 2 x 4) besides the rest, with 4-byte activations."""
    llama = get_model("meta-llama/Llama-3.1-8B").model_copy(update={"bytes_per_param": 4.0})
    scheduler = SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    assert memory.activation_bytes(llama, scheduler, num_sms=132) == \
        (2048 + 512) * 4096 * 4 + 256 * 128_256 * 12 + 132 * 128_256 * 4


def test_the_summary_reports_the_split() -> None:
    result = cosim.run(scenario())
    client = result.summary["clients"]["c0"]
    assert client["kv_capacity_blocks"] == client["kv_memory"]["num_blocks"] == 28_045
    assert client["kv_memory"]["activation_bytes"] == 548_360_192
