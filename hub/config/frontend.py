"""The ``frontend`` section: the API server in front of each serving instance (docs/frontend.md).

With it, a run models what a client of vLLM's OpenAI-compatible server measures beyond the engine
(:mod:`cosim.hub.sim.frontend`): the request's handling and tokenization before the engine sees
it, and the output processing (detokenization) and streaming of every token after the engine
sampled it. Without it (the default) nothing changes: latencies end at the engine.

Every default cites a published measurement or vLLM's source; none is fitted to a serving run.
"""

from __future__ import annotations

from pydantic import Field

from .frozen import FrozenModel

# Each default, and where it comes from (docs/frontend.md has the derivations).
#: vLLM issue #19012 (2025-06): "for concurrency=1, DGX H100's CPU can do about only about 1k tokens/ms";
#: the same post times ``tokenizer("hi " * 10000)`` at 10.7 ms, 1.07 us a token.
TOKENIZE_S_PER_TOKEN = 1.07e-6
#: vLLM's ``AsyncMicrobatchTokenizer`` (vllm/utils/async_utils.py, PR #19334, removed by PR #45759 in
#: 2026-06): ``batch_wait_timeout_s=0.002``, ``max_batch_size=32``, one tokenizer thread.
TOKENIZER_BATCH_WAIT_S = 0.002
TOKENIZER_MAX_BATCH = 32
#: Output processing of one step, per sequence and per step: the median ``process_model_outputs`` of
#: Vidur's CPU-overhead profile (Llama-2-7B, TP1, A100 host; shared/data vidur/legacy/profiling/a100/
#: cpu_overheads.csv) is 0.1555 ms at 8 sequences and 2.0483 ms at 128: (2.0483 - 0.1555) / 120 per
#: sequence, and the rest at 8 sequences per step.
OUTPUT_S_PER_TOKEN = (2.0483e-3 - 0.1555e-3) / 120
OUTPUT_S_PER_STEP = 0.1555e-3 - 8 * OUTPUT_S_PER_TOKEN


class FrontendConfig(FrozenModel):
    """vLLM's API server in front of each serving instance, on when present (docs/frontend.md)."""

    request_s: float = Field(0.0, ge=0, le=3600, description="per request, before tokenization: HTTP receipt, "
                             "parsing, chat template, request checks, seconds (no published vLLM figure: 0)")
    tokenize_s_per_token: float = Field(TOKENIZE_S_PER_TOKEN, ge=0, le=1,
                                        description="tokenization of the prompt, seconds per prompt token (vLLM "
                                                    "issue #19012, a DGX H100's CPU)")
    tokenizer_batch_wait_s: float = Field(
        TOKENIZER_BATCH_WAIT_S, ge=0, le=3600, description="vLLM's AsyncMicrobatchTokenizer: a prompt waits this "
        "long for others to tokenize with it, unless the batch fills first (vLLM 0.10 to 0.2x: 0.002; 0 for "
        "versions without it)")
    tokenizer_max_batch: int = Field(TOKENIZER_MAX_BATCH, gt=0, le=1_000_000,
                                     description="the most prompts tokenized in one batch (vLLM: 32)")
    engine_handoff_s: float = Field(0.0, ge=0, le=3600, description="after tokenization, until the engine core "
                                    "holds the request (process_inputs, ZMQ), seconds (no published figure: 0)")
    output_s_per_step: float = Field(OUTPUT_S_PER_STEP, ge=0, le=3600,
                                     description="output processing of one engine step, seconds, plus "
                                                 "output_s_per_token per token it sampled")
    output_s_per_token: float = Field(OUTPUT_S_PER_TOKEN, ge=0, le=3600,
                                      description="output processing (detokenization, the streamed chunk) of "
                                                  "one token, seconds (Vidur's measured process_model_outputs)")
    network_latency_s: float = Field(0.0, ge=0, le=3600, description="one way between the client and the "
                                     "server, seconds (0: the same host)")
