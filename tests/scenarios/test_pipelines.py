"""Multi-stage pipelines on constant-time backends: per-stage times computed by hand."""

from __future__ import annotations

import pytest

import cosim
from cosim.hub.errors import ScenarioError
from tests.scenarios.helpers import client, scenario

ONE = {"requests": 1, "arrival": {"process": "constant"},
       "input_tokens": {"dist": "fixed", "value": 100}, "output_tokens": {"dist": "fixed", "value": 3}}


def stages(request) -> list[tuple[str, int, int, int]]:
    """(kind, queue, start, end) of each stage."""
    return [(s.kind, s.start_ns - s.enqueue_ns, s.start_ns, s.end_ns) for s in request.stages]


def test_preprocess_llm_postprocess_pipeline() -> None:
    config = scenario(
        clients=[{"name": "pre", "kind": "preprocess", "service": {"base_s": 1e-6, "per_token_s": 1e-9}},
                 client("llm"),
                 {"name": "post", "kind": "postprocess", "service": {"base_s": 2e-6, "per_token_s": 1e-9}}],
        templates={"checked": {"stages": ["preprocess", "prefill", "decode", "postprocess"]}},
        workload={**ONE, "templates": {"checked": 1}})
    (r,) = cosim.run(config).requests
    # preprocess 1000 + 100 tokens; prefill 1000; two decodes; postprocess 2000 + 3 output tokens
    assert stages(r) == [("preprocess", 0, 0, 1100), ("prefill", 0, 1100, 2100), ("decode", 0, 2100, 4100),
                         ("postprocess", 0, 4100, 6103)]
    assert (r.first_token_ns, r.finish_ns) == (2100, 6103)


def test_rag_embeds_retrieves_and_sends_context_to_prefill() -> None:
    config = scenario(
        clients=[{"name": "rag", "kind": "rag", "model": "m", "backend": "emb", "hardware": {"device": "h"},
                  "rag": {"retrieval_device": "cpu", "centroids": 1000, "dim": 10, "probes": 2,
                          "points_per_probe": 100, "pq_code_bytes": 8, "top_k": 2, "doc_tokens": 50,
                          "compute_efficiency": 1, "memory_efficiency": 1}},
                 client("llm")],
        templates={"rag": {"stages": ["rag", "prefill", "decode"]}}, workload={**ONE, "templates": {"rag": 1}})
    config["backends"]["emb"] = {"python": "cosim.adapters.sdk.testing:LinearBackend", "options": {"step_ns": 5000}}
    config["hardware"]["cpu"] = {"preset": "Xeon-8480", "overrides": {"peak_tflops": 1.0, "mem_bandwidth_gbps": 100}}
    (r,) = cosim.run(config).requests
    # retrieval at 1 TFLOP/s, 100 GB/s: coarse 4*1000*10 B -> 400 ns; tables 4*256*10*2 B -> 204 ns;
    # scan 200 x (8 + 8) B -> 32 ns; top-k 200 comparisons -> 0 ns. Embedding vector: 40 B at 32 GB/s -> 1 ns.
    assert [(k, start, end) for k, _, start, end in stages(r)] == [
        ("rag", 0, 5637), ("rag:embedding", 0, 5000), ("rag:embed_transfer", 5000, 5001),
        ("rag:retrieval", 5001, 5637), ("prefill", 15645, 16645), ("decode", 16645, 18645)]
    # 2 documents x 50 tokens join the prompt; their 400 bytes of text cross the default link (10 us + 8 ns)
    assert r.input_tokens == 200 and r.stages[4].transfer_ns == 10_008


@pytest.mark.parametrize("hit_rate", [0.0, 1.0])
def test_kv_retrieval_hit_saves_exactly_the_prefill_of_the_prefix(hit_rate: float) -> None:
    config = scenario(
        clients=[{"name": "kv", "kind": "kv_retrieval", "backend": "mem",
                  "memory": {"levels": [{"name": "dram", "capacity_bytes": 10**12, "bandwidth_gbps": 100,
                                         "latency_ns": 1000, "hit_rate": hit_rate}]}},
                 client("llm")],
        per_token_ns=1000,
        templates={"code": {"stages": ["kv_retrieval", "prefill", "decode"], "kv_prefix": {"fraction": 0.8}}},
        workload={**ONE, "input_tokens": {"dist": "fixed", "value": 1000}, "templates": {"code": 1}})
    config["backends"]["mem"] = {"kind": "memory"}
    (r,) = cosim.run(config).requests
    kv, prefill = r.stages[0], r.stages[1]
    fetch = 1000 + 800 * 131_072 // 100  # latency + 800 tokens of Llama-3-8B KV at 100 GB/s
    if hit_rate:
        assert (kv.end_ns - kv.start_ns, r.retrieved_tokens) == (fetch, 800)
        assert prefill.end_ns - prefill.start_ns == 1000 + 200 * 1000  # only the 200 new tokens
    else:
        assert (kv.end_ns - kv.start_ns, r.retrieved_tokens) == (0, 0)
        assert prefill.end_ns - prefill.start_ns == 1000 + 1000 * 1000  # the prefix is recomputed


def test_reasoning_template_scales_the_output() -> None:
    config = scenario(templates={"think": {"stages": ["prefill", "reason"], "reasoning": {"factor": 4}}},
                      workload={**ONE, "templates": {"think": 1}})
    (r,) = cosim.run(config).requests
    assert r.output_tokens == r.generated_tokens == 12
    assert [s.kind for s in r.stages] == ["prefill", "reason"]


@pytest.mark.parametrize(("templates", "clients", "message"), [
    ({"t": {"stages": ["rag", "prefill", "decode"]}}, None, "workload.templates.t: stage 'rag' has no client"),
    ({"t": {"stages": ["prefill", "decode", "postprocess"]}}, None, "stage 'postprocess' has no client"),
    ({"t": {"stages": ["prefill", "decode"], "model": "gpt9"}}, None, "templates.t.model: unknown model 'gpt9'"),
    ({"t": {"stages": ["decode", "rag"]}}, None, "a pipeline needs a prefill stage"),
])
def test_bad_pipelines_are_config_errors_naming_stage_and_template(templates, clients, message) -> None:
    config = scenario(templates=templates, workload={**ONE, "templates": {"t": 1}})
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace("[", r"\[")):
        cosim.run(config)


@pytest.mark.parametrize("parallel", [False, True])
def test_parallel_kv_fetch_to_decode_moves_only_new_kv_between_clients(parallel: bool) -> None:
    """MIST: fetching retrieved KV to prefill and decode clients at once leaves only the new KV to move P -> D."""
    config = scenario(
        clients=[{"name": "kv", "kind": "kv_retrieval", "backend": "mem",
                  "memory": {"parallel_decode_transfer": parallel,
                             "levels": [{"name": "dram", "capacity_bytes": 10**12, "bandwidth_gbps": 100,
                                         "latency_ns": 1000, "hit_rate": 1.0}]}},
                 client("p", role="prefill"), client("d", role="decode")],
        templates={"code": {"stages": ["kv_retrieval", "prefill", "decode"], "kv_prefix": {"fraction": 0.8}}},
        workload={**ONE, "input_tokens": {"dist": "fixed", "value": 1000}, "templates": {"code": 1}},
        network={"link": {"bandwidth_gbps": 50, "latency_s": 0}})
    config["backends"]["mem"] = {"kind": "memory"}
    (r,) = cosim.run(config).requests
    moved_tokens = 200 if parallel else 1000
    assert r.stages[2].kind == "decode" and r.stages[2].transfer_ns == moved_tokens * 131_072 // 50


def multipath(branches: int, per_token_ns: int = 0, **scheduler: object) -> dict:
    return scenario(clients=[client("llm", block_size=16, **scheduler)], per_token_ns=per_token_ns,
                    templates={"think": {"stages": ["prefill", "reason"], "reasoning": {"branches": branches}}},
                    workload={**ONE, "input_tokens": {"dist": "fixed", "value": 64},
                              "output_tokens": {"dist": "fixed", "value": 20}, "templates": {"think": 1}})


def test_multipath_reasoning_shares_the_prompt_kv_and_multiplies_decode_kv() -> None:
    single, four = (cosim.run(multipath(n)) for n in (1, 4))
    (r1,), (r4,) = single.requests, four.requests
    assert (r1.output_tokens, r1.generated_tokens, r4.output_tokens, r4.generated_tokens) == (20, 20, 80, 80)
    peak = {n: result.summary["clients"]["llm"]["max_kv_blocks_used"] for n, result in ((1, single), (4, four))}
    # 64 prompt tokens = 4 shared blocks; each path's 20 tokens take 2 blocks of its own
    assert peak == {1: 4 + 2, 4: 4 + 4 * 2}


def test_multipath_tpot_is_the_time_per_token_of_one_path() -> None:
    """Paths decode side by side: 4 paths of 20 tokens take 19 steps after the first token, not 79."""
    single, four = (cosim.run(multipath(n, per_token_ns=10, batching="mixed")) for n in (1, 4))
    prefill = 1000 + 64 * 10  # the first token of every path
    step = {1: 1000 + 10, 4: 1000 + 4 * 10}  # one decode per path
    for n, result in ((1, single), (4, four)):
        (r,) = result.requests
        assert (r.first_token_ns, r.finish_ns) == (prefill, prefill + 19 * step[n])
        assert result.summary["latency"]["tpot_s"]["mean"] == step[n] / 1e9


def test_more_paths_make_each_token_a_little_slower_never_faster() -> None:
    """The roofline on Llama-3-8B / H100, one request at a time: a step decodes 4 sequences instead of 1."""
    def tpot_s(branches: int) -> float:
        config = scenario(
            clients=[{**client(), "backend": "roofline"}], backends={"roofline": {"kind": "roofline"}},
            templates={"think": {"stages": ["prefill", "reason"], "reasoning": {"branches": branches}}},
            workload={"requests": 3, "arrival": {"process": "uniform", "rate_per_s": 0.1},
                      "input_tokens": {"dist": "fixed", "value": 512}, "output_tokens": {"dist": "fixed", "value": 64},
                      "templates": {"think": 1}})
        return cosim.run(config).summary["latency"]["tpot_s"]["mean"]

    single, four = tpot_s(1), tpot_s(4)
    assert single < four < 1.1 * single


def test_multipath_reasoning_preempts_when_memory_is_short() -> None:
    result = cosim.run(multipath(4, num_gpu_blocks=9))
    (r,) = result.requests
    assert r.preemptions > 0 and r.generated_tokens == r.output_tokens == 80
    assert result.summary["clients"]["llm"]["max_kv_blocks_used"] <= 9


def test_time_synchronized_kv_tier_hits_emerge_from_the_workload() -> None:
    """An LRU tier that starts empty: the first request of each of 3 prefixes misses and stores it; later ones hit."""
    config = scenario(
        clients=[{"name": "kv", "kind": "kv_retrieval", "backend": "mem", "servers": 4,
                  "memory": {"mode": "time_synchronized",
                             "levels": [{"name": "dram", "capacity_bytes": 10**12, "bandwidth_gbps": 100,
                                         "latency_ns": 1000}]}},
                 client("llm")],
        per_token_ns=100,
        templates={"code": {"stages": ["kv_retrieval", "prefill", "decode"],
                            "kv_prefix": {"fraction": 0.8, "num_prefixes": 3}}},
        workload={**ONE, "requests": 40, "arrival": {"process": "poisson", "rate_per_s": 200},
                  "input_tokens": {"dist": "fixed", "value": 1000}, "templates": {"code": 1}})
    config["backends"]["mem"] = {"kind": "memory"}
    result = cosim.run(config)
    misses = [r for r in result.requests if r.retrieved_tokens == 0]
    assert result.summary["requests"]["completed"] == 40
    assert len({r.prefix_id for r in misses}) == 3 and len(misses) <= 6
    assert all(r.retrieved_tokens == 800 for r in result.requests if r not in misses)
