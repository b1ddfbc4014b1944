"""Device memory of one serving instance, split the way vLLM V1 profiles it at start-up.

vLLM sizes its KV cache once (``Worker.determine_available_memory``,
``vllm/v1/worker/gpu_worker.py``; ``memory_profiling``, ``vllm/utils/mem_utils.py``):
it requests ``total x gpu_memory_utilization`` of the device, loads the weights,
runs ``GPUModelRunner.profile_run`` (one forward pass of ``max_num_batched_tokens``
dummy tokens, then ``_dummy_sampler_run`` on ``min(max_num_seqs,
max_num_batched_tokens)`` rows), and gives the KV cache what is left after the
weights, the torch peak of that pass, the non-torch memory it added (NCCL
buffers, kernel modules; the CUDA context is in the baseline snapshot, so it is
not charged) and, where CUDA graphs are captured and their estimate is on
(``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``: opt-in in 0.19, default from
0.21), the graphs' estimated memory. Blocks are that remainder divided by the
bytes of one block on one device (``get_num_blocks``,
``vllm/v1/core/kv_cache_utils.py``).

Main names: :func:`kv_memory` replays that arithmetic from the model's shape;
:class:`KVMemory` keeps each term for reports. Constants name their source.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .presets import ModelPreset
from .scheduler import SchedulerConfig

__all__ = ["KVMemory", "activation_bytes", "cudagraph_bytes", "kv_memory", "lora_adapter_bytes", "non_torch_bytes"]

GIB = 2**30
MIB = 2**20

# Non-torch memory the profiling pass adds on one device with no peer: vLLM 0.19.0 debug log of
# Llama-3.1-8B on one H100, "non-torch forward increase memory: 0.25GiB" (llm-d-incubation/
# llm-d-planner, accuracy/results/v0.19.0/logs/meta-llama-llama-3-1-8b--h100-80gb--tp1pp1dp1--16384.log).
NON_TORCH_BYTES = int(0.25 * GIB)
# The same with peers over NCCL (tensor or expert parallelism): 2.07 GiB per GPU measured for
# Llama-3.1-8B at TP=2 on H100 SXM, 2.13 at TP=4 (same study, accuracy/results/v0.19.0/
# accuracy_report.md, "Sensitivity: Tensor Parallelism"). NVSwitch nodes; PCIe cards not measured.
NON_TORCH_PEERS_BYTES = int(2.07 * GIB)
# CUDA-graph estimate (``GPUModelRunner.profile_cudagraph_memory``): per mode, the first capture
# (its memory pool) plus a per-graph cost for each further size; total = largest first capture +
# the per-graph terms of every mode. Measured in the same Llama-3.1-8B log: "Estimated PIECEWISE
# CUDA graph memory: 138.00 MiB first-capture + (51-1) x 6.00 MiB per-graph", FULL 260.00 MiB
# first-capture, "Estimated CUDA graph memory: 0.84 GiB total". One model's figures: others differ.
CUDAGRAPH_FIRST_FULL_BYTES = 260 * MIB
CUDAGRAPH_FIRST_PIECEWISE_BYTES = 138 * MIB
CUDAGRAPH_PER_GRAPH_BYTES = 6 * MIB
# Default largest captured batch: min(2 x max_num_seqs, 512, max_num_batched_tokens)
# (``VllmConfig._set_cudagraph_sizes``, vllm/config/vllm.py, 0.19.0).
MAX_CUDAGRAPH_CAPTURE_SIZE = 512
# Top-k/top-p runs the Triton kernel from 8 rows up, a sort below (``apply_top_k_top_p``,
# vllm/v1/sample/ops/topk_topp_sampler.py, 0.19.0).
TRITON_TOPK_MIN_ROWS = 8
FP32_BYTES = 4  # the sampler works in float32 (``Sampler.forward``: logits.to(torch.float32))
INT64_BYTES = 8  # sort indices


@dataclass(frozen=True)
class KVMemory:
    """One device's memory as vLLM splits it; bytes, the KV blocks that fit, and how they were found.

    ``requested_bytes - weights - activation - cudagraph - non_torch - reserve = kv_bytes``;
    ``num_blocks = kv_bytes // block_bytes`` (0 when nothing is left).
    """

    total_bytes: int
    gpu_memory_utilization: float
    requested_bytes: int
    weight_bytes: int
    activation_bytes: int
    cudagraph_bytes: int
    non_torch_bytes: int
    reserve_bytes: int
    kv_bytes: int
    block_bytes: int
    num_blocks: int
    lora_bytes: int = 0  # the LoRA slots (max_loras x an adapter of max_lora_rank), where LoRA is served

    def as_dict(self) -> dict[str, int | float]:
        """The terms by name, for summary.json (``lora_bytes`` only where LoRA is served)."""
        terms = asdict(self)
        if not self.lora_bytes:
            del terms["lora_bytes"]
        return terms

    def describe(self) -> str:
        """One line in GiB: the terms subtracted from the requested memory, and the blocks left."""
        def gib(value: int) -> str:
            return f"{value / GIB:.2f}"
        reserve = f" - reserve {gib(self.reserve_bytes)}" if self.reserve_bytes else ""
        reserve += f" - LoRA slots {gib(self.lora_bytes)}" if self.lora_bytes else ""
        return (f"{gib(self.total_bytes)} GiB x {self.gpu_memory_utilization:g} = {gib(self.requested_bytes)} - "
                f"weights {gib(self.weight_bytes)} - activation peak {gib(self.activation_bytes)} - "
                f"CUDA graphs {gib(self.cudagraph_bytes)} - non-torch {gib(self.non_torch_bytes)}{reserve} = "
                f"KV {gib(self.kv_bytes)} GiB / {self.block_bytes / MIB:g} MiB per block = {self.num_blocks:,} blocks")


def _activation_dtype_bytes(model: ModelPreset) -> int:
    """Bytes of one activation element: the model dtype; fp8/int8 weights still compute in 16 bits."""
    return 4 if model.bytes_per_param >= 4 else 2


def rope_cache_bytes(model: ModelPreset) -> int:
    """The rotary cos/sin cache vLLM loads with the weights: max_position_embeddings x head_dim in the
    model dtype, one per model (``RotaryEmbeddingBase``, vllm/model_executor/layers/rotary_embedding/
    base.py, cached by ``get_rope``); 0 for learned positions (BERT) or an unknown context length."""
    if model.family == "bert" or not model.max_position_embeddings:
        return 0
    return model.max_position_embeddings * model.effective_head_dim * _activation_dtype_bytes(model)


def _forward_elements(model: ModelPreset, num_tokens: int, tp: int, ep: int) -> int:
    """Activation elements live at the peak of one layer of the profiling forward pass, per device.

    Attention: residual, normed input, q/k/v and the attention output. MLP: the attention
    output (the input of the compiled piece), the residual, and gate_up beside the activated
    half (SiLU-and-mul writes a new tensor). MoE (``TritonExperts.workspace_shapes``, vllm/
    model_executor/layers/fused_moe/fused_moe.py): the gathered tokens M (x DP when experts span
    DP ranks, whose tokens are all-gathered), M x top-k x max(I, h) and M x top-k x max(2I, h)
    workspaces and an M x h output; experts are whole with EP, split by TP without.
    """
    t, h, d = num_tokens, model.hidden_size, model.effective_head_dim
    q = model.num_attention_heads * d // tp
    kv = max(1, model.num_kv_heads // tp) * d
    attention = t * (2 * h + q + 2 * kv + q)
    if model.is_moe:
        m = t * max(1, ep // tp)
        inter = model.intermediate_size if ep > 1 else model.intermediate_size // tp
        k = model.experts_per_token
        mlp = t * (q + h) + 2 * m * h + m * k * (max(inter, h) + max(2 * inter, h))
    else:
        mlp = t * (q + h) + t * (model.intermediate_size // tp) * (3 if model.gated_mlp else 2)
    return max(attention, mlp)


def _topk_buffer_rows(rows: int, num_sms: int | None) -> int:
    """Rows of the Triton top-k/top-p scratch buffer: min(next_pow2(min(SMs, rows)), SMs)
    (``apply_top_k_top_p_triton``, vllm/v1/sample/ops/topk_topp_triton.py); rows when SMs are unknown."""
    programs = min(num_sms or rows, rows)
    return min(1 << (programs - 1).bit_length(), num_sms or programs)


def _sampler_bytes(model: ModelPreset, num_tokens: int, rows: int, num_sms: int | None) -> int:
    """Torch bytes live at the peak of ``_dummy_sampler_run`` on the last pipeline stage.

    The forward pass's hidden states stay alive; the sampled rows and their ``rand_like`` copy;
    the logits in the model dtype (all-gathered over TP: full vocabulary), their float32 copy
    (none when the model is float32), the probabilities and the exponential noise of
    ``random_sample``; and the top-k/top-p scratch (Triton buffer, or sorted values and int64
    indices below 8 rows).
    """
    act, h, vocab = _activation_dtype_bytes(model), model.hidden_size, model.vocab_size
    held = (num_tokens + 2 * rows) * h * act
    fp32_copies = 2 if act == FP32_BYTES else 3
    logits = rows * vocab * (act + fp32_copies * FP32_BYTES)
    if rows >= TRITON_TOPK_MIN_ROWS:
        topk = _topk_buffer_rows(rows, num_sms) * vocab * FP32_BYTES
    else:
        topk = rows * vocab * (FP32_BYTES + INT64_BYTES)
    return held + logits + topk


def activation_bytes(model: ModelPreset, scheduler: SchedulerConfig, *, tensor_parallel: int = 1,
                     expert_parallel: int = 1, num_sms: int | None = None) -> int:
    """Torch peak of vLLM's profile run on one device: the larger of the forward pass's and the sampler's.

    Args:
        model: the model (dtype from ``bytes_per_param``).
        scheduler: ``max_num_batched_tokens`` tokens in the forward pass, ``min(max_num_seqs,
            max_num_batched_tokens)`` sampled rows (``GPUModelRunner._dummy_run``).
        tensor_parallel, expert_parallel: the parallel degrees.
        num_sms: streaming multiprocessors (caps the sampler's scratch rows); None = uncapped.
    """
    tokens = scheduler.max_num_batched_tokens
    rows = min(scheduler.max_num_seqs, tokens)
    forward = _forward_elements(model, tokens, tensor_parallel, expert_parallel) * _activation_dtype_bytes(model)
    return max(forward, _sampler_bytes(model, tokens, rows, num_sms))


def _capture_sizes(scheduler: SchedulerConfig) -> list[int]:
    """vLLM's default CUDA-graph batch sizes: 1, 2, 4, then steps of 8 below 256 and 16 from 256."""
    largest = min(2 * scheduler.max_num_seqs, MAX_CUDAGRAPH_CAPTURE_SIZE, scheduler.max_num_batched_tokens)
    sizes = {s for s in (1, 2, 4) if s <= largest} | set(range(8, min(largest + 1, 256), 8))
    return sorted(sizes | set(range(256, largest + 1, 16)))


def cudagraph_bytes(scheduler: SchedulerConfig) -> int:
    """The CUDA-graph memory vLLM reserves before sizing the KV cache (0 when it reserves none).

    FULL_AND_PIECEWISE (vLLM's default mode): a PIECEWISE graph per capture size and a FULL one
    per size up to ``max_num_seqs`` (uniform decode, ``CudagraphDispatcher``). Nothing with
    ``enforce_eager``, nor unless ``memory_profiler_estimate_cudagraphs``.
    """
    if scheduler.enforce_eager or not scheduler.memory_profiler_estimate_cudagraphs:
        return 0
    sizes = _capture_sizes(scheduler)
    piecewise, full = len(sizes), sum(1 for s in sizes if s <= scheduler.max_num_seqs)
    first = CUDAGRAPH_FIRST_FULL_BYTES if full else CUDAGRAPH_FIRST_PIECEWISE_BYTES
    return first + CUDAGRAPH_PER_GRAPH_BYTES * (piecewise - 1 + max(full - 1, 0))


def non_torch_bytes(*, tensor_parallel: int = 1, expert_parallel: int = 1) -> int:
    """Non-torch memory the profiling pass adds: measured alone, or with NCCL peers (TP or EP > 1)."""
    return NON_TORCH_PEERS_BYTES if tensor_parallel > 1 or expert_parallel > 1 else NON_TORCH_BYTES


def block_bytes(model: ModelPreset, scheduler: SchedulerConfig, *, tensor_parallel: int = 1,
                pipeline_parallel: int = 1) -> int:
    """Bytes of one KV block on one device: K and V of ``block_size`` tokens in this stage's layers
    for this rank's KV heads (a head is replicated when TP exceeds the KV heads)."""
    kv_heads = max(1, model.num_kv_heads // tensor_parallel)
    per_token = 2 * (model.num_layers // pipeline_parallel) * kv_heads * model.effective_head_dim \
        * model.bytes_per_kv_element
    return int(per_token * scheduler.block_size)


def lora_adapter_bytes(model: ModelPreset, rank: int, *, tensor_parallel: int = 1, pipeline_parallel: int = 1) -> int:
    """Bytes of one LoRA adapter of ``rank`` on one device (tensor and pipeline shard 1: the whole adapter).

    vLLM's LoRA layers (``vllm/lora/layers``) wrap q/k/v/o and gate/up/down, the target modules it
    supports for Llama-style models; each module of ``in`` x ``out`` gets A (r x in) and B (out x r),
    so an adapter is ``r x sum(in + out) x layers x dtype bytes``, in the model's activation dtype
    (``lora_dtype: auto``). Per device, as vLLM shards them (not ``fully_sharded_loras``): a
    column-parallel module (q, k, v, gate, up) holds A whole and B's rows of its shard
    (``r (in + out / tp)``); a row-parallel one (o, down) holds A's columns of its shard and B whole
    (``r (in / tp + out)``); a pipeline stage holds its layers. K and V heads are replicated when TP
    exceeds them, as the KV cache's are. MoE experts' LoRA (vLLM's ``FusedMoEWithLoRA``) is not
    counted: attention modules only for MoE models. Llama-3-8B, rank 16: 16 x 81,920 x 32 x 2 =
    83,886,080 bytes (80 MiB).
    """
    h, d, tp = model.hidden_size, model.effective_head_dim, tensor_parallel
    q = model.num_attention_heads * d // tp
    kv = max(1, model.num_kv_heads // tp) * d
    per_layer = (h + q) + 2 * (h + kv) + (q + h)  # q, k, v (column-parallel); o (row-parallel)
    if not model.is_moe:
        inter = model.intermediate_size // tp
        per_layer += (2 if model.gated_mlp else 1) * (h + inter) + (inter + h)  # gate, up; down
    return rank * per_layer * (model.num_layers // pipeline_parallel) * _activation_dtype_bytes(model)


def kv_memory(model: ModelPreset, scheduler: SchedulerConfig, *, total_bytes: int, weight_bytes: float,
              tensor_parallel: int = 1, pipeline_parallel: int = 1, expert_parallel: int = 1,
              num_sms: int | None = None, lora_bytes: int = 0) -> KVMemory:
    """The KV capacity of one device and every term of it, as vLLM V1's start-up profiling finds it.

    ``scheduler.reserve_bytes`` is held back on top of vLLM's terms (memory the profile cannot
    see, e.g. another process on the device).

    Args:
        model: the model preset (dtype and overrides applied).
        scheduler: utilization, token budget, sequences, block size, CUDA-graph knobs, reserve.
        total_bytes: device memory as the CUDA runtime reports it (``torch.cuda.mem_get_info``).
        weight_bytes: parameter bytes on this device after TP/PP/EP sharding; the rotary cache is added.
        tensor_parallel, pipeline_parallel, expert_parallel: the parallel degrees.
        num_sms: streaming multiprocessors of the device; None when unknown.
        lora_bytes: the LoRA slots on this device, ``max_loras x lora_adapter_bytes(max_lora_rank)``:
            vLLM allocates them with the model (``LoRAModelManager`` creates each layer's stacked
            ``lora_a``/``lora_b`` buffers for every slot at ``load_model``), so the KV cache gets
            what is left after them.
    """
    requested = total_bytes * scheduler.gpu_memory_utilization
    weights = int(weight_bytes) + rope_cache_bytes(model)
    activation = activation_bytes(model, scheduler, tensor_parallel=tensor_parallel,
                                  expert_parallel=expert_parallel, num_sms=num_sms)
    graphs = cudagraph_bytes(scheduler)
    non_torch = non_torch_bytes(tensor_parallel=tensor_parallel, expert_parallel=expert_parallel)
    kv = int(requested - weights - activation - graphs - non_torch - scheduler.reserve_bytes - lora_bytes)
    block = block_bytes(model, scheduler, tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel)
    return KVMemory(total_bytes=total_bytes, gpu_memory_utilization=scheduler.gpu_memory_utilization,
                    requested_bytes=int(requested), weight_bytes=weights, activation_bytes=activation,
                    cudagraph_bytes=graphs, non_torch_bytes=non_torch, reserve_bytes=scheduler.reserve_bytes,
                    kv_bytes=kv, block_bytes=block, num_blocks=max(0, kv // block) if block else 0,
                    lora_bytes=lora_bytes)
