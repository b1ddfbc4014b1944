"""The host time vLLM V1 exposes per step (hub/sim/clients/host.py), computed by hand."""

from __future__ import annotations

from cosim.hub.config.scheduler import SchedulerConfig
from cosim.hub.sim.clients.host import HostTime
from tests.scenarios.helpers import client, run_with_trace, scenario

# Llama-3 8B: 32 layers, so 10 x 32 + 4 = 324 kernels per forward.
KERNELS = 324
WORK = 200_000 + 180_000 + 50_000  # schedule + _update_states + _prepare_inputs, per step
PER_SEQ = 1_130  # update_from_output
EAGER_LAUNCH, REPLAY, EAGER_EXTRA = 3_490, 1_648, 1_459


def test_async_hides_the_host_work_behind_a_longer_gpu_step() -> None:
    """128 decodes, 10 ms of GPU: the next step's 0.58 ms of host work fits behind it."""
    host = HostTime(num_layers=32)
    assert host.exposed_ns([1] * 128, 10_000_000) == 0


def test_sync_exposes_all_host_work() -> None:
    """Synchronous scheduling waits for the step, then schedules and prepares the next."""
    host = HostTime(num_layers=32, async_scheduling=False)
    assert host.exposed_ns([1] * 128, 10_000_000) == WORK + PER_SEQ * 128  # 574,640; the replay is hidden


def test_async_exposes_what_the_gpu_step_cannot_hide() -> None:
    """One decode of 0.2 ms GPU: host work 431,130 + one FULL-graph replay 1,648 exceed it."""
    host = HostTime(num_layers=32)
    assert host.exposed_ns([1], 200_000) == WORK + PER_SEQ + REPLAY - 200_000  # 232,778


def test_eager_adds_device_time_per_kernel_and_launches_every_kernel() -> None:
    """enforce_eager: 324 kernels cost 1,459 ns more each on the GPU; their 1.13 ms launch hides under 10 ms."""
    extra = KERNELS * EAGER_EXTRA  # 472,716
    async_host = HostTime(num_layers=32, enforce_eager=True)
    assert async_host.exposed_ns([1] * 64, 10_000_000) == extra
    sync_host = HostTime(num_layers=32, enforce_eager=True, async_scheduling=False)
    assert sync_host.exposed_ns([1] * 64, 10_000_000) == extra + WORK + PER_SEQ * 64  # 975,036


def test_eager_launch_bound_step_is_as_long_as_its_launches() -> None:
    """Sync, eager, 0.5 ms of kernels: launching 324 kernels (1,130,760 ns) outlasts them (972,716 ns)."""
    host = HostTime(num_layers=32, enforce_eager=True, async_scheduling=False)
    device = 500_000 + KERNELS * EAGER_EXTRA
    launch = KERNELS * EAGER_LAUNCH
    assert host.exposed_ns([1], 500_000) == (device - 500_000) + WORK + PER_SEQ + (launch - device)  # 1,061,890


def test_mixed_batch_runs_piecewise_graphs_with_eager_attention() -> None:
    """A prefill chunk with decodes: 33 piecewise replays, 64 attention ops launched eagerly between them."""
    host = HostTime(num_layers=32)
    assert host.launch([100, 1, 1]) == (33 * REPLAY + 64 * EAGER_LAUNCH, 64)  # (277,744, 64)
    assert host.exposed_ns([100, 1, 1], 10_000_000) == 64 * EAGER_EXTRA  # 93,376


def test_batch_above_the_largest_capture_size_runs_eager() -> None:
    host = HostTime(num_layers=32, max_graph_tokens=512)
    assert host.launch([400, 200]) == (KERNELS * EAGER_LAUNCH, KERNELS)
    assert host.launch([1] * 512) == (REPLAY, 0)


def test_eager_profile_applied_to_a_graph_run_loses_the_eager_launch_cost() -> None:
    """A backend timing eager forwards, a FULL-graph decode: 324 x 1,459 ns less device time."""
    host = HostTime(num_layers=32, profile_eager=True)
    assert host.exposed_ns([1] * 8, 10_000_000) == -KERNELS * EAGER_EXTRA  # -472,716
    eager_run = HostTime(num_layers=32, profile_eager=True, enforce_eager=True)
    assert eager_run.exposed_ns([1] * 8, 10_000_000) == 0  # same mode: nothing to correct, launches hidden


def test_config_builds_the_model_only_when_asked() -> None:
    assert HostTime.from_config(SchedulerConfig(), 32) is None
    host = HostTime.from_config(SchedulerConfig(host_time=True, max_num_seqs=128, max_num_batched_tokens=2048,
                                                async_scheduling=False, profile_execution_mode="eager"), 32)
    assert host == HostTime(num_layers=32, async_scheduling=False, max_graph_tokens=256, profile_eager=True)


def test_async_scheduling_lowers_tpot_against_sync(tmp_path) -> None:
    """Two 100-token prompts, 3 output tokens, 2 ms per step on the linear backend, vLLM V1 host time.

    Async: the prefill step (PIECEWISE) gains 64 eager attention ops, 64 x 1,459 ns; every host cost hides
    behind 2 ms; decodes (FULL graph) take 2 ms. Sync adds the host work of 2 sequences to every step.
    """
    work = WORK + 2 * PER_SEQ  # 432,260
    prefill = 2_000_000 + 64 * EAGER_EXTRA  # 2,093,376
    results = {}
    for mode in (True, False):
        config = scenario(clients=[client(host_time=True, async_scheduling=mode)], step_ns=2_000_000)
        records = run_with_trace(config, [(0, 100, 3), (0, 100, 3)], tmp_path)
        results[mode] = [(r.first_token_ns - r.arrival_ns, (r.finish_ns - r.first_token_ns) // 2) for r in records]
    assert results[True] == [(prefill, 2_000_000)] * 2
    assert results[False] == [(prefill + work, 2_000_000 + work)] * 2
