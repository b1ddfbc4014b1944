"""Records what ``vllm bench serve`` prints and saves, for the conformance tests of cosim's benchmark block.

Regenerate (from the repository root, with a Python that has vLLM installed, not cosim's venv)::

    python3 -m venv /work/oracles/vllm && /work/oracles/vllm/bin/pip install vllm==0.18.0
    /work/oracles/vllm/bin/python scripts/record_vllm_bench.py [RUN ...] [--out DIR]

No GPU, model or download is needed: only vLLM's benchmark client runs (``vllm bench serve``,
``vllm/benchmarks/serve.py``), against :class:`CompletionServer`, a stand-in for ``vllm serve`` on
127.0.0.1 that streams ``/v1/completions`` as vLLM's OpenAI server does (server-sent events, one
token per chunk, the last chunk with ``finish_reason`` ``length``, then a chunk with the ``usage`` and
``data: [DONE]``): the first token after ``FIRST_TOKEN_S``, each later one ``TOKEN_GAP_S`` after the
last, every request generating exactly its ``max_tokens``. The tokenizer is a word-level one written
to a temporary folder (``w0`` to ``w<VOCAB_SIZE - 2>`` and ``<unk>``, split on spaces), so that the
random dataset's prompts decode and encode back to exactly ``--random-input-len`` tokens.

Each run (``RUNS``) is ``vllm bench serve --backend openai --dataset-name random`` with ``WORKLOAD``
and the run's own options, and writes into ``tests/conformance/vllm_bench/``:

- ``<run>.txt``: the "Serving Benchmark Result" block it printed, byte for byte (vLLM pads every
  value to 10 columns, so lines end in spaces).
- ``<run>.json``: the file ``--save-result`` wrote, unchanged (one line). ``model_id`` is
  ``MODEL``; ``tokenizer_id`` is ``tokenizer``, the folder's name relative to the run's working
  directory. The timings are the stand-in's, measured by vLLM's client on this machine: they differ
  from run to run, the keys, their order and the text's layout do not.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "conformance" / "vllm_bench"
MODEL = "cosim/stand-in"  # the name the requests carry; the stand-in serves any
VOCAB_SIZE = 1000
FIRST_TOKEN_S = 0.020
TOKEN_GAP_S = 0.010
# The workload every run shares: 20 random prompts of 200 tokens, 16 tokens out each.
WORKLOAD = ["--dataset-name", "random", "--random-input-len", "200", "--random-output-len", "16",
            "--num-prompts", "20", "--seed", "0"]
RUNS: dict[str, list[str]] = {
    # vLLM's defaults: --metric-percentiles 99, --percentile-metrics ttft,tpot,itl, no goodput.
    "serve_result": ["--request-rate", "10"],
    # --save-detailed: the per-request arrays too.
    "serve_result_detailed": ["--request-rate", "10", "--save-detailed", "--metric-percentiles", "50,99"],
    # Other percentiles and metrics, and the goodput line.
    "serve_result_options": ["--request-rate", "10", "--metric-percentiles", "50,99.9",
                             "--percentile-metrics", "e2el,ttft", "--goodput", "ttft:1000"],
    # All at once (no rate line, request_rate "inf"), at most 4 in flight (the concurrency line).
    "serve_result_closed": ["--request-rate", "inf", "--max-concurrency", "4"],
}
BLOCK = re.compile(r"^=+ Serving Benchmark Result =+\n.*?^={50}\n", re.MULTILINE | re.DOTALL)

log = logging.getLogger("record_vllm_bench")


class _CompletionHandler(BaseHTTPRequestHandler):
    """``POST /v1/completions`` with ``stream: true``, answered as vLLM's OpenAI server streams it."""

    protocol_version = "HTTP/1.1"  # chunked transfer, kept-alive connections: as uvicorn serves

    def do_POST(self) -> None:
        if self.path != "/v1/completions":
            self.send_error(404)
            return
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        server: CompletionServer = self.server  # type: ignore[assignment]
        request_id = f"cmpl-{server.next_id()}"
        num_tokens, prompt_tokens = int(request["max_tokens"]), len(str(request["prompt"]).split())
        time.sleep(FIRST_TOKEN_S)
        for index in range(num_tokens):
            if index:
                time.sleep(TOKEN_GAP_S)
            finish = "length" if index == num_tokens - 1 else None
            choice = {"index": 0, "text": f" w{index % (VOCAB_SIZE - 1)}", "logprobs": None,
                      "finish_reason": finish, "stop_reason": None}
            self._event(_chunk(request_id, request["model"], [choice], None))
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + num_tokens,
                 "completion_tokens": num_tokens}
        self._event(_chunk(request_id, request["model"], [], usage))
        self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def _event(self, data: str) -> None:
        """One server-sent event in one HTTP chunk, sent at once."""
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


def _chunk(request_id: str, model: str, choices: list[dict[str, Any]], usage: dict[str, int] | None) -> str:
    return json.dumps({"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
                       "choices": choices, "usage": usage})


class CompletionServer(ThreadingHTTPServer):
    """The stand-in for ``vllm serve`` on 127.0.0.1 (a free port), one thread per connection."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _CompletionHandler)
        self._ids = 0
        self._lock = threading.Lock()

    def next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def write_tokenizer(folder: Path) -> None:
    """A word-level Hugging Face tokenizer folder: ``<unk>`` (id 0, special) and ``w0`` ... ``w998``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0} | {f"w{i}": i + 1 for i in range(VOCAB_SIZE - 1)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>").save_pretrained(folder)


def record(name: str, options: list[str], base_url: str, workdir: Path, out_dir: Path) -> None:
    """Runs ``vllm bench serve`` in ``workdir`` (which holds ``tokenizer/``) and writes ``<name>.txt``
    and ``<name>.json`` into ``out_dir``.

    Raises:
        RuntimeError: the command failed, or printed no result block.
    """
    vllm = Path(sys.executable).with_name("vllm")
    command = [str(vllm), "bench", "serve", "--backend", "openai", "--base-url", base_url, "--model", MODEL,
               "--tokenizer", "tokenizer", *WORKLOAD, *options, "--save-result", "--result-dir", "results",
               "--result-filename", f"{name}.json"]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "127.0.0.1",
                        "no_proxy": "127.0.0.1"}
    log.info("%s: %s", name, " ".join(command[1:]))
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, check=False)
    block = BLOCK.search(done.stdout)
    if done.returncode != 0 or block is None:
        raise RuntimeError(f"{name}: vllm bench serve exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    (out_dir / f"{name}.txt").write_text(block.group(0))
    (out_dir / f"{name}.json").write_bytes((workdir / "results" / f"{name}.json").read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("runs", nargs="*", help=f"runs to record, of {', '.join(RUNS)} (default: all)")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default: {OUT_DIR})")
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.runs) - set(RUNS)):
        parser.error(f"unknown run(s) {', '.join(unknown)}; known: {', '.join(RUNS)}")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = CompletionServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as temp:
            workdir = Path(temp)
            write_tokenizer(workdir / "tokenizer")
            args.out.mkdir(parents=True, exist_ok=True)
            for name in args.runs or RUNS:
                record(name, RUNS[name], server.base_url, workdir, args.out)
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
