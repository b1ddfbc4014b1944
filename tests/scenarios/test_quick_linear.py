import cosim.hub.runner as runner

CONFIG = {
    "seed": 1,
    "models": {"m": {"preset": "meta-llama/Meta-Llama-3-8B"}},
    "hardware": {"h": {"preset": "H100-SXM"}},
    "backends": {"lin": {"python": "cosim.adapters.sdk.testing:LinearBackend", "options": {"step_ns": 1000}}},
    "clients": [{"name": "c0", "model": "m", "backend": "lin", "hardware": {"device": "h"},
                 "scheduler": {"batching": "static", "max_num_seqs": 4}}],
    "workload": {"requests": 4, "arrival": {"process": "constant"},
                 "input_tokens": {"dist": "fixed", "value": 100}, "output_tokens": {"dist": "fixed", "value": 3}},
}


def test_smoke():
    result = runner.run(CONFIG)
    for r in result.requests:
        print(r)
    print(result.summary["latency"])
