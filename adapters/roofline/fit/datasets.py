"""Readers of the public kernel measurements the kernel model is fitted on.

Every reader turns one dataset into :class:`.rows.Row`\\ s (one measured
kernel each, median or mean as the dataset gives it), naming the device by
its cosim preset and the model by a canonical name (:func:`canonical_model`)
so that leave-one-model-out can drop a model from every dataset at once:

- :func:`vidur_mlp`: Vidur's per-layer operator profiles (A100, H100; GEMMs, norms, RoPE,
  activation, residual add; medians of 20 runs), ``vidur/profiling/compute``;
- :func:`vidur_attention`: Vidur's legacy A100 FlashAttention profiles (prefill and decode);
- :func:`llmservingsim_bundle`: LLMServingSim's vLLM 0.19 per-layer bundles (RTX 4090,
  RTX PRO 6000): dense layers, LM head and sampler, attention on mixed batches;
- :func:`aiconfigurator_tables`: aiconfigurator-core's silicon-measured vLLM GEMM and
  FlashAttention tables (NVIDIA, Apache-2.0), per GPU system.

The data folder is ``../shared/data`` (README.md there). Main names: the readers,
:data:`AIC_SYSTEMS`, :func:`canonical_model`.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ..estimator import CUSTOM_AR_MAX_BYTES
from ..kernels import SAMPLE
from . import rows as R

# Token counts kept from the dense grids: enough to trace each curve, few enough to refit quickly.
TOKEN_GRID = frozenset([1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
                        3072, 4096, 8192, 16384, 32768])
VIDUR_DEVICES = {"a100": "A100-80GB", "h100": "H100-SXM"}
LSS_DEVICES = {"RTX4090": "RTX-4090", "RTXPRO6000": "RTX-PRO-6000"}
# aiconfigurator-core system folder -> cosim device preset (systems/*.yaml name the GPUs).
AIC_SYSTEMS = {"a100_sxm": "A100-80GB", "h100_sxm": "H100-SXM", "h200_sxm": "H200", "l40s": "L40S",
               "b200_sxm": "B200", "gb200": "GB200", "b300_sxm": "B300", "gb300": "GB300",
               "rtx_pro_6000_server": "RTX-PRO-6000", "b60": "Arc-Pro-B60"}
# Thinned grid of the bundles' attention shots (pure prefill, pure decode and mixed).
LSS_CHUNKS = frozenset([0, 16, 64, 256, 1024, 2048])
LSS_DECODES = frozenset([0, 1, 4, 16, 64, 256])
LSS_KV = frozenset([0, 16, 128, 512, 2048, 8192, 16384])
AIC_M_GRID = frozenset([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384])


def canonical_model(name: str) -> str:
    """One name per model shape across datasets (Llama-3 and 3.1 share theirs)."""
    key = name.split("/")[-1].lower().replace("meta-llama-", "llama-").replace("-hf", "").replace("-instruct", "")
    key = key.replace("llama2-", "llama-2-").replace("llama-3.1-", "llama-3-")
    return key


def _median(row: dict[str, str], op: str) -> float | None:
    value = row.get(f"time_stats.{op}.median", "")
    return float(value) if value not in ("", None) else None


# Vidur -------------------------------------------------------------------------------------------

def vidur_models(data: Path) -> Iterator[tuple[str, str, Path]]:
    """(device preset, model name, mlp.csv) of every Vidur compute profile."""
    for device_dir in sorted((data / "vidur/profiling/compute").iterdir()):
        for path in sorted(device_dir.glob("*/*/mlp.csv")):
            yield VIDUR_DEVICES[device_dir.name], f"{path.parent.parent.name}/{path.parent.name}", path


def vidur_mlp(data: Path) -> list[R.Row]:
    """Vidur's per-layer operators (one TP shard; no attention) at the token counts of TOKEN_GRID."""
    out: list[R.Row] = []
    for device, model, path in vidur_models(data):
        groups: dict[tuple[Any, ...], list[dict[str, str]]] = defaultdict(list)
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                if int(row["num_tokens"]) in TOKEN_GRID:
                    groups[(int(row["num_tensor_parallel_workers"]), int(row["num_tokens"]))].append(row)
        name = canonical_model(model)
        for (tp, t), rows in sorted(groups.items()):
            first = rows[0]
            heads, kvh, h = int(first["n_head"]), int(first["n_kv_head"]), int(first["n_embd"])
            f, gated = int(first["n_expanded_embd"]), first["use_gated_mlp"] == "True"
            hd = h // heads
            q, kv, fr = heads * hd / tp, max(kvh / tp, 1) * hd, f / tp
            shapes: dict[str, tuple[Any, ...]] = {
                      "attn_pre_proj": ("gemm", h, q + 2 * kv), "attn_post_proj": ("gemm", q, h),
                      "mlp_up_proj": ("gemm", h, (2 if gated else 1) * fr), "mlp_down_proj": ("gemm", fr, h),
                      "attn_rope": ("elem", 2 * 2 * t * (q + kv)),
                      "mlp_act": ("elem", 2 * (3 if gated else 2) * t * fr),
                      "input_layernorm": ("elem", 2 * 2 * t * h + 2 * h),
                      "post_attention_layernorm": ("elem", 2 * 2 * t * h + 2 * h), "add": ("elem", 2 * 3 * t * h)}
            for op, shape in shapes.items():
                times = [v for r in rows if (v := _median(r, op)) is not None]
                if not times:
                    continue
                ms = statistics.fmean(times)
                if shape[0] == "gemm":
                    out.append(R.gemm("vidur", device, name, op, t, shape[1], shape[2], ms))
                else:
                    out.append(R.elementwise("vidur", device, name, op, shape[1], ms))
    return out


def vidur_attention(data: Path) -> list[R.Row]:
    """Vidur's legacy A100 FlashAttention profiles: the 64q/8kv TP2 file and the Llama-2-7B subset."""
    out: list[R.Row] = []
    files = {"attention.csv": "llama-2-70b", "attention_llama2_7b_tp1_subset.csv": "llama-2-7b"}
    for name, model in files.items():
        with open(data / "vidur/legacy/profiling/a100" / name, newline="") as handle:
            for row in csv.DictReader(handle):
                tp, heads, kvh = int(row["num_tensor_parallel_workers"]), int(row["n_q_head"]), int(row["n_kv_head"])
                hd = int(row["n_embd"]) // heads
                prefill = row["is_prefill"] == "True"
                ms = _median(row, "attn_prefill" if prefill else "attn_decode")
                b, n, c = int(row["batch_size"]), int(row["prefill_chunk_size"]), int(row["kv_cache_size"])
                if ms is None or (prefill and n not in TOKEN_GRID and n % 256) or (not prefill and b not in TOKEN_GRID):
                    continue
                seqs = [(1, n, c)] if prefill else [(b, 1, c)]
                out.append(R.attention("vidur", "A100-80GB", model, "attention", heads=heads / tp,
                                       kv_heads=max(kvh / tp, 1), head_dim=hd, seqs=seqs, ms=ms))
    return out


# LLMServingSim -----------------------------------------------------------------------------------

def llmservingsim_bundles(data: Path) -> Iterator[tuple[str, str, int, Path, dict[str, Any]]]:
    """(device preset, model, TP, bundle folder, HF config) of every v2 profile bundle."""
    root = data / "llmservingsim/profiler/perf"
    for meta in sorted(root.glob("*/*/*/bf16/meta.yaml")):
        hw, org, model = meta.parts[-5], meta.parts[-4], meta.parts[-3]
        config = json.loads((data / "llmservingsim/configs/model" / org / f"{model}.json").read_text())
        for tp_dir in sorted(meta.parent.glob("tp*")):
            yield LSS_DEVICES[hw], f"{org}/{model}", int(tp_dir.name[2:]), tp_dir, config


def _lss_shape(config: dict[str, Any], tp: int) -> dict[str, float]:
    heads, kvh, h = config["num_attention_heads"], config["num_key_value_heads"], config["hidden_size"]
    hd = config.get("head_dim") or h // heads
    return {"h": h, "hd": hd, "heads": heads / tp, "kvh": max(kvh / tp, 1), "f": config["intermediate_size"] / tp,
            "vocab": config["vocab_size"], "moe": "num_experts" in config}


def llmservingsim_bundle(data: Path) -> list[R.Row]:
    """Dense layers, LM head, sampler and attention of every bundle (microseconds, mean of 3)."""
    out: list[R.Row] = []
    for device, model, tp, folder, config in llmservingsim_bundles(data):
        s, name = _lss_shape(config, tp), canonical_model(model)
        h, q, kv = s["h"], s["heads"] * s["hd"], s["kvh"] * s["hd"]
        with open(folder / "dense.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                t, layer, ms = int(row["tokens"]), row["layer"], float(row["time_us"]) / 1e3
                if t not in TOKEN_GRID:
                    continue
                gemms = {"qkv_proj": (h, q + 2 * kv), "o_proj": (q, h), "gate_up_proj": (h, 2 * s["f"]),
                         "down_proj": (s["f"], h)}
                elems = {"layernorm": 2 * 4 * t * h, "final_layernorm": 2 * 4 * t * h,
                         "rotary_emb": 2 * 2 * t * (q + kv),
                         "act_fn": 2 * 3 * t * s["f"], "qk_norm": 2 * 2 * t * (q + kv), "embedding": 2 * 2 * t * h}
                if layer in gemms:
                    out.append(R.gemm("llmservingsim", device, name, layer, t, *gemms[layer], ms))
                elif layer in elems:
                    out.append(R.elementwise("llmservingsim", device, name, layer, elems[layer], ms))
        with open(folder / "per_sequence.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                n, ms = int(row["sequences"]), float(row["time_us"]) / 1e3
                if n not in TOKEN_GRID:
                    continue
                if row["layer"] == "lm_head":
                    out.append(R.gemm("llmservingsim", device, name, "lm_head", n, h, s["vocab"] / tp, ms))
                elif row["layer"] == "sampler":  # profiled at TP1 (tp_stable): the whole vocabulary
                    out.append(R.elementwise("llmservingsim", device, name, "sampler", 2 * 4 * n * s["vocab"], ms,
                                             kind=SAMPLE))
        out += _lss_attention(device, name, folder, s)
    return out


def _lss_attention(device: str, name: str, folder: Path, s: dict[str, float]) -> list[R.Row]:
    """Attention calls on mixed batches, at a thinned grid of chunks, decodes and contexts."""
    out = []
    with open(folder / "attention.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            pc, kp, nd, kd = (int(row[k]) for k in ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"))
            if pc not in LSS_CHUNKS or nd not in LSS_DECODES or kp not in LSS_KV or kd not in LSS_KV:
                continue
            seqs = ([(1, pc, kp)] if pc else []) + ([(nd, 1, kd)] if nd else [])
            if seqs:
                out.append(R.attention("llmservingsim", device, name, "attention", heads=s["heads"],
                                       kv_heads=s["kvh"], head_dim=s["hd"], seqs=seqs,
                                       ms=float(row["time_us"]) / 1e3))
    return out


# aiconfigurator-core -----------------------------------------------------------------------------

def aiconfigurator_root() -> Path | None:
    """The systems folder of the installed aiconfigurator-core, or None without it."""
    try:
        import aiconfigurator_core
    except ImportError:
        return None
    return Path(aiconfigurator_core.__file__).parent / "systems"


def _latest(folder: Path, table: str) -> Path | None:
    """The newest vLLM version's ``table`` under a system's op folder."""
    found = sorted((folder / "vllm").glob(f"*/{table}"), key=lambda p: [int(x) if x.isdigit() else 0
                                                                        for x in p.parent.name.split(".")])
    return found[-1] if found else None


def aiconfigurator_tables(systems: Path | None = None) -> list[R.Row]:
    """bf16 GEMMs (torch linear) and FlashAttention calls (bf16 KV, head_dim 128, no window) of
    aiconfigurator-core's vLLM tables, latency in ms, every system of :data:`AIC_SYSTEMS`."""
    import pandas as pd  # fit time only: an optional dependency (cosim[pandas], with pyarrow)

    systems = systems or aiconfigurator_root()
    if systems is None:
        return []
    out: list[R.Row] = []
    for system, device in AIC_SYSTEMS.items():
        data = yaml.safe_load((systems / f"{system}.yaml").read_text()).get("data_dir", f"data/{system}")
        folder = systems / data
        path = _latest(folder / "gemm", "gemm_perf.parquet")
        if path is not None:
            g = pd.read_parquet(path)
            g = g[(g.gemm_dtype == "bfloat16") & g.m.isin(AIC_M_GRID)]
            for m, k, n, ms in g[["m", "k", "n", "latency"]].itertuples(index=False):
                out.append(R.gemm("aiconfigurator", device, "", "gemm", m, k, n, ms))
        for table, decode in (("context_attention_perf.parquet", False), ("generation_attention_perf.parquet", True)):
            path = _latest(folder / "attention", table)
            if path is None:
                continue
            a = pd.read_parquet(path)
            a = a[(a.kv_cache_dtype == "bfloat16") & (a.head_dim == 128)]
            if "window_size" in a:
                a = a[a.window_size == 0]
            a = a[a.kernel_source == a.kernel_source.value_counts().index[0]] if len(a) else a  # the usual kernel
            cols = ["batch_size", "isl", "step", "num_heads", "num_key_value_heads", "latency"]
            for b, isl, step, heads, kvh, ms in a[cols].itertuples(index=False):
                seqs = [(b, 1, step)] if decode else [(b, isl, 0)]
                out.append(R.attention("aiconfigurator", device, "", "generation" if decode else "context",
                                       heads=heads, kv_heads=kvh, head_dim=128, seqs=seqs, ms=ms))
    return out


def aiconfigurator_allreduce(systems: Path | None = None) -> list[tuple[str, int, float, float]]:
    """vLLM's custom all-reduce replayed in CUDA graphs (aiconfigurator-core ``vllm_graph`` rows of
    the newest vLLM version), messages up to :data:`CUSTOM_AR_MAX_BYTES`: (device, GPUs, bytes, ms)."""
    import pandas as pd  # fit time only, as above

    systems = systems or aiconfigurator_root()
    if systems is None:
        return []
    out = []
    for system, device in AIC_SYSTEMS.items():
        path = _latest(systems / "data" / system / "comm", "custom_allreduce_perf.parquet")
        if path is None:
            continue
        a = pd.read_parquet(path)
        a = a[(a.backend == "vllm_graph") & (a.message_size <= CUSTOM_AR_MAX_BYTES)]
        out += [(device, int(n), float(size), float(ms))
                for n, size, ms in a[["num_gpus", "message_size", "latency"]].itertuples(index=False)]
    return out
