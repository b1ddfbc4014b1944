"""LoRA serving end to end: adapter loads and evictions in TTFT (hand-computed), lora_affinity against
round robin, and runs whose results do not depend on the speed devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cosim.hub.studies.runner as runner
from cosim.hub.config.memory import lora_adapter_bytes
from cosim.hub.config.presets import get_model

from .helpers import scenario

LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"


def lora_client(name: str = "c0", **lora: Any) -> dict[str, Any]:
    return {"name": name, "model": "m", "backend": "lin", "hardware": {"device": "h"},
            "scheduler": {"batching": "continuous"}, "lora": lora}


def test_more_adapters_than_slots_load_evict_and_show_in_ttft(tmp_path: Path) -> None:
    """One slot, one adapter in host memory. Requests 0 and 2 name adapter a, request 1 adapter b,
    all at t=0; steps take 1000 ns. Step 1 loads a from disk and prefills 0 and 2 (1 is skipped:
    a second adapter); they decode two more steps and leave. Then b evicts a, is read from disk
    (the host cache held only a) and loaded: request 1's TTFT holds both loads."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens,adapter\n0,100,3,a\n0,100,3,b\n0,100,3,a\n")
    config = scenario(clients=[lora_client(max_loras=1, max_lora_rank=16, max_cpu_loras=1)],
                      workload={"trace": {"path": str(trace), "format": "csv", "lora_column": "adapter"},
                                "arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"},
                                "output_tokens": {"dist": "trace"}})
    result = runner.run(config)
    rank_bytes = lora_adapter_bytes(get_model(LLAMA3_8B), 1)  # 5,242,880: one TP shard is the whole
    # rank 16 over the scheduler's 25 GB/s host link, then from disk at 3.5 GB/s
    load = int(16 * rank_bytes / 25.0 + 16 * rank_bytes / 3.5)
    assert load == 3_355_443 + 23_967_451
    ttft = {r.id: r.first_token_ns - r.arrival_ns for r in result.requests}
    assert ttft == {0: 1000 + load, 2: 1000 + load, 1: (1000 + load) + 2 * 1000 + (1000 + load)}
    client = result.summary["clients"]["c0"]["lora"]
    assert client == {"loads": 2, "disk_loads": 2, "evictions": 1, "hits": 1, "load_time_s": 2 * load / 1e9}
    assert result.summary["lora"] == client


def affinity_run(policy: str) -> dict[str, Any]:
    config = scenario(clients=[lora_client("c0", max_loras=2, max_cpu_loras=4),
                               lora_client("c1", max_loras=2, max_cpu_loras=4)],
                      step_ns=20_000, per_token_ns=10,
                      router={"policy": policy},
                      workload={"requests": 300, "arrival": {"process": "poisson", "rate_per_s": 300},
                                "input_tokens": {"dist": "uniform", "low": 50, "high": 200},
                                "output_tokens": {"dist": "uniform", "low": 4, "high": 40},
                                "lora": {"adapters": 4}})
    return runner.run(config).summary["lora"]  # type: ignore[no-any-return]


def test_lora_affinity_finds_adapters_resident_more_often_than_round_robin() -> None:
    """Four adapters, two slots per client: affinity settles each adapter on one client (a few
    loads at the start), round robin sends every adapter everywhere (a load every other admission)."""
    affinity, spread = affinity_run("lora_affinity"), affinity_run("round_robin")
    assert affinity["hits"] > spread["hits"]
    assert 5 * affinity["loads"] < spread["loads"]
    assert affinity["load_time_s"] < spread["load_time_s"]
    assert affinity["hits"] + affinity["loads"] == spread["hits"] + spread["loads"] == 300  # one per admission


def test_lookahead_and_decode_runs_change_no_result_with_adapters() -> None:
    """The roofline times the adapters (their ids enter the timing key): predicted batches, decode
    runs and the cache must give what stepping one by one gives."""
    def run(lookahead: bool) -> list[tuple[int, int]]:
        config = scenario(clients=[{**lora_client(max_loras=3, max_cpu_loras=5), "backend": "r",
                                    "scheduler": {"batching": "chunked", "max_num_batched_tokens": 512}}],
                          backends={"r": {"kind": "roofline", "lookahead": lookahead, "cache": lookahead}},
                          workload={"requests": 60, "arrival": {"process": "poisson", "rate_per_s": 40},
                                    "input_tokens": {"dist": "uniform", "low": 20, "high": 600},
                                    "output_tokens": {"dist": "uniform", "low": 2, "high": 60},
                                    "lora": {"adapters": 8, "share": 0.8}})
        result = runner.run(config)
        assert result.summary["lora"]["evictions"] > 0
        return [(r.first_token_ns, r.finish_ns) for r in result.requests]
    assert run(True) == run(False)


def test_adapters_cost_time_on_the_roofline() -> None:
    """The same workload with and without adapters on the roofline: the LoRA GEMMs and the loads
    make every request that names an adapter no faster, and the run slower."""
    def run(lora: dict[str, Any] | None) -> dict[int, int]:
        client: dict[str, Any] = {"name": "c0", "model": "m", "backend": "r", "hardware": {"device": "h"}}
        if lora is not None:
            client["lora"] = {"max_loras": 4}
        workload = {"requests": 40, "arrival": {"process": "constant"},
                    "input_tokens": {"dist": "fixed", "value": 256}, "output_tokens": {"dist": "fixed", "value": 16},
                    **({"lora": lora} if lora else {})}
        result = runner.run(scenario(clients=[client], backends={"r": {"kind": "roofline"}}, workload=workload))
        return {r.id: r.finish_ns for r in result.requests}
    plain, adapted = run(None), run({"adapters": 4})
    assert max(adapted.values()) > max(plain.values())
