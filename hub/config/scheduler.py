"""A client's scheduler section of the scenario config."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .bounds import MAX_BLOCKS, MAX_BYTES, MAX_GBPS, MAX_SEQS, MAX_TOKENS, MIN_GBPS
from .choices import BatchingName, PackingName
from .frozen import FieldProblem, FrozenModel
from .offload import KVOffloadConfig


class SchedulerConfig(FrozenModel):
    """Per-client batching and KV-cache management (modelled on vLLM)."""

    batching: BatchingName = Field(
        "continuous", description="static; continuous (prefill-prioritized); chunked (Sarathi); "
                                  "mixed (whole prefills with decodes)")
    packing: PackingName = Field(
        "fcfs", description="order of the waiting queue: fcfs; least_work_left; priority (vLLM's priority "
                            "policy: the request class's priority, lower first, and preemption of the least "
                            "important); edf (earliest deadline first: the class's deadline_s)")
    max_num_seqs: int = Field(256, gt=0, le=MAX_SEQS, description="most sequences in one step")
    max_num_batched_tokens: int = Field(8192, gt=0, le=MAX_TOKENS, description="token budget of one step; "
                                        "with whole-prompt batching (static, continuous, mixed: chunked "
                                        "prefill off) a longer prompt is an error, as in vLLM")
    max_model_len: int | None = Field(None, gt=0, le=MAX_TOKENS, description="vLLM --max-model-len: a request "
                                      "with more tokens (prompt + output) is an error; default no limit (not "
                                      "the model's max_position_embeddings, as vLLM's)")
    chunk_size: int | None = Field(None, gt=0, le=MAX_TOKENS, description="chunked: prefill token budget per step "
                                                           "(default max_num_batched_tokens)")
    long_prefill_token_threshold: int = Field(0, ge=0, le=MAX_TOKENS, description="chunked: most tokens one "
                                              "request computes in a step while it has more left (0: no cap)")
    scheduler_reserve_full_isl: bool = Field(True, description="chunked: admit a prompt only if all of it fits "
                                                               "the free KV blocks, not just its first chunk")
    block_size: int = Field(16, gt=0, le=1_000_000, description="KV block size, tokens")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="share of device memory cosim may use")
    reserve_bytes: int = Field(0, ge=0, le=MAX_BYTES, description="per-device memory held back on top of what "
                               "vLLM's profiling charges (weights, activation peak, CUDA graphs, non-torch)")
    num_gpu_blocks: int | None = Field(None, gt=0, le=MAX_BLOCKS, description="KV blocks, overriding the memory "
                                       "computation (as vLLM counts them: one is its null block)")
    enforce_eager: bool = Field(False, description="vLLM --enforce-eager: no CUDA graphs, so none of their memory "
                                                   "is held back from the KV cache")
    memory_profiler_estimate_cudagraphs: bool = Field(
        True, description="vLLM's VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: hold the estimated CUDA-graph memory "
                          "back from the KV cache (on by default from vLLM 0.21; off by default in 0.19)")
    preemption: Literal["recompute", "swap"] = Field("recompute", description="what a preempted request loses")
    swap_space_bytes: int = Field(0, ge=0, le=MAX_BYTES, description="host memory for swapped KV; preemption: swap "
                                  "needs it above 0 (refused otherwise: with no room to swap to, swap would "
                                  "recompute every preempted request without a word)")
    host_bandwidth_gbps: float = Field(25.0, ge=MIN_GBPS, le=MAX_GBPS,
                                       description="device-host bandwidth for swapping, GB/s")
    enable_prefix_caching: bool = Field(False, description="reuse KV blocks of requests sharing a prefix")
    host_time: bool = Field(False, description="add the host (CPU) time vLLM V1 exposes per step "
                                               "(hub/sim/clients/host.py) to a backend that times GPU kernels "
                                               "only; off for backends whose times include host work")
    async_scheduling: bool | None = Field(
        None, description="vLLM's --async-scheduling: the next step is formed (and its host work done) while "
                          "this step runs, so a prompt queued meanwhile waits one step more; default: on with "
                          "chunked batching (vLLM V1, whose default it is), off with the whole-prompt policies "
                          "and with ngram or draft-model speculation")
    kv_offload: KVOffloadConfig | None = Field(
        None, description="vLLM's CPU KV offloading: a host tier of cpu_blocks blocks filled as blocks are "
                          "computed, read back on a prefix hit the GPU misses; optionally a storage tier "
                          "(docs/kv-offload.md). Needs enable_prefix_caching")
    profile_execution_mode: Literal["cuda_graph", "eager"] = Field(
        "cuda_graph", description="host_time: launch costs in the backend's step times: eager (wall times of "
                                  "eager forwards) or cuda_graph (graph replays, or kernel durations alone)")


    @property
    def forms_one_step_ahead(self) -> bool:
        """Whether steps are formed as vLLM's async scheduling forms them (``async_scheduling``, or by
        default with ``chunked`` batching: vLLM V1's engine, async by default since 0.13; V0's
        whole-prompt schedulers had none). A client's speculative decoding may turn the default off
        (:attr:`cosim.hub.config.sections.ClientConfig.forms_one_step_ahead`, what a run uses)."""
        return self.batching == "chunked" if self.async_scheduling is None else self.async_scheduling

    @model_validator(mode="after")
    def _check_offload_and_swap(self) -> SchedulerConfig:
        if self.kv_offload is not None and not self.enable_prefix_caching:
            raise FieldProblem("kv_offload", "vLLM's offloading finds blocks by their prefix-cache hashes: set "
                                             "enable_prefix_caching: true")
        if self.preemption == "swap" and self.swap_space_bytes == 0:
            raise FieldProblem("swap_space_bytes", "preemption: swap needs host memory to swap to; give "
                                                   "swap_space_bytes (vLLM V0's default was 4 GiB, 4294967296), "
                                                   "or use preemption: recompute")
        return self


class LoraConfig(FrozenModel):
    """A client's LoRA serving (vLLM's ``--enable-lora``; docs/lora.md)."""

    max_loras: int = Field(1, gt=0, le=4096, description="vLLM --max-loras: GPU slots, the most distinct adapters "
                                                         "one step holds (vLLM's default 1)")
    max_lora_rank: int = Field(16, gt=0, le=4096, description="vLLM --max-lora-rank: the largest rank served; each "
                                                              "slot is sized for it (vLLM's default 16)")
    max_cpu_loras: int | None = Field(None, gt=0, le=1_000_000,
                                      description="vLLM --max-cpu-loras: adapters cached in host memory (>= "
                                                  "max_loras); one not cached is read from disk. Default max_loras")
    host_to_device_gbps: float | None = Field(
        None, ge=MIN_GBPS, le=MAX_GBPS, description="host-to-device copy of an adapter, GB/s; default the "
                                                    "scheduler's host_bandwidth_gbps")
    # A PCIe 3.0 x4 NVMe drive's sequential read, 3.5 GB/s (Samsung 970 EVO Plus data sheet).
    disk_to_host_gbps: float = Field(3.5, ge=MIN_GBPS, le=MAX_GBPS,
                                     description="disk read of an adapter the host cache lacks, GB/s")

    @model_validator(mode="after")
    def _check_cache(self) -> LoraConfig:
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras}), "
                             "as vLLM requires")
        return self
