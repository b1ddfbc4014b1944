"""cosim's scheduler against vLLM V1's, step by step, on golden traces of the real one.

Each ``vllm/*.json`` case (recorded from vLLM 0.19.1 by ``scripts/vllm_conformance.py``; the format is
in ``vllm/README.md``) is replayed through a :class:`Scheduler` as vLLM's engine was driven: the
requests due at step *s* are added, then ``schedule()``, then ``update()``. Every step must schedule
the same requests in the same order, each with the same context and new tokens, preempt the same
requests, and leave the same running and waiting queues.

The mapping: cosim's KV blocks are vLLM's usable blocks (vLLM keeps one as its null block);
``enable_chunked_prefill`` is ``chunked`` batching with ``max_num_batched_tokens`` as the budget,
and without it ``mixed`` (running decodes plus whole prompts that fit); vLLM's trailing empty step
(it reports the finished ids with one more ``schedule()``) is no scheduling decision and is dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cosim.hub.config.scheduler import SchedulerConfig
from cosim.hub.sim.records import RequestRecord, StageRecord
from cosim.hub.sim.scheduling import BlockManager, ScheduledBatch, Scheduler, Sequence

GOLDENS = Path(__file__).parent / "vllm"
CASES = sorted(path.stem for path in GOLDENS.glob("*.json"))


def load(case: str) -> dict[str, Any]:
    golden: dict[str, Any] = json.loads((GOLDENS / f"{case}.json").read_text())
    return golden


def scheduler(config: dict[str, Any]) -> Scheduler:
    """A scheduler set up as the golden's vLLM one (the settings cosim has no counterpart for must
    be the ones it behaves as)."""
    assert (config["policy"], config["preemption_mode"], config["async_scheduling"],
            config["num_lookahead_tokens"], config["max_num_partial_prefills"]) == ("fcfs", "recompute", False, 0, 1)
    blocks, block_size = config["num_usable_blocks"], config["block_size"]
    caching = config["enable_prefix_caching"]
    scheduler_config = SchedulerConfig(
        batching="chunked" if config["enable_chunked_prefill"] else "mixed",
        max_num_seqs=config["max_num_seqs"], max_num_batched_tokens=config["max_num_scheduled_tokens"],
        block_size=block_size, num_gpu_blocks=blocks, enable_prefix_caching=caching,
        long_prefill_token_threshold=config["long_prefill_token_threshold"],
        scheduler_reserve_full_isl=config["scheduler_reserve_full_isl"], async_scheduling=False)
    return Scheduler(scheduler_config, BlockManager(blocks, block_size, enable_prefix_caching=caching))


def sequence(index: int, request: dict[str, Any]) -> Sequence:
    prompt, output = request["prompt_len"], request["max_tokens"]
    record = RequestRecord(id=index, model="m", arrival_ns=0, input_tokens=prompt, output_tokens=output,
                           prompt_token_ids=request["prompt_token_ids"])
    return Sequence(record, StageRecord(kind="prefill", client="c", enqueue_ns=0), num_tokens=prompt,
                    num_computed=0, target_generated=output)


def cosim_step(s: Scheduler, batch: ScheduledBatch, names: list[str]) -> dict[str, Any]:
    """A step of ``s`` in the golden's terms, read after ``batch`` was updated."""
    return {
        "scheduled": [(names[seq.request.id], context, num)
                      for seq, num, context in zip(batch.seqs, batch.num_new, batch.context)],
        "preempted": [names[seq.request.id] for seq in batch.preempted],
        "running_after": [names[seq.request.id] for seq in s.running],
        "waiting_after": [names[seq.request.id] for seq in s.waiting],
    }


def vllm_step(step: dict[str, Any]) -> dict[str, Any]:
    return {
        "scheduled": [(x["req_id"], x["num_computed_tokens"], x["num_scheduled_tokens"]) for x in step["scheduled"]],
        "preempted": step["preempted"],
        "running_after": step["running_after"],
        "waiting_after": step["waiting_after"],
    }


@pytest.mark.parametrize("case", CASES)
def test_scheduler_matches_vllm_step_by_step(case: str) -> None:
    """Same requests, context, new tokens, preemptions and queues at every step as vLLM's V1 scheduler."""
    golden = load(case)
    s = scheduler(golden["config"])
    names = [request["id"] for request in golden["requests"]]
    steps = golden["steps"]
    while steps and not steps[-1].get("idle") and steps[-1]["num_scheduled_tokens"] == 0:
        steps = steps[:-1]  # vLLM's engine, not its scheduler: the finished ids go out with one more schedule()
    for step in steps:
        for index, request in enumerate(golden["requests"]):
            if request["arrival_step"] == step["step"]:
                s.add(sequence(index, request))
        if step.get("idle"):
            assert not s.has_work, f"step {step['step']}: vLLM held no request"
            continue
        batch = s.schedule()
        s.update(batch)
        assert cosim_step(s, batch, names) == vllm_step(step), f"step {step['step']}"
    assert not s.has_work
