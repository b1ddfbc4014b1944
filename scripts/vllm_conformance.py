"""Records golden traces of vLLM's V1 scheduler, for conformance tests of cosim's scheduler.

Regenerate (from the repository root, with a Python that has vLLM installed, not cosim's venv)::

    python3 -m venv /work/vllm-env && /work/vllm-env/bin/pip install vllm==0.19.1
    /work/vllm-env/bin/python scripts/vllm_conformance.py [CASE ...] [--out DIR]

No GPU and no model weights are needed: the model config is a tiny Llama-like ``config.json`` written
to a temporary folder (tokenizer skipped), the KV cache is a count of blocks (``num_gpu_blocks``), and
no model runs. Each named case (``CASES``) adds its requests to a real vLLM V1 ``Scheduler``
(``vllm.v1.core.sched.scheduler``) and drives it as vLLM's ``EngineCore.step`` does with synchronous
scheduling: before step ``s`` the requests arriving at ``s`` are added (``add_request``); then
``schedule()``; then a ``ModelRunnerOutput`` that gives one sampled token (always
``SAMPLED_TOKEN_ID``) to each scheduled request whose computed tokens reach its known tokens in that
step (a prefill's last chunk, a decode) and none to a partial prefill chunk, as vLLM's GPU model
runner discards those; then ``update_from_output()``. Requests ignore EOS and stop exactly at
``max_tokens``. The output is deterministic: the same JSON bytes on every run (sorted keys, no
timestamps or hashes).

Each case writes ``tests/conformance/vllm/<case>.json``:

- ``case``, ``description``: the case's name and what it exercises.
- ``vllm_version``: the vLLM that produced it.
- ``config``: the scheduler settings that matter. ``block_size`` (tokens per KV block),
  ``num_gpu_blocks`` (KV blocks in the pool; vLLM reserves one as its null block, so
  ``num_usable_blocks = num_gpu_blocks - 1`` hold tokens), ``max_num_seqs`` (most running requests),
  ``max_num_batched_tokens`` (token budget of one step), ``enable_chunked_prefill``,
  ``enable_prefix_caching``, ``long_prefill_token_threshold`` (0: off; else the most tokens one
  request gets in a step while it has more left), ``max_num_partial_prefills``, ``max_model_len``,
  ``policy`` (fcfs), ``scheduler_reserve_full_isl`` (a waiting request is admitted only if its whole
  known sequence fits the free blocks, not just the first chunk), ``async_scheduling`` (false),
  ``num_lookahead_tokens`` (0: no speculative decoding), ``preemption_mode`` (V1 always recomputes),
  ``sampled_token_id``, ``ignore_eos``.
- ``requests``: in arrival order, ``id``, ``arrival_step`` (added just before that step's schedule),
  ``prompt_token_ids``, ``prompt_len``, ``max_tokens`` (output tokens; the request finishes with the
  step that samples its last one).
- ``steps``: one per engine step, ``step`` counting from 0:
  - ``added``: ids added before this step's ``schedule()``.
  - ``idle``: present (true) on a step where the engine held no request, so nothing was scheduled
    (``EngineCore.step`` returns at once); such a step has only ``step``, ``added`` and ``idle``. A
    step with nothing scheduled (``num_scheduled_tokens`` 0) after the last request finished is
    vLLM's own: ``has_requests()`` stays true until the finished ids have gone out with one more
    ``schedule()``.
  - ``scheduled``: the requests given tokens, in the order the scheduler chose them (running requests
    first, then admissions from the waiting queue). Each has ``req_id``; ``kind``: ``running`` (was
    running), ``new`` (first admission) or ``resumed`` (admitted again after a preemption);
    ``num_tokens``: tokens the request knows (prompt plus outputs so far); ``num_computed_tokens``:
    tokens already in KV as the step starts, prefix-cache hits of this admission included;
    ``num_cached_tokens``: of those, the ones this admission took from the prefix cache (0 for
    ``running``); ``num_scheduled_tokens``: tokens computed in this step; ``sampled``: whether the step
    samples a token for it (``num_computed_tokens + num_scheduled_tokens == num_tokens``).
  - ``num_scheduled_tokens``: the step's total.
  - ``preempted``: ids preempted (recompute) in this step, in preemption order.
  - ``finished``: ids that finished with this step (their last token sampled).
  - ``running_after``, ``waiting_after``: the running list and the waiting queue (front first) after
    the step.
  - ``num_free_blocks_after_schedule``, ``num_free_blocks_after_step``: free KV blocks in vLLM's block
    pool after ``schedule()`` and after ``update_from_output()`` (finished requests' blocks freed).
    Free blocks include cached blocks no request holds (evictable prefix-cache entries) and exclude
    the null block.
- ``summary``: per request, ``admitted_step`` (first scheduled), ``first_token_step``,
  ``finished_step``, ``num_preemptions``, ``num_cached_tokens`` (prefix-cache hit of its first
  admission); and ``num_steps``, ``num_preemptions``.

The cases are kept small (tens of steps) so that a reader can check them by hand against vLLM's
``Scheduler.schedule`` and cosim's scheduler.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Deterministic block hashes (vLLM seeds its NONE_HASH from PYTHONHASHSEED) and quiet imports;
# both must be set before vLLM is imported.
os.environ.setdefault("PYTHONHASHSEED", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import vllm
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "conformance" / "vllm"
SAMPLED_TOKEN_ID = 1
MAX_STEPS = 500  # a case that runs longer is a bug in the case

# A tiny Llama-like model: only the config matters (no weights are loaded, no tokenizer).
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 1,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
    "bos_token_id": 0,
    "eos_token_id": 2,
}


@dataclass(frozen=True)
class Req:
    """A request of a case: ``prompt`` token ids, added before step ``arrival_step``."""

    id: str
    prompt: list[int]
    max_tokens: int
    arrival_step: int = 0


@dataclass(frozen=True)
class Case:
    description: str
    requests: list[Req]
    block_size: int = 16
    num_gpu_blocks: int = 1024
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 64
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    long_prefill_token_threshold: int = 0
    max_model_len: int = 2048


def tokens(start: int, n: int) -> list[int]:
    """``n`` distinct token ids from ``start`` (ids stay clear of SAMPLED_TOKEN_ID)."""
    return list(range(start, start + n))


SHARED = tokens(5000, 40)  # a 40-token shared prefix (2 full blocks of 16 and 8 tokens)

CASES: dict[str, Case] = {
    "chunked_budget": Case(
        description="Chunked prefill under a 64-token budget: long prompts are split, running requests "
                    "(decodes and unfinished chunks) are scheduled before waiting ones, short prompts "
                    "fill what is left of the budget.",
        requests=[
            Req("A", tokens(1000, 150), 4),
            Req("B", tokens(2000, 20), 6),
            Req("C", tokens(3000, 100), 3),
            Req("D", tokens(4000, 10), 5),
            Req("E", tokens(6000, 70), 2),
        ],
        max_num_batched_tokens=64,
    ),
    "long_prefill_threshold": Case(
        description="As chunked_budget with long_prefill_token_threshold=24: no request gets more than "
                    "24 tokens in a step while it has more left, so several prompts prefill side by side.",
        requests=[
            Req("A", tokens(1000, 150), 4),
            Req("B", tokens(2000, 20), 6),
            Req("C", tokens(3000, 100), 3),
            Req("D", tokens(4000, 10), 5),
        ],
        max_num_batched_tokens=64,
        long_prefill_token_threshold=24,
    ),
    "max_num_seqs": Case(
        description="Seven short requests with max_num_seqs=4: only four run at once; a waiting request "
                    "is admitted in the step after a running one finishes.",
        requests=[Req(f"R{i}", tokens(1000 + 100 * i, 8 + 2 * i), max_tokens)
                  for i, max_tokens in enumerate([3, 6, 4, 8, 2, 5, 3])],
        max_num_seqs=4,
        max_num_batched_tokens=512,
    ),
    "preemption": Case(
        description="KV pressure without prefix caching: 10 usable blocks of 16, three 48-token prompts "
                    "(3 blocks each). The first decode step needs a 4th block each; the newest running "
                    "request is preempted (recompute) to make room, no waiting request is admitted in "
                    "that step, and it is readmitted (whole sequence recomputed) only when its whole "
                    "known sequence fits the free blocks again.",
        requests=[
            Req("A", tokens(1000, 48), 20),
            Req("B", tokens(2000, 48), 20),
            Req("C", tokens(3000, 48), 6),
        ],
        num_gpu_blocks=11,
        max_num_batched_tokens=256,
    ),
    "preemption_cascade": Case(
        description="Two preemptions in one step: 8 usable blocks, four 32-token prompts (2 blocks each) "
                    "fill the pool; at the first decode step A preempts the newest (D) and takes a block, "
                    "B takes the last free one, and C, now the newest running request, preempts itself. "
                    "The waiting queue then starts with C, then D (each preempted request goes to the "
                    "front).",
        requests=[
            Req("A", tokens(1000, 32), 24),
            Req("B", tokens(2000, 32), 24),
            Req("C", tokens(3000, 32), 4),
            Req("D", tokens(4000, 32), 4),
        ],
        num_gpu_blocks=9,
        max_num_batched_tokens=256,
    ),
    "full_prefill_admission": Case(
        description="scheduler_reserve_full_isl (on by default): 12 usable blocks, a 64-token budget. A "
                    "(100 tokens, 7 blocks) is admitted although its first chunk needs only 4 blocks; B "
                    "(96 tokens, 6 blocks) arrives at step 1 and, although its 28-token first chunk would "
                    "fit the 5 free blocks, waits until its whole prompt fits (after A finishes).",
        requests=[
            Req("A", tokens(1000, 100), 20),
            Req("B", tokens(2000, 96), 4, arrival_step=1),
        ],
        num_gpu_blocks=13,
        max_num_batched_tokens=64,
    ),
    "preemption_prefix_cache": Case(
        description="The preemption case with prefix caching on, where nothing needs the preempted "
                    "request's freed blocks afterwards: they stay cached, and when it is readmitted it "
                    "gets its full blocks back as a prefix-cache hit and recomputes only the rest. Its "
                    "readmission still waits until the cached blocks it would reuse plus the new ones "
                    "fit the free blocks (evictable cached blocks count as needing a free block).",
        requests=[
            Req("A", tokens(1000, 48), 12),
            Req("B", tokens(2000, 48), 12),
            Req("C", tokens(3000, 48), 6),
        ],
        num_gpu_blocks=11,
        max_num_batched_tokens=256,
        enable_prefix_caching=True,
    ),
    "prefix_cache_hits": Case(
        description="Prefix caching with block_size 16: requests sharing leading token ids get whole "
                    "cached blocks (num_computed_tokens > 0 at admission); a request admitted in the same "
                    "step as the one that computes the shared blocks already hits them (vLLM caches "
                    "blocks when it allocates them); a full-prompt hit still computes the last block "
                    "(at most num_tokens - 1 tokens are taken from the cache, in whole blocks); the "
                    "cache outlives the request that filled it.",
        requests=[
            Req("P0", SHARED + tokens(100, 8), 3),
            Req("P1", SHARED + tokens(200, 30), 3),
            Req("P2", SHARED + tokens(300, 5), 4, arrival_step=3),
            Req("P3", SHARED + tokens(100, 8), 2, arrival_step=3),   # P0's whole prompt
            Req("P4", SHARED[:32], 2, arrival_step=6),                # exactly two cached blocks
            Req("P5", tokens(9000, 20), 2, arrival_step=6),           # no shared prefix
            Req("P6", SHARED[:16] + tokens(400, 20), 2, arrival_step=8),  # one shared block
        ],
        max_num_batched_tokens=256,
        enable_prefix_caching=True,
    ),
    "arrivals_midway": Case(
        description="Requests arrive at later steps while others decode, under a 64-token chunked budget: "
                    "each arrival is admitted at the step it arrives (behind the running requests' "
                    "tokens) and a long one is chunked alongside the decodes.",
        requests=[
            Req("A", tokens(1000, 30), 12),
            Req("B", tokens(2000, 12), 10),
            Req("C", tokens(3000, 90), 4, arrival_step=2),
            Req("D", tokens(4000, 16), 3, arrival_step=3),
            Req("E", tokens(6000, 40), 3, arrival_step=5),
            Req("F", tokens(7000, 8), 2, arrival_step=9),
        ],
        max_num_batched_tokens=64,
    ),
    "no_chunked_prefill": Case(
        description="enable_chunked_prefill=False with a 64-token budget: running requests first, then "
                    "whole waiting prompts while they fit the rest of the budget; the first that does not "
                    "fit stops admission for the step (FCFS, no skipping).",
        requests=[
            Req("A", tokens(1000, 40), 4),
            Req("B", tokens(2000, 30), 3),
            Req("C", tokens(3000, 20), 3),
            Req("D", tokens(4000, 60), 2, arrival_step=1),
            Req("E", tokens(6000, 5), 2, arrival_step=1),
        ],
        max_num_batched_tokens=64,
        max_model_len=64,
        enable_chunked_prefill=False,
    ),
}


class RecordingScheduler(Scheduler):
    """vLLM's scheduler, noting the order of its preemptions (its output has them as a set)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.preempted_order: list[str] = []

    def _preempt_request(self, request: Request, timestamp: float) -> None:
        self.preempted_order.append(request.request_id)
        super()._preempt_request(request, timestamp)


def make_scheduler(case: Case, model_dir: str) -> tuple[RecordingScheduler, VllmConfig]:
    """The scheduler EngineCore would build for this config (cf. vLLM's tests/v1/core/utils.py)."""
    model_config = ModelConfig(model=model_dir, dtype="float16", seed=0, skip_tokenizer_init=True,
                               max_model_len=case.max_model_len)
    scheduler_config = SchedulerConfig(
        max_num_seqs=case.max_num_seqs,
        max_num_batched_tokens=case.max_num_batched_tokens,
        max_model_len=case.max_model_len,
        long_prefill_token_threshold=case.long_prefill_token_threshold,
        enable_chunked_prefill=case.enable_chunked_prefill,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    cache_config = CacheConfig(block_size=case.block_size, gpu_memory_utilization=0.9, cache_dtype="auto",
                               enable_prefix_caching=case.enable_prefix_caching)
    vllm_config = VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                             cache_config=cache_config, device_config=DeviceConfig(device="cpu"))
    kv_cache_config = KVCacheConfig(
        num_blocks=case.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=case.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32))],
    )
    cache_config.num_gpu_blocks = case.num_gpu_blocks
    scheduler = RecordingScheduler(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                                   structured_output_manager=StructuredOutputManager(vllm_config),
                                   block_size=case.block_size, log_stats=False)
    return scheduler, vllm_config


def config_record(case: Case, scheduler: Scheduler, vllm_config: VllmConfig) -> dict:
    sc, cc = vllm_config.scheduler_config, vllm_config.cache_config
    return {
        "block_size": cc.block_size,
        "num_gpu_blocks": case.num_gpu_blocks,
        "num_usable_blocks": scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_scheduled_tokens": scheduler.max_num_scheduled_tokens,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "enable_prefix_caching": cc.enable_prefix_caching,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "max_num_partial_prefills": sc.max_num_partial_prefills,
        "max_model_len": vllm_config.model_config.max_model_len,
        "policy": str(sc.policy),
        "scheduler_reserve_full_isl": sc.scheduler_reserve_full_isl,
        "async_scheduling": bool(sc.async_scheduling),
        "num_lookahead_tokens": scheduler.num_lookahead_tokens,
        "preemption_mode": "recompute",
        "sampled_token_id": SAMPLED_TOKEN_ID,
        "ignore_eos": True,
    }


def run_case(name: str, case: Case) -> dict:
    with tempfile.TemporaryDirectory(prefix="vllm-conformance-") as model_dir:
        Path(model_dir, "config.json").write_text(json.dumps(MODEL_CONFIG))
        scheduler, vllm_config = make_scheduler(case, model_dir)
    config = config_record(case, scheduler, vllm_config)
    assert config["num_usable_blocks"] == case.num_gpu_blocks - 1  # one is vLLM's null block
    hasher = None
    if vllm_config.cache_config.enable_prefix_caching:  # as EngineCore.__init__ does
        hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        hasher = get_request_block_hasher(case.block_size, hash_fn)

    requests = sorted(case.requests, key=lambda r: r.arrival_step)  # stable: list order within a step
    assert len({r.id for r in requests}) == len(requests), "duplicate request id"
    pending = list(requests)
    by_id: dict[str, Request] = {}
    summary = {r.id: {"admitted_step": None, "first_token_step": None, "finished_step": None,
                      "num_preemptions": 0, "num_cached_tokens": None} for r in requests}
    steps: list[dict] = []
    step = 0
    while pending or scheduler.has_requests():
        assert step < MAX_STEPS, f"{name}: still running after {MAX_STEPS} steps"
        added = []
        while pending and pending[0].arrival_step <= step:
            r = pending.pop(0)
            params = SamplingParams(max_tokens=r.max_tokens, ignore_eos=True, temperature=0.0)
            request = Request(request_id=r.id, prompt_token_ids=list(r.prompt), sampling_params=params,
                              pooling_params=None, arrival_time=float(r.arrival_step), block_hasher=hasher)
            scheduler.add_request(request)
            by_id[r.id] = request
            added.append(r.id)
        if not scheduler.has_requests():
            # EngineCore.step returns without scheduling when it has no requests: an idle step.
            steps.append({"step": step, "added": added, "idle": True})
            step += 1
            continue

        before = {rid: (req.status, req.num_computed_tokens, req.num_tokens)
                  for rid, req in by_id.items() if not req.is_finished()}
        scheduler.preempted_order = []
        out = scheduler.schedule()
        free_after_schedule = scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
        assert set(scheduler.preempted_order) == out.preempted_req_ids

        scheduled, sampled = [], []
        for rid, num in out.num_scheduled_tokens.items():  # insertion order = scheduling order
            req = by_id[rid]
            status, computed_before, num_tokens = before[rid]
            start = req.num_computed_tokens - num  # schedule() already advanced it
            kind = {RequestStatus.RUNNING: "running", RequestStatus.WAITING: "new",
                    RequestStatus.PREEMPTED: "resumed"}[status]
            does_sample = start + num >= num_tokens
            scheduled.append({"req_id": rid, "kind": kind, "num_tokens": num_tokens, "num_computed_tokens": start,
                              "num_cached_tokens": start - computed_before, "num_scheduled_tokens": num,
                              "sampled": does_sample})
            if does_sample:
                sampled.append(rid)
            s = summary[rid]
            if s["admitted_step"] is None:
                s["admitted_step"] = step
                s["num_cached_tokens"] = start - computed_before
            if does_sample and s["first_token_step"] is None:
                s["first_token_step"] = step
        for rid in scheduler.preempted_order:
            summary[rid]["num_preemptions"] += 1

        # The model runner's output: one token for each request whose computed tokens reach its
        # known tokens; a partial prefill chunk's sample is discarded (empty list).
        req_ids = list(out.num_scheduled_tokens)
        runner_output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=[[SAMPLED_TOKEN_ID] if rid in sampled else [] for rid in req_ids],
        )
        engine_outputs = scheduler.update_from_output(out, runner_output)
        finished = [o.request_id for outs in engine_outputs.values() for o in outs.outputs
                    if o.finish_reason is not None]
        for rid in finished:
            summary[rid]["finished_step"] = step
            assert by_id[rid].num_output_tokens == by_id[rid].max_tokens, rid

        steps.append({
            "step": step,
            "added": added,
            "scheduled": scheduled,
            "num_scheduled_tokens": out.total_num_scheduled_tokens,
            "preempted": list(scheduler.preempted_order),
            "finished": finished,
            "running_after": [req.request_id for req in scheduler.running],
            "waiting_after": [req.request_id for req in (*scheduler.skipped_waiting, *scheduler.waiting)],
            "num_free_blocks_after_schedule": free_after_schedule,
            "num_free_blocks_after_step": scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
        })
        step += 1

    return {
        "case": name,
        "description": case.description,
        "vllm_version": vllm.__version__,
        "config": config,
        "requests": [{"id": r.id, "arrival_step": r.arrival_step, "prompt_token_ids": list(r.prompt),
                      "prompt_len": len(r.prompt), "max_tokens": r.max_tokens} for r in requests],
        "steps": steps,
        "summary": {
            "num_steps": len(steps),
            "num_preemptions": sum(s["num_preemptions"] for s in summary.values()),
            "requests": summary,
        },
    }


def dumps(obj: object, indent: str = "") -> str:
    """Sorted, indented JSON with lists of scalars on one line (token ids stay readable)."""
    inner = indent + " "
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(key)}: {dumps(obj[key], inner)}" for key in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(obj, list):
        if all(not isinstance(item, (dict, list)) for item in obj):
            return "[" + ", ".join(json.dumps(item) for item in obj) + "]"
        return "[\n" + ",\n".join(inner + dumps(item, inner) for item in obj) + "\n" + indent + "]"
    return json.dumps(obj)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("cases", nargs="*", help=f"cases to record (default: all of {', '.join(CASES)})")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="folder for <case>.json (default: %(default)s)")
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.cases or list(CASES):
        record = run_case(name, CASES[name])
        path = args.out / f"{name}.json"
        path.write_text(dumps(record) + "\n")
        sys.stderr.write(f"{path}: {record['summary']['num_steps']} steps, "
                         f"{record['summary']['num_preemptions']} preemptions\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
