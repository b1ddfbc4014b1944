"""Host (CPU) time a step exposes on top of its GPU time, as vLLM V1 spends it.

A runtime backend that times GPU kernels (the profile-bundle regression
backend: kineto kernel durations) leaves out what the CPU does around each
forward. vLLM V1 spends it in one engine-core thread (with the ``uni``
executor the model runner runs in it too):

- **host work** ``W``: ``Scheduler.schedule()``, the model runner's
  ``_update_states`` and ``_prepare_inputs`` (persistent batch, numpy), and
  ``Scheduler.update_from_output()`` per sequence. Detokenization and
  streaming run in the front-end process and overlap the loop (V1's split of
  ``EngineCore`` from ``AsyncLLM``), so they are not here.
- **kernel launch** ``L``: with CUDA graphs (vLLM 0.19's default,
  ``FULL_AND_PIECEWISE``) a decode-only batch replays one FULL graph; a mixed
  batch replays one PIECEWISE graph per layer boundary and launches the
  attention ops (vLLM's ``splitting_ops``) eagerly between them; a batch of
  more tokens than the largest captured size, or any batch under
  ``enforce_eager``, launches every kernel on its own.

How much of ``W + L`` a step exposes depends on the engine loop:

- **async scheduling** (``EngineCore.step_with_batch_queue`` with a batch
  queue of 2, ``AsyncScheduler``): step N+1 is scheduled, prepared and
  launched while step N runs on the GPU, and N's output is applied after
  N+1 is queued, so the loop's period is ``max(G, W + L)``: exposed
  ``max(0, W + L - G)``;
- **synchronous** (``EngineCore.step``): schedule, then execute (the launch
  overlaps the kernels it queues), then wait and apply the output, so the
  period is ``W + max(G, L)``: exposed ``W + max(0, L - G)``.

The host work that overlaps step N is that of its neighbours; it is taken
from N's own batch (in a decode run consecutive batches hold the same
sequences), which keeps the answer a pure function of the batch, as the step
timer's decode runs and lookahead require. The first step after the engine
was idle has nothing to hide behind; that is not modelled.

Execution mode also changes device time: an eager kernel costs about 1.46 us
more on the GPU than the same kernel replayed inside a graph. A backend's
times that already include eager launches (``profile_execution_mode:
eager``: wall times of eager forwards) are corrected for the kernels the run
replays from graphs; kernel-duration profiles (LLMServingSim's bundles are
kineto kernel durations: their ``enforce_eager: true`` names the mode the
kernels ran in, not a launch cost in the times) count as graph-mode device
time and gain the eager cost for the kernels the run launches eagerly.

Every constant names the measurement it comes from (docs/validation.md,
"Host time"). Main name: :class:`HostTime`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...config.memory import MAX_CUDAGRAPH_CAPTURE_SIZE
from ...config.scheduler import SchedulerConfig

# -- host work of one step (vLLM V1, GPU model runner) ---------------------------------------------
# Scheduler.schedule() per decode step, "0.2ms -> 0.04ms" with a decode fast path: vLLM PR #42131
# ("Decode fast path for scheduler and model runner", measured on a B200 host). The PR gives no batch
# size, so the figure stands as a per-step cost.
SCHEDULE_STEP_NS = 200_000
# GPUModelRunner._update_states per step: its fast path "saves ~0.18ms" (same PR).
UPDATE_STATES_STEP_NS = 180_000
# GPUModelRunner._prepare_inputs per step: the decode-only path "saves ~0.05ms" (same PR): a lower bound.
PREPARE_INPUTS_STEP_NS = 50_000
# Scheduler.update_from_output() per decode sequence: 0.142 ms at batch 128, 0.287 ms at 256 (vLLM's
# benchmarks/overheads/benchmark_scheduler_update_from_output.py, medians at the merge base, vLLM PR
# #46112): (0.287 - 0.142) ms / 128 = 1.13 us, with no fixed part to speak of (0.142 ms / 128 = 1.11 us).
UPDATE_FROM_OUTPUT_SEQ_NS = 1_130
# Per computed token: V1 builds token-level inputs with vectorized numpy (persistent batch) and its
# prefix-cache block hashing costs "less than 1% decrease in throughput even when the cache hit rate is
# 0%" (vLLM blog, "vLLM V1: A Major Upgrade to vLLM's Core Architecture", 2025-01-27). No V1
# measurement resolves a per-token cost beyond that, so it is 0.
HOST_TOKEN_NS = 0

# -- kernel launch (one A100 SXM4 with an AMD EPYC host; openfabric-systems/simllm,
# examples/a100_graph_launch_v1/RESULTS.md: the K = 256 cells, whose run-to-run CV is 0.01-0.43%,
# cross-checked within 1.5% by independent harnesses; the study's stricter guard on short chains
# marked the run void, so these are retained evidence, not an installed profile) -------------------
# Host cost of one eager kernel launch: the mixed GEMM/null chain's slope, 3.4897 us per launch
# (cuBLAS host work included; PyTorch's dispatcher adds more, so this is a lower bound).
EAGER_LAUNCH_NS = 3_490
# Host cost of one CUDA-graph replay, flat in its kernels: 1,647,674 ps at K = 64.
GRAPH_REPLAY_NS = 1_648
# Device time one kernel costs more launched eagerly than replayed in a graph: P_eager - P_graph =
# 1.4567, 1.4150 and 1.5063 us for three GEMMs ("Quantity 1"); their mean.
EAGER_KERNEL_EXTRA_NS = 1_459

# -- kernels of one forward (dense decoder) ------------------------------------------------------------
# One block of LLMServingSim's profiler/models/llama.yaml: RMSNorm, qkv_proj, rotary_emb, attention,
# o_proj, RMSNorm, gate_up_proj, act_fn, down_proj (9 modules, one kernel each), plus vLLM's KV-cache
# write, a separate op (vllm::unified_kv_cache_update in the RTX 4090 run's resolved splitting_ops).
KERNELS_PER_LAYER = 10
# The ops PIECEWISE graphs leave out and launch eagerly: vllm::unified_kv_cache_update and
# vllm::unified_attention_with_output (the same splitting_ops).
ATTENTION_KERNELS_PER_LAYER = 2
# Outside the blocks: embedding, final RMSNorm, lm_head, sampler (llama.yaml's prologue and head).
KERNELS_OUTSIDE_LAYERS = 4


@dataclass(frozen=True)
class HostTime:
    """The host time vLLM V1 exposes per step (see the module docstring).

    Args:
        num_layers: decoder layers the client runs (its pipeline stage's share).
        async_scheduling: vLLM's ``--async-scheduling`` (the 0.19 default on GPUs).
        enforce_eager: vLLM's ``--enforce-eager``: no CUDA graphs.
        max_graph_tokens: the largest batch (tokens) with a captured graph.
        profile_eager: the backend's step times already include eager launches.
    """

    num_layers: int
    async_scheduling: bool = True
    enforce_eager: bool = False
    max_graph_tokens: int = MAX_CUDAGRAPH_CAPTURE_SIZE
    profile_eager: bool = False

    @classmethod
    def from_config(cls, scheduler: SchedulerConfig, num_layers: int, *,
                    async_scheduling: bool | None = None) -> HostTime | None:
        """The model of a client's scheduler section; None when ``host_time`` is off.
        ``async_scheduling``: the client's (``ClientConfig.forms_one_step_ahead``); None: the
        section's own default."""
        if not scheduler.host_time:
            return None
        # vLLM's default largest capture: min(2 x max_num_seqs, 512, max_num_batched_tokens).
        largest = min(2 * scheduler.max_num_seqs, MAX_CUDAGRAPH_CAPTURE_SIZE, scheduler.max_num_batched_tokens)
        if async_scheduling is None:
            async_scheduling = scheduler.forms_one_step_ahead
        return cls(num_layers=num_layers, async_scheduling=async_scheduling,
                   enforce_eager=scheduler.enforce_eager, max_graph_tokens=largest,
                   profile_eager=scheduler.profile_execution_mode == "eager")

    @property
    def num_kernels(self) -> int:
        """Kernels of one forward."""
        return KERNELS_PER_LAYER * self.num_layers + KERNELS_OUTSIDE_LAYERS

    def work_ns(self, num_seqs: int, num_tokens: int) -> int:
        """Host work of a step: scheduling, input preparation and output update."""
        return (SCHEDULE_STEP_NS + UPDATE_STATES_STEP_NS + PREPARE_INPUTS_STEP_NS
                + UPDATE_FROM_OUTPUT_SEQ_NS * num_seqs + HOST_TOKEN_NS * num_tokens)

    def launch(self, num_new: Sequence[int]) -> tuple[int, int]:
        """(host launch time, kernels launched eagerly) of a batch, by the graph vLLM dispatches it to."""
        layers = self.num_layers
        if self.enforce_eager or sum(num_new) > self.max_graph_tokens:
            return self.num_kernels * EAGER_LAUNCH_NS, self.num_kernels
        if max(num_new) == 1:  # uniform decode: one FULL graph
            return GRAPH_REPLAY_NS, 0
        eager = ATTENTION_KERNELS_PER_LAYER * layers  # PIECEWISE: the attention ops run between the pieces
        return (layers + 1) * GRAPH_REPLAY_NS + eager * EAGER_LAUNCH_NS, eager

    def exposed_ns(self, num_new: Sequence[int], gpu_ns: int) -> int:
        """What to add to a step's GPU time ``gpu_ns``: the execution-mode correction of the device
        time and the host time the engine loop does not hide behind it (may be < 0 only when the
        backend's times include eager launches the run does not make).

        Args:
            num_new: tokens each sequence computes in the step.
            gpu_ns: the runtime backend's time of the step.
        """
        if not num_new:
            return 0
        launch_ns, eager_kernels = self.launch(num_new)
        profiled_eager = self.num_kernels if self.profile_eager else 0
        device_ns = max(0, gpu_ns + (eager_kernels - profiled_eager) * EAGER_KERNEL_EXTRA_NS)
        work = self.work_ns(len(num_new), sum(num_new))
        if self.async_scheduling:
            exposed = max(0, work + launch_ns - device_ns)
        else:
            exposed = work + max(0, launch_ns - device_ns)
        return device_ns - gpu_ns + exposed
