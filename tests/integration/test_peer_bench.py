"""scripts/peer_bench.py: the peer gets cosim's very requests, and a peer not installed is skipped, saying so.

Nothing here needs the peer's own environment: the trace and config it would read are checked as written.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts.peer_bench import aisimulate_config, write_trace
from tests.paths import EXAMPLES, REPO

CONFIG = EXAMPLES / "bench" / "aisimulate-matched.yaml"


def _run_folder(tmp_path: Path, rows: list[tuple[str, int, int]]) -> Path:
    """A run folder of the matched scenario (its config as written) with these (arrival_s, in, out) requests."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_text(CONFIG.read_text())
    lines = ["id,model,arrival_s,input_tokens,output_tokens,generated_tokens"]
    lines += [f"{i},model,{arrival},{inp},{out},{out}" for i, (arrival, inp, out) in enumerate(rows)]
    (folder / "requests.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_the_trace_holds_each_request_with_the_shared_prefix_as_equal_block_hashes(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, [("0.274460649", 1024, 256), ("0.338054877", 1024, 256), ("1.5", 1030, 7)])
    write_trace(folder, tmp_path / "trace.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert [(r["timestamp"], r["input_length"], r["output_length"]) for r in rows] == [
        (274.460649, 1024, 256), (338.054877, 1024, 256), (1500.0, 1030, 7)]
    shared = list(range(16))  # 256 prefix tokens in 16-token blocks
    # Each request's own 768 tokens are 48 blocks no other request holds; 774 make 49, the last partial.
    assert rows[0]["hash_ids"] == shared + list(range(16, 64))
    assert rows[1]["hash_ids"] == shared + list(range(64, 112))
    assert rows[2]["hash_ids"] == shared + list(range(112, 161))


def test_a_prefix_the_trace_cannot_carry_is_refused(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, [("0.1", 1024, 256)])
    config = yaml.safe_load(CONFIG.read_text())
    config["workload"]["prefix"] = {"num_prefixes": 2, "tokens": 256}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match="one prefix every request shares"):
        write_trace(folder, tmp_path / "trace.jsonl")


def test_the_peer_config_is_the_deployment_cosim_ran(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, [("0.1", 1024, 256)])
    config = aisimulate_config(folder, tmp_path / "trace.jsonl")
    engine, worker = config["engine"], config["engine"]["workers"]["aggregated"]
    assert (engine["model"], engine["hardware"], engine["backend_version"]) == (
        "meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "0.24.0")
    assert engine["enable_chunked_prefill"] is True and worker["parallelism"] == {"tensor": 1}
    assert worker["scheduler"] == {"max_batched_tokens": 8192, "max_sequences": 256}
    assert worker["kv_cache"] == {"block_size": 16, "prefix_caching": True}
    assert config["traffic"]["load"] == {"type": "trace_timestamps"}


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="aiconfigurator-core is not installed: pip install 'cosim[aiconfigurator]'")
def test_a_peer_without_its_environment_is_skipped_saying_so(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "peer_bench.py"), "--sizes", "8,16", "--rounds",
                           "1", "--no-grpc", "--aisimulate", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=300, check=True)
    assert f"AISimulate skipped: no {tmp_path / 'none' / 'bin' / 'aisimulate'}" in done.stderr
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in done.stdout.splitlines()
            if line.startswith("| cosim")]
    # Two sizes, cost then outcomes: every request finished with every token asked, in both.
    assert [row[1] for row in rows] == ["8", "16", "8", "16"]
    assert [(row[2], row[3]) for row in rows[2:]] == [("8", "2,048"), ("16", "4,096")]
    assert rows[1][6] and not rows[0][6]  # the marginal cost is given at the last size only
