"""A client's scheduler section of the scenario config."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..frozen import FrozenModel


class SchedulerConfig(FrozenModel):
    """Per-client batching and KV-cache management (modelled on vLLM)."""

    batching: Literal["static", "continuous", "chunked", "mixed"] = Field(
        "continuous", description="static; continuous (prefill-prioritized); chunked (Sarathi); "
                                  "mixed (whole prefills with decodes)")
    packing: Literal["fcfs", "least_work_left"] = Field("fcfs", description="order of the waiting queue")
    max_num_seqs: int = Field(256, gt=0, description="most sequences in one step")
    max_num_batched_tokens: int = Field(8192, gt=0, description="token budget of one step")
    chunk_size: int | None = Field(None, gt=0, description="chunked: prefill token budget per step "
                                                           "(default max_num_batched_tokens)")
    long_prefill_token_threshold: int = Field(0, ge=0, description="chunked: most tokens one request computes "
                                                                   "in a step while it has more left (0: no cap)")
    scheduler_reserve_full_isl: bool = Field(True, description="chunked: admit a prompt only if all of it fits "
                                                               "the free KV blocks, not just its first chunk")
    block_size: int = Field(16, gt=0, description="KV block size, tokens")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="share of device memory cosim may use")
    reserve_bytes: int = Field(0, ge=0, description="per-device memory held back on top of what vLLM's profiling "
                                                    "charges (weights, activation peak, CUDA graphs, non-torch)")
    num_gpu_blocks: int | None = Field(None, gt=0, description="KV blocks, overriding the memory computation "
                                                              "(as vLLM counts them: one is its null block)")
    enforce_eager: bool = Field(False, description="vLLM --enforce-eager: no CUDA graphs, so none of their memory "
                                                   "is held back from the KV cache")
    memory_profiler_estimate_cudagraphs: bool = Field(
        True, description="vLLM's VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: hold the estimated CUDA-graph memory "
                          "back from the KV cache (on by default from vLLM 0.21; off by default in 0.19)")
    preemption: Literal["recompute", "swap"] = Field("recompute", description="what a preempted request loses")
    swap_space_bytes: int = Field(0, ge=0, description="host memory for swapped KV (preemption: swap)")
    host_bandwidth_gbps: float = Field(25.0, gt=0, description="device-host bandwidth for swapping, GB/s")
    enable_prefix_caching: bool = Field(False, description="reuse KV blocks of requests sharing a prefix")
    host_time: bool = Field(False, description="add the host (CPU) time vLLM V1 exposes per step "
                                               "(hub/clients/host.py) to a backend that times GPU kernels "
                                               "only; off for backends whose times include host work")
    async_scheduling: bool = Field(True, description="host_time: vLLM's --async-scheduling (0.19's default): "
                                                     "the next step's host work overlaps this step's GPU work")
    profile_execution_mode: Literal["cuda_graph", "eager"] = Field(
        "cuda_graph", description="host_time: launch costs in the backend's step times: eager (wall times of "
                                  "eager forwards) or cuda_graph (graph replays, or kernel durations alone)")
