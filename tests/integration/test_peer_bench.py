"""scripts/peer_bench.py: each peer gets cosim's very requests, and a peer not installed is skipped, saying so.

Nothing here needs a peer's own environment (CI has none): the traces, configs, command lines and profile
layouts they would read are checked as written. The one check that runs Vidur's own download code is skipped
without Vidur's environment, saying so.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts.peer_bench import (
    VIDUR_VENV,
    aisimulate_config,
    place_dataset,
    vidur_args,
    vidur_datasets,
    vidur_outcome,
    vidur_profiles,
    write_trace,
    write_vidur_trace,
)
from tests.paths import EXAMPLES, REPO

CONFIG = EXAMPLES / "bench" / "aisimulate-matched.yaml"
VIDUR_CONFIG = EXAMPLES / "bench" / "vidur-matched.yaml"


def _run_folder(tmp_path: Path, rows: list[tuple[str, int, int]], config: Path = CONFIG) -> Path:
    """A run folder of a matched scenario (its config as written) with these (arrival_s, in, out) requests."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_text(config.read_text())
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
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "peer_bench.py"), "--peer", "aisimulate", "--sizes",
                           "8,16", "--rounds", "1", "--no-grpc", "--aisimulate", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=300, check=True)
    assert f"AISimulate skipped: no {tmp_path / 'none' / 'bin' / 'aisimulate'}" in done.stderr
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in done.stdout.splitlines()
            if line.startswith("| cosim")]
    # Two sizes, cost then outcomes: every request finished with every token asked, in both.
    assert [row[1] for row in rows] == ["8", "16", "8", "16"]
    assert [(row[2], row[3]) for row in rows[2:]] == [("8", "2,048"), ("16", "4,096")]
    assert rows[1][6] and not rows[0][6]  # the marginal cost is given at the last size only


def test_the_vidur_trace_holds_each_request_as_cosim_ran_it(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, [("0.274460649", 512, 128), ("1.5", 3000, 7)], VIDUR_CONFIG)
    write_vidur_trace(folder, tmp_path / "trace.csv")
    assert (tmp_path / "trace.csv").read_text().splitlines() == [
        "Date,Time,PromptTokenCount,CompletionTokenCount", "cosim,0.274460649,512,128", "cosim,1.5,3000,7"]


def test_a_request_vidur_would_shorten_is_refused(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, [("0.1", 512, 128), ("0.2", 4000, 97)], VIDUR_CONFIG)
    with pytest.raises(ValueError, match="request 1 has 4000 \\+ 97 tokens"):
        write_vidur_trace(folder, tmp_path / "trace.csv")


def _options(args: list[str]) -> dict[str, str]:
    """Vidur's command line as option -> value (flags without a value map to "")."""
    options, key = {}, ""
    for item in args:
        if item.startswith("--"):
            key = item
            options[key] = ""
        else:
            options[key] = item
    return options


def test_the_vidur_command_line_is_the_deployment_cosim_ran(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, [("0.1", 512, 128)], VIDUR_CONFIG)
    options = _options(vidur_args(folder, tmp_path / "trace.csv", tmp_path / "cache", tmp_path / "out"))
    assert (options["--replica_config_model_name"], options["--replica_config_device"],
            options["--replica_config_network_device"]) == ("meta-llama/Llama-2-70b-hf", "a100", "a100_dgx")
    assert (options["--cluster_config_num_replicas"], options["--replica_config_tensor_parallel_size"],
            options["--replica_config_num_pipeline_stages"]) == ("1", "2", "1")
    assert (options["--replica_scheduler_config_type"], options["--sarathi_scheduler_config_chunk_size"],
            options["--sarathi_scheduler_config_batch_size_cap"]) == ("sarathi", "512", "128")
    assert (options["--cache_config_block_size"], options["--cache_config_memory_margin_fraction"]) == ("16", "0.1")
    assert "--no-cache_config_enable_prefix_caching" in options
    # The trace is replayed as it is: Vidur's defaults would scale prompts by 0.3 and time by 0.04.
    assert options["--request_generator_config_type"] == "trace_replay"
    assert options["--trace_request_generator_config_trace_file"] == str(tmp_path / "trace.csv")
    for factor in ("prefill", "decode", "time"):
        assert options[f"--trace_request_generator_config_{factor}_scale_factor"] == "1"
    predictor = "--random_forrest_execution_time_predictor_config_"
    assert (options[f"{predictor}model_profiling_dataset"], options[f"{predictor}network_profiling_dataset"]) == \
        vidur_datasets("a100", "a100_dgx", "meta-llama/Llama-2-70b-hf") == \
        ("cosim-local/vidur-a100-llama-2-70b", "cosim-local/vidur-a100-dgx")
    assert options[f"{predictor}cache_dir"] == str(tmp_path / "cache")


@pytest.mark.parametrize("change", [{"enable_prefix_caching": True}, {"batching": "continuous"},
                                    {"chunk_size": 256}])
def test_a_deployment_vidur_would_not_run_as_cosim_did_is_refused(tmp_path: Path, change: dict[str, object]) -> None:
    config = yaml.safe_load(VIDUR_CONFIG.read_text())
    config["clients"][0]["scheduler"].update(change)
    (tmp_path / "changed.yaml").write_text(yaml.safe_dump(config))
    folder = _run_folder(tmp_path, [("0.1", 512, 128)], tmp_path / "changed.yaml")
    with pytest.raises(ValueError, match="Sarathi's chunked prefill"):
        vidur_args(folder, tmp_path / "trace.csv", tmp_path / "cache", tmp_path / "out")


def _vidur_data(root: Path, attention_shape: tuple[int, int, int, int]) -> Path:
    """A copy of Vidur's data folder in miniature: one A100 MLP profile of a 64q/8kv model, and the older A100
    attention profile of ``attention_shape`` (hidden, q heads, kv heads, TP)."""
    model = root / "profiling" / "compute" / "a100" / "org" / "model"
    model.mkdir(parents=True)
    (model / "mlp.csv").write_text("num_tokens,num_tensor_parallel_workers,n_head,n_kv_head,n_embd\n"
                                   "1,1,64,8,8192\n1,2,64,8,8192\n")
    legacy = root / "legacy" / "profiling" / "a100"
    legacy.mkdir(parents=True)
    hidden, q_heads, kv_heads, tp = attention_shape
    (legacy / "attention.csv").write_text("n_embd,n_q_head,n_kv_head,num_tensor_parallel_workers,batch_size\n"
                                          f"{hidden},{q_heads},{kv_heads},{tp},1\n")
    network = root / "profiling" / "network" / "a100_dgx"
    network.mkdir(parents=True)
    for name in ("all_reduce.csv", "send_recv.csv"):
        (network / name).write_text("size\n2048\n")
    return root


def test_vidur_takes_the_attention_profile_that_measured_the_models_shape(tmp_path: Path) -> None:
    data = _vidur_data(tmp_path, (8192, 64, 8, 2))
    files = vidur_profiles(data, "a100", "a100_dgx", "org/model", 2)
    assert files["attention.csv.xz"] == data / "legacy" / "profiling" / "a100" / "attention.csv"
    assert files["mlp.csv.xz"].parent.name == "model" and files["all_reduce.csv.xz"].parent.name == "a100_dgx"
    # The same shape at another TP, or another shape, is not this model's attention: Vidur would train on nothing.
    with pytest.raises(FileNotFoundError, match="no attention profile of org/model .* at TP 1 on a100"):
        vidur_profiles(data, "a100", "a100_dgx", "org/model", 1)
    with pytest.raises(FileNotFoundError, match="no MLP profile of org/other on a100"):
        vidur_profiles(data, "a100", "a100_dgx", "org/other", 2)


def test_another_attention_shape_is_not_the_models(tmp_path: Path) -> None:
    data = _vidur_data(tmp_path, (4096, 32, 32, 2))
    with pytest.raises(FileNotFoundError, match="hidden 8192, 64 query and 8 KV heads"):
        vidur_profiles(data, "a100", "a100_dgx", "org/model", 2)


def test_the_profiles_are_placed_as_a_hugging_face_dataset_snapshot(tmp_path: Path) -> None:
    data = _vidur_data(tmp_path / "data", (8192, 64, 8, 2))
    files = vidur_profiles(data, "a100", "a100_dgx", "org/model", 2)
    place_dataset(tmp_path / "cache", "compute", "cosim-local/vidur-a100-model", files, {"model": "org/model"})
    folder = tmp_path / "cache" / "profiling_data" / "compute" / "datasets--cosim-local--vidur-a100-model"
    snapshot = folder / "snapshots" / (folder / "refs" / "main").read_text()
    assert json.loads((snapshot / "config.json").read_text()) == {"model": "org/model"}
    for name, source in files.items():  # xz-compressed, as Vidur reads them, byte for byte
        assert lzma.decompress((snapshot / name).read_bytes()) == source.read_bytes()


@pytest.mark.skipif(not (VIDUR_VENV / "bin" / "python").exists(),
                    reason=f"no Vidur environment at {VIDUR_VENV} (CI has none; docs/performance.md makes it)")
def test_vidurs_offline_download_finds_the_placed_profiles(tmp_path: Path) -> None:
    data = _vidur_data(tmp_path / "data", (8192, 64, 8, 2))
    place_dataset(tmp_path / "cache", "compute", "cosim-local/vidur-a100-model",
                  vidur_profiles(data, "a100", "a100_dgx", "org/model", 2), {"model": "org/model"})
    # As Vidur's predictor calls it (sklearn_execution_time_predictor._get_input_files), with the Hub off.
    code = ("import sys, huggingface_hub as hub; print(hub.snapshot_download(repo_id=sys.argv[1], "
            "repo_type='dataset', cache_dir=sys.argv[2]))")
    done = subprocess.run([str(VIDUR_VENV / "bin" / "python"), "-c", code, "cosim-local/vidur-a100-model",
                           str(tmp_path / "cache" / "profiling_data" / "compute")], capture_output=True, text=True,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, timeout=120, check=True)
    assert sorted(path.name for path in Path(done.stdout.strip()).iterdir()) == [
        "all_reduce.csv.xz", "attention.csv.xz", "config.json", "mlp.csv.xz", "send_recv.csv.xz"]


def test_vidurs_outcome_is_read_from_its_request_metrics(tmp_path: Path) -> None:
    run = tmp_path / "out" / "2026-11-28_10-00-00-000000"
    run.mkdir(parents=True)
    with (run / "request_metrics.csv").open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["Request Id", "request_e2e_time", "prefill_e2e_time", "request_num_decode_tokens"])
        writer.writerow([0, 2.7, 0.2, 11.0])  # (2.7 - 0.2) / 10 = 0.25 s after the first token
        writer.writerow([1, 1.1, 0.4, 8.0])   # (1.1 - 0.4) / 7 = 0.1 s
    outcome = vidur_outcome(tmp_path / "out", 2, 3.0, 4.0)
    assert (outcome.name, outcome.completed, outcome.output_tokens, outcome.prefix_hit_rate) == ("Vidur", 2, 19, None)
    assert outcome.mean_ttft_ms == pytest.approx(300.0) and outcome.mean_tpot_ms == pytest.approx(175.0)


def test_vidur_without_its_environment_is_skipped_saying_so(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "peer_bench.py"), "--peer", "vidur", "--sizes",
                           "8,16", "--rounds", "1", "--no-grpc", "--vidur", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=300, check=True)
    assert f"Vidur skipped: no vidur in {tmp_path / 'none'}" in done.stderr
    assert "### cosim against Vidur" in done.stdout and "vidur-matched.yaml" in done.stdout
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in done.stdout.splitlines()
            if line.startswith("| cosim")]
    # Two sizes, cost then outcomes: every request finished with its 128 tokens, no prefix cached.
    assert [(row[1], row[2], row[3], row[6]) for row in rows[2:]] == [("8", "8", "1,024", "0.000"),
                                                                      ("16", "16", "2,048", "0.000")]
