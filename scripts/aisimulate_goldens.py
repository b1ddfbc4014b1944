"""Records NVIDIA AISimulate's per-step latency estimates, the goldens of cosim's aiconfigurator backend.

AISimulate (PyPI ``aisimulate``, Apache-2.0) is NVIDIA's simulator built on the same silicon-measured
operator tables as ``aiconfigurator-core``; its forward-pass estimator
(``aisimulate_core.sdk.RustForwardPassPerfModel`` in ``op_level`` mode, the model Dynamo's replay and
AISimulate's own replay time each engine iteration with) composes them into one step. It is an
ORACLE here, installed beside the project, never a dependency of it::

    python3 -m venv /work/oracles/aisimulate
    /work/oracles/aisimulate/bin/pip install 'aisimulate==0.13.0.dev202610270000000085'
    /work/oracles/aisimulate/bin/python scripts/aisimulate_goldens.py      # rewrites the goldens

(the ``0.13.0`` release on PyPI is a stub that downloads its wheel from elsewhere; the nightly above
has real wheels). No GPU is needed. The output is deterministic: sorted keys, rounded figures, no
timestamps.

Each configuration (:data:`CONFIGS`) names the oracle's side (library model id, system, vLLM
version, parallel sizes, quant modes) and cosim's side (model preset or shape, device preset, dtype,
parallelism); each case is one cosim ``StepBatch`` -- per sequence ``(new_tokens, context_tokens)``,
written as ``[count, new, context]`` groups -- turned into the oracle's forward-pass metrics:

* a sequence with ``new > 1`` is a prefill chunk: ``num_prefill_requests`` += 1,
  ``sum_prefill_tokens`` += new, ``sum_prefill_kv_tokens`` += context (its cached prefix, which the
  oracle reads as the chunk's prefix);
* a sequence with ``new == 1`` is a decode: ``num_decode_requests`` += 1 and
  ``sum_decode_kv_tokens`` += context + 1 (the new token's key is read too; cosim's backend times a
  decode at its context + 1, and so does the oracle's ``static_phase_diagnostics``).

A lock-step data-parallel case (``dp_ranks`` > 1) gives every rank the same batch: one metrics
record per rank, and cosim's ``dp_rank_tokens`` equal for each. The oracle's estimator sees only
these totals, so its attention is that of equal sequences at the mean length: cases with unequal
sequences are there to show where cosim, which times each chunk's attention, differs.

Per case the golden holds ``latency_ms`` (the oracle's estimate) and, for the cases in
:data:`OPS_CASES`, ``ops_ms`` (its per-operator times from ``static_phase_diagnostics``), so a
difference can be traced to an operator.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger("aisimulate_goldens")

ORACLE = "aisimulate"
OUT = Path(__file__).resolve().parents[1] / "adapters" / "aiconfigurator" / "goldens" / "aisimulate_steps.json"
VLLM_VERSION = "0.24.0"  # the current vLLM collection of both systems in aiconfigurator-core 0.12.0 (cosim's default)

# Llama-4-Scout-17B-16E's text shape, from its Hugging Face config (also
# ../shared/data/blis-h100/model_configs/llama-4-scout-17b-16e-instruct-fp8-dynamic/config.json, text_config):
# the test builds its ModelSpec from these fields, as a config imported with `hf_config` gives it: top-1
# routed plus the shared expert every Llama 4 MoE layer runs (experts_per_token 2, shared_experts 1). Neither
# AISimulate's Llama-4 model nor the library's has the shared expert; the test takes it out of cosim's time.
SCOUT_SHAPE = {"name": "meta-llama/Llama-4-Scout-17B-16E-Instruct", "num_layers": 48, "hidden_size": 5120,
               "num_attention_heads": 40, "num_kv_heads": 8, "head_dim": 128, "intermediate_size": 8192,
               "vocab_size": 202048, "num_experts": 16, "experts_per_token": 2, "shared_experts": 1,
               "gated_mlp": True}


def _config(cid: str, *, oracle: dict[str, Any], cosim: dict[str, Any], batches: str) -> dict[str, Any]:
    return {"id": cid, "oracle": {"backend": "vllm", "backend_version": VLLM_VERSION, **oracle},
            "cosim": cosim, "batches": batches}


BF16 = {"gemm_quant_mode": "bfloat16", "moe_quant_mode": "bfloat16", "kvcache_quant_mode": "bfloat16",
        "fmha_quant_mode": "bfloat16"}
LLAMA = "meta-llama/Meta-Llama-3.1-8B"
QWEN_MOE = "Qwen/Qwen3-30B-A3B"

CONFIGS: list[dict[str, Any]] = [
    _config("llama8b-rtxpro6000-tp1", batches="dense",
            oracle={"model": LLAMA, "system": "rtx_pro_6000_server", "tp": 1, **BF16},
            cosim={"model": "meta-llama/Llama-3.1-8B", "device": "RTX-PRO-6000", "dtype": "bf16", "tp": 1}),
    _config("llama8b-rtxpro6000-tp2", batches="dense",
            oracle={"model": LLAMA, "system": "rtx_pro_6000_server", "tp": 2, **BF16},
            cosim={"model": "meta-llama/Llama-3.1-8B", "device": "RTX-PRO-6000", "dtype": "bf16", "tp": 2}),
    _config("llama8b-h100-tp1", batches="dense",
            oracle={"model": LLAMA, "system": "h100_sxm", "tp": 1, **BF16},
            cosim={"model": "meta-llama/Llama-3.1-8B", "device": "H100-SXM", "dtype": "bf16", "tp": 1}),
    _config("llama8b-h100-tp2", batches="dense",
            oracle={"model": LLAMA, "system": "h100_sxm", "tp": 2, **BF16},
            cosim={"model": "meta-llama/Llama-3.1-8B", "device": "H100-SXM", "dtype": "bf16", "tp": 2}),
    _config("llama8b-h100-tp4", batches="dense",
            oracle={"model": LLAMA, "system": "h100_sxm", "tp": 4, **BF16},
            cosim={"model": "meta-llama/Llama-3.1-8B", "device": "H100-SXM", "dtype": "bf16", "tp": 4}),
    _config("llama8b-h100-tp1-fp8", batches="dense",
            oracle={"model": LLAMA, "system": "h100_sxm", "tp": 1, **BF16, "gemm_quant_mode": "fp8",
                    "moe_quant_mode": "fp8", "kvcache_quant_mode": "fp8"},
            cosim={"model": "meta-llama/Llama-3.1-8B", "device": "H100-SXM", "dtype": "fp8", "tp": 1}),
    _config("qwen30b-a3b-h100-tp2-ep2", batches="moe",
            oracle={"model": QWEN_MOE, "system": "h100_sxm", "tp": 2, "moe_tp_size": 1, "moe_ep_size": 2, **BF16},
            cosim={"model": "Qwen/Qwen3-30B-A3B", "device": "H100-SXM", "dtype": "bf16", "tp": 2, "ep": 2}),
    _config("qwen30b-a3b-rtxpro6000-dp2-ep2", batches="moe-dp",
            oracle={"model": QWEN_MOE, "system": "rtx_pro_6000_server", "tp": 1, "attention_dp": 2,
                    "moe_tp_size": 1, "moe_ep_size": 2, **BF16},
            cosim={"model": "Qwen/Qwen3-30B-A3B", "device": "RTX-PRO-6000", "dtype": "bf16", "tp": 1, "ep": 2,
                   "dp_ranks": 2}),
    # The released FP8 checkpoint: the oracle reads its quantization_config (128x128 blocks) and times
    # the experts from its fp8_block rows; cosim's `dtype: fp8` of the preset's shape.
    _config("qwen30b-a3b-fp8-h100-tp1", batches="moe",
            oracle={"model": "Qwen/Qwen3-30B-A3B-FP8", "system": "h100_sxm", "tp": 1},
            cosim={"model": "Qwen/Qwen3-30B-A3B", "device": "H100-SXM", "dtype": "fp8", "tp": 1}),
    # Llama-4-Scout FP8 (the blis-h100 experiments serve RedHatAI's FP8-dynamic checkpoint: per-channel
    # weights, per-token activations), TP2 with the experts tensor-parallel (vLLM's default without
    # --enable-expert-parallel). Twice: with the oracle's `fp8` MoE rows (FlashInfer's CUTLASS experts for
    # per-tensor checkpoints; cosim pins them with options.moe_quant_mode) and with its `fp8_block` ones
    # (vLLM's Triton FP8 experts, which serve this checkpoint and which cosim takes by default;
    # adapters/aiconfigurator/mapping.py, FP8_MOE_MODES).
    _config("scout-fp8-h100-tp2", batches="scout",
            oracle={"model": "meta-llama/Llama-4-Scout-17B-16E-Instruct", "system": "h100_sxm", "tp": 2,
                    "moe_tp_size": 2, "moe_ep_size": 1, **BF16, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8"},
            cosim={"model_spec": SCOUT_SHAPE, "device": "H100-SXM", "dtype": "fp8", "tp": 2,
                   "options": {"moe_quant_mode": "fp8"}}),
    _config("scout-fp8block-h100-tp2", batches="scout",
            oracle={"model": "meta-llama/Llama-4-Scout-17B-16E-Instruct", "system": "h100_sxm", "tp": 2,
                    "moe_tp_size": 2, "moe_ep_size": 1, **BF16, "gemm_quant_mode": "fp8",
                    "moe_quant_mode": "fp8_block"},
            cosim={"model_spec": SCOUT_SHAPE, "device": "H100-SXM", "dtype": "fp8", "tp": 2}),
]

Group = list[int]  # [count, new_tokens, context_tokens]
# Cases whose per-operator times are recorded too: one prefill and the decodes at 1024 tokens of context.
OPS_CASES = ("prefill 512", "decode 1x1024", "decode 8x1024", "decode 16x1024", "decode 32x1024", "decode 64x1024",
             "decode 128x1024")


def batches(kind: str) -> Iterator[tuple[str, list[Group]]]:
    """The named batches of one kind: pure prefills, pure decodes and mixed chunked steps."""
    for new in (128, 512, 2048):
        yield f"prefill {new}", [[1, new, 0]]
    yield "prefill 512 after 1536 cached", [[1, 512, 1536]]
    yield "prefill 2x512", [[2, 512, 0]]
    sizes = (1, 8, 32, 128) if kind != "scout" else (1, 8, 16, 32, 64)
    for size in sizes:
        for context in (256, 1024, 4096):
            yield f"decode {size}x{context}", [[size, 1, context]]
    yield "mixed 512 + 31x1024", [[1, 512, 0], [31, 1, 1024]]
    yield "mixed 1024 after 1024 + 63x512", [[1, 1024, 1024], [63, 1, 512]]
    yield "mixed 256 + 127x2048", [[1, 256, 0], [127, 1, 2048]]
    yield "mixed 1920 + 128x256", [[1, 1920, 0], [128, 1, 256]]
    # Unequal sequences: the oracle sees only totals (equal lengths); cosim times each chunk.
    yield "prefill 1536+512 (unequal)", [[1, 1536, 0], [1, 512, 0]]
    yield "decode 16x(128|3968) (unequal)", [[8, 1, 128], [8, 1, 3968]]


def metrics(groups: list[Group]) -> dict[str, int]:
    """The oracle's scheduled-request metrics of one rank's batch (module docstring)."""
    out = dict.fromkeys(("num_prefill_requests", "sum_prefill_tokens", "sum_prefill_kv_tokens",
                         "num_decode_requests", "sum_decode_kv_tokens"), 0)
    for count, new, context in groups:
        if new > 1:
            out["num_prefill_requests"] += count
            out["sum_prefill_tokens"] += count * new
            out["sum_prefill_kv_tokens"] += count * context
        else:
            out["num_decode_requests"] += count
            out["sum_decode_kv_tokens"] += count * (context + 1)
    return out


def _ops(model: Any, groups: list[Group]) -> dict[str, float] | None:
    """Per-operator times of a pure, equal-sequence batch (``static_phase_diagnostics``), else None."""
    if len(groups) != 1:
        return None
    count, new, context = groups[0]
    if new == 1:
        rows = model.static_phase_diagnostics(batch_size=count, context_length=context, prefill=False)
    else:
        rows = model.static_phase_diagnostics(batch_size=count, context_length=new + context, prefill=True,
                                              prefix=context)
    ops: dict[str, float] = {}
    for row in rows:
        ops[row["name"]] = ops.get(row["name"], 0.0) + float(row["latency_ms"])
    return {name: round(ms, 6) for name, ms in sorted(ops.items()) if ms}


def record(config: dict[str, Any]) -> dict[str, Any]:
    """The oracle's estimate of every batch of one configuration."""
    from aisimulate_core.sdk import ForwardPassPerfModelConfig, RustForwardPassPerfModel

    oracle = config["oracle"]
    model = RustForwardPassPerfModel.best_available(
        ForwardPassPerfModelConfig(worker_type="aggregated", estimation_mode="op_level", **oracle))
    ranks = int(oracle.get("attention_dp", 1))
    cases = []
    for name, groups in batches(config["batches"]):
        per_rank = {"scheduled_requests": metrics(groups)}
        latency = model.estimate_forward_pass_time_ms([per_rank] * ranks if ranks > 1 else per_rank)
        if latency is None:
            raise RuntimeError(f"{config['id']}: the oracle gave no estimate for {name}")
        case: dict[str, Any] = {"name": name, "groups": groups, "fpm": per_rank["scheduled_requests"],
                                "latency_ms": round(float(latency), 6)}
        ops = _ops(model, groups) if ranks == 1 and name in OPS_CASES else None
        if ops:
            case["ops_ms"] = ops
        cases.append(case)
    diagnostics = model.diagnostics()
    if diagnostics.get("source") != "aic":
        raise RuntimeError(f"{config['id']}: the oracle's estimator is {diagnostics.get('source')}, not its "
                           "op-level (aic) model")
    return {**{k: v for k, v in config.items() if k != "batches"}, "cases": cases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output file (default {OUT})")
    parser.add_argument("config", nargs="*", help="configuration ids to record (default: all)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the oracle warns per system about tables no case reads
    log.setLevel(logging.INFO)
    chosen = [c for c in CONFIGS if not args.config or c["id"] in args.config]
    golden = {
        "oracle": {"package": ORACLE, "version": metadata.version(ORACLE),
                   "estimator": "aisimulate_core.sdk.RustForwardPassPerfModel, estimation_mode=op_level, "
                                "worker_type=aggregated, database_mode=SILICON",
                   "regenerate": "/work/oracles/aisimulate/bin/python scripts/aisimulate_goldens.py"},
        "configs": [record(c) for c in chosen],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(_dumps(golden))
    log.info("%d cases of %d configurations -> %s", sum(len(c["cases"]) for c in golden["configs"]),
                len(chosen), args.out)
    return 0


def _dumps(golden: dict[str, Any]) -> str:
    """JSON with sorted keys, one case per line (a diff after an oracle upgrade shows the cases that moved)."""
    text = json.dumps({**golden, "configs": [{**c, "cases": ["@"] } for c in golden["configs"]]}, indent=1,
                      sort_keys=True)
    for config in golden["configs"]:
        lines = ",\n    ".join(json.dumps(case, sort_keys=True) for case in config["cases"])
        text = text.replace('"@"', lines, 1)
    return text + "\n"


if __name__ == "__main__":
    sys.exit(main())
