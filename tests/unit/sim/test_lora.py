"""LoRA serving: the max_loras cap and vLLM's skip in admission, the slot and host caches, adapter
sizes and the KV they take, the workload's adapters, config checks, and the roofline's LoRA term."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cosim_core import DecodeRun

from cosim.adapters.roofline.backend import open_model
from cosim.adapters.roofline.estimator import estimate
from cosim.adapters.roofline.operators import batch_stats, lora_adapters
from cosim.hub.config.choices import BATCHING
from cosim.hub.config.loading import parse_config
from cosim.hub.config.memory import lora_adapter_bytes
from cosim.hub.config.presets import get_model
from cosim.hub.config.resolve import device_spec, kv_memory_of
from cosim.hub.config.scheduler import SchedulerConfig
from cosim.hub.config.sections import ClientConfig
from cosim.hub.errors import ScenarioError
from cosim.hub.sim.records import RequestRecord, StageRecord
from cosim.hub.sim.scheduling import BlockManager, ScheduledBatch, Scheduler, Sequence
from cosim.hub.sim.scheduling.lora import LoraSlots, LoraSpec, LoraStats
from cosim.hub.sim.workload import generate_requests, parse_workload
from cosim.hub.timing.step_timer import predict
from cosim.v1 import types_pb2 as pb

LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"


def spec(max_loras: int = 2, max_cpu_loras: int = 4) -> LoraSpec:
    # 1000 bytes per rank on the device, 4000 in all; 10 GB/s to the device, 2 GB/s from disk
    return LoraSpec(max_loras=max_loras, max_cpu_loras=max_cpu_loras, device_bytes_per_rank=1000,
                    host_bytes_per_rank=4000, host_to_device_gbps=10.0, disk_to_host_gbps=2.0)


def scheduler(max_loras: int = 2, **config: Any) -> Scheduler:
    return Scheduler(SchedulerConfig(block_size=4, **config), BlockManager(1000, 4),
                     lora=LoraSlots(spec(max_loras, max(max_loras, 4))))


def seq(prompt: int, output: int, rid: int, lora: str | None, rank: int = 8) -> Sequence:
    request = RequestRecord(id=rid, model="m", arrival_ns=0, input_tokens=prompt, output_tokens=output,
                            lora=lora, lora_rank=rank if lora else 0)
    return Sequence(request, StageRecord(kind="prefill", client="c", enqueue_ns=0), num_tokens=prompt,
                    num_computed=0, target_generated=output)


def adapters(batch: ScheduledBatch) -> set[str]:
    return {s.request.lora for s in batch.seqs if s.request.lora is not None}


# -- the slot cache -------------------------------------------------------------

def test_a_load_takes_the_least_recently_used_idle_slot_and_reads_disk_on_a_host_miss() -> None:
    slots = LoraSlots(spec(max_loras=2, max_cpu_loras=3))
    first = slots.activate("a", 8, busy=set())
    assert first is not None and (first.slot, first.evicted, first.from_disk) == (0, None, True)
    # rank 8: 8 x 1000 B / 10 GB/s + 8 x 4000 B / 2 GB/s = 800 + 16,000 ns
    assert first.load_ns == 800 + 16_000
    assert slots.activate("b", 8, busy={"a"}) is not None
    assert slots.activate("a", 8, busy={"a", "b"}) is None  # resident: a hit
    slots.touch(["b", "a"])  # a step used b, then a: b is now the older
    load = slots.activate("c", 8, busy={"a"})  # b is older but a is busy anyway: b goes
    assert load is not None and (load.evicted, load.slot, load.from_disk) == ("b", 1, True)
    load = slots.activate("b", 4, busy={"c"})  # a is idle: evicted; b is still in host memory
    assert load is not None and (load.evicted, load.from_disk, load.load_ns) == ("a", False, 400)
    assert list(slots.host) == ["a", "c", "b"]  # a fourth adapter drops a (the LRU not in a slot) from host
    slots.activate("d", 4, busy={"b"})
    assert "a" not in slots.host and set(slots.resident) == {"b", "d"}


def test_stats_count_loads_disk_reads_evictions_hits_and_time() -> None:
    s = scheduler(max_loras=1, batching="continuous")
    s.add(seq(8, 2, 0, "a"))
    s.add(seq(8, 2, 1, "a"))
    batch = s.schedule()
    stats = LoraStats()
    assert batch.lora is not None
    stats.record(batch.lora)
    assert stats.summary() == {"loads": 1, "disk_loads": 1, "evictions": 0, "hits": 1,
                               "load_time_s": (800 + 16_000) / 1e9}
    assert batch.lora.load_ns == 16_800


# -- admission ------------------------------------------------------------------

@pytest.mark.parametrize("batching", list(BATCHING))
def test_no_step_holds_more_adapters_than_slots(batching: str) -> None:
    """Twelve requests over five adapters (and the base model) through two slots: every step, and
    every running set, holds at most two adapters; the steps lookahead predicts agree."""
    s = scheduler(max_loras=2, batching=batching, max_num_seqs=6, chunk_size=16)
    names = ["a", "b", None, "c", "a", "d", "e", "b", None, "c", "e", "a"]
    for i, name in enumerate(names):
        s.add(seq(6 + i % 5, 2 + i % 4, i, name))
    steps = 0
    while s.has_work:
        batch = s.schedule()
        assert batch.seqs
        assert len(adapters(batch)) <= 2
        assert len({x.request.lora for x in s.running if x.request.lora}) <= 2
        if batch.lora is not None:
            assert len(set(batch.lora.ids) - {0}) == len(adapters(batch))
            assert batch.signature[2:] == (("lora_ranks", batch.lora.ranks), ("lora_ids", batch.lora.ids))
        predicted = predict(s, batch, 4)
        s.update(batch)
        nxt = s.copy().schedule() if s.has_work else None
        if predicted and nxt is not None and nxt.seqs:
            assert predicted[0] == nxt.signature  # lookahead carries the same adapters
        steps += 1
    assert steps > len(names) // 2


def test_a_request_over_the_cap_is_skipped_and_later_ones_are_admitted() -> None:
    s = scheduler(max_loras=1, batching="continuous")
    s.add(seq(8, 3, 0, "a"))
    s.add(seq(8, 3, 1, "b"))  # would be a second adapter: skipped, keeps its place
    s.add(seq(8, 3, 2, None))  # the base model needs no slot
    s.add(seq(8, 3, 3, "a"))
    batch = s.schedule()
    assert [x.request.id for x in batch.seqs] == [0, 2, 3]
    assert [x.request.id for x in s.waiting] == [1]
    assert batch.lora is not None and batch.lora.ranks == (8, 0, 8) and batch.lora.ids == (1, 0, 1)
    assert [load.name for load in batch.lora.loads] == ["a"] and batch.lora.hits == 1
    s.update(batch)
    while s.running:  # b waits for a's last sequence to leave
        batch = s.schedule()
        assert 1 not in [x.request.id for x in batch.seqs]
        s.update(batch)
    batch = s.schedule()
    assert [x.request.id for x in batch.seqs] == [1]
    assert batch.lora is not None and [(x.name, x.evicted) for x in batch.lora.loads] == [("b", "a")]


def test_the_copy_schedules_the_same_loads_without_touching_the_original() -> None:
    s = scheduler(max_loras=1, batching="chunked", chunk_size=64)
    s.add(seq(8, 3, 0, "a"))
    copy = s.copy()
    batch = copy.schedule()
    assert batch.lora is not None and len(batch.lora.loads) == 1
    assert not s.lora.resident  # type: ignore[union-attr]
    assert s.schedule().signature == batch.signature


def test_a_decode_run_carries_its_adapters() -> None:
    s = scheduler(max_loras=2, batching="continuous")
    s.add(seq(8, 6, 0, "a"))
    s.add(seq(8, 6, 1, "b"))
    batch = s.schedule()
    outcome = s.update(batch)
    run = DecodeRun.start(s, batch, outcome)
    assert run is not None and run.lora is not None and run.lora.ids == (1, 2)
    assert run.signatures(1)[0][2:] == (("lora_ranks", (8, 8)), ("lora_ids", (1, 2)))
    assert run.step().lora is run.lora


# -- sizes and memory -------------------------------------------------------------

def test_adapter_bytes_by_hand() -> None:
    model = get_model(LLAMA3_8B)
    # per layer: q (4096 + 4096) + k, v 2 x (4096 + 1024) + o (4096 + 4096) + gate, up 2 x (4096 + 14336)
    # + down (14336 + 4096) = 81,920; x rank 16 x 32 layers x 2 bytes
    assert lora_adapter_bytes(model, 16) == 16 * 81_920 * 32 * 2 == 83_886_080
    # TP 2: column-parallel B and row-parallel A halve: q (4096 + 2048) + k, v 2 x (4096 + 512)
    # + o (2048 + 4096) + gate, up 2 x (4096 + 7168) + down (7168 + 4096) = 55,296
    assert lora_adapter_bytes(model, 16, tensor_parallel=2) == 16 * 55_296 * 32 * 2
    assert lora_adapter_bytes(model, 16, pipeline_parallel=2) == 16 * 81_920 * 16 * 2


def test_kv_capacity_shrinks_by_the_slots_bytes() -> None:
    config = parse_config({
        "models": {"m": {"preset": LLAMA3_8B}}, "hardware": {"h": {"preset": "H100-SXM"}},
        "backends": {"r": {"kind": "roofline"}},
        "clients": [{"name": "c", "model": "m", "backend": "r", "hardware": {"device": "h"}}],
        "workload": {"requests": 1, "arrival": {"process": "constant"},
                     "input_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 8}}})
    plain = config.clients[0]
    with_lora = ClientConfig.model_validate({**plain.model_dump(), "lora": {"max_loras": 4, "max_lora_rank": 64}})
    model = get_model(LLAMA3_8B)
    hardware = device_spec(config, "h", 1, "bf16")
    before, after = (kv_memory_of(c, model, hardware, "clients[0]") for c in (plain, with_lora))
    slots = 4 * 64 * 81_920 * 32 * 2  # max_loras x an adapter of max_lora_rank
    assert after.lora_bytes == slots
    assert before.kv_bytes - after.kv_bytes == slots
    assert after.num_blocks == after.kv_bytes // after.block_bytes < before.num_blocks
    assert "lora_bytes" not in before.as_dict() and after.as_dict()["lora_bytes"] == slots


# -- workload ---------------------------------------------------------------------

def workload(**lora: Any) -> dict[str, Any]:
    return {"requests": 20_000, "arrival": {"process": "poisson", "rate_per_s": 10},
            "input_tokens": {"dist": "uniform", "low": 10, "high": 100},
            "output_tokens": {"dist": "fixed", "value": 4}, **({"lora": lora} if lora else {})}


def test_requests_name_adapters_by_share_and_zipf_popularity_without_moving_other_draws() -> None:
    plain = generate_requests(parse_workload(workload()), np.random.default_rng(3), base_dir=Path("."))
    specs = generate_requests(parse_workload(workload(adapters=4, rank=8, distribution="zipf", zipf_s=1.5,
                                                      share=0.75)),
                              np.random.default_rng(3), base_dir=Path("."))
    assert [(s.arrival_ns, s.input_tokens) for s in specs] == [(s.arrival_ns, s.input_tokens) for s in plain]
    assert all(s.lora is None and s.lora_rank == 0 for s in plain)
    named = [s.lora for s in specs if s.lora is not None]
    assert abs(len(named) / len(specs) - 0.75) < 0.02
    counts = [named.count(f"lora-{k}") for k in range(4)]
    weights = 1 / np.arange(1, 5) ** 1.5
    assert counts == sorted(counts, reverse=True)
    assert np.allclose(np.array(counts) / len(named), weights / weights.sum(), atol=0.02)
    assert {s.lora_rank for s in specs if s.lora} == {8}


def test_a_trace_column_names_the_adapters(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens,adapter\n0,10,2,sql\n1,10,2,\n2,10,2,chat\n")
    config = parse_workload({"trace": {"path": str(trace), "format": "csv", "lora_column": "adapter"},
                             "arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"},
                             "output_tokens": {"dist": "trace"},
                             "lora": {"adapters": [{"name": "sql", "rank": 32}], "rank": 8}})
    specs = generate_requests(config, np.random.default_rng(0), base_dir=tmp_path)
    assert [(s.lora, s.lora_rank) for s in specs] == [("sql", 32), (None, 0), ("chat", 8)]


# -- config -----------------------------------------------------------------------

def scenario(client_lora: dict[str, Any] | None, **lora: Any) -> dict[str, Any]:
    client: dict[str, Any] = {"name": "c", "model": "m", "backend": "r", "hardware": {"device": "h"}}
    if client_lora is not None:
        client["lora"] = client_lora
    return {"models": {"m": {"preset": LLAMA3_8B}}, "hardware": {"h": {"preset": "H100-SXM"}},
            "backends": {"r": {"kind": "roofline"}}, "clients": [client], "workload": workload(**lora)}


def test_config_refuses_adapters_a_client_cannot_serve() -> None:
    with pytest.raises(ScenarioError, match=r"clients\[0\]\.lora: requests name LoRA adapters"):
        parse_config(scenario(None, adapters=2))
    with pytest.raises(ScenarioError, match=r"max_lora_rank: 16 is below the rank 64"):
        parse_config(scenario({"max_loras": 2}, adapters=[{"name": "x", "rank": 64}]))
    with pytest.raises(ScenarioError, match=r"max_cpu_loras \(1\) must be >= max_loras \(2\)"):
        parse_config(scenario({"max_loras": 2, "max_cpu_loras": 1}, adapters=2))
    assert parse_config(scenario({"max_loras": 2, "max_lora_rank": 64}, adapters=[{"name": "x", "rank": 64}]))


# -- the roofline's LoRA term -------------------------------------------------------

def test_a_mixed_adapter_batch_costs_one_more_adapter_weights_read_per_layer() -> None:
    """Two decodes on one rank-16 adapter, then on two: the SGMV's FLOPs and token traffic are the
    same, and the second adapter's A and B are read once more per module in every layer. Worked at
    BestServe's decode memory rate (mbu x bandwidth): pinned to profile: bestserve, the per-phase
    model the fitted default replaced (docs/roofline.md), so the arithmetic below stays the same."""
    spec = pb.SessionSpec(
        model=get_model(LLAMA3_8B).to_model_spec(),
        hardware=pb.HardwareSpec(device="H100-SXM", count=1, peak_tflops=989.0, mem_bandwidth_gbps=3350.0),
        parallelism=pb.Parallelism(tensor=1))
    spec.options.update({"profile": "bestserve"})
    model = open_model(spec)
    base = batch_stats([1, 1], [500, 700])
    single = base._replace(lora=lora_adapters([1, 1], [16, 16], [1, 1]))
    mixed = base._replace(lora=lora_adapters([1, 1], [16, 16], [1, 2]))
    assert single.lora == ((16, 2.0),) and mixed.lora == ((16, 1.0), (16, 1.0))
    t_base, t_single, t_mixed = (estimate(model, b).duration_ns for b in (base, single, mixed))
    assert t_base < t_single < t_mixed
    # memory bound: one adapter's weights, 16 x (26,624 attention + 55,296 MLP) x 2 bytes per layer,
    # at the decode memory rate, over 32 layers (the step is device bound, so layers add up)
    rate = model.params.decode.mbu * model.device.mem_bw
    extra_ns = 32 * 2 * 16 * (26_624 + 55_296) / rate * 1e9
    assert abs((t_mixed - t_single) - extra_ns) <= 1
