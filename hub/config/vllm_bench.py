"""``workload.vllm_bench``: the workload of a ``vllm bench serve`` command line, by its options.

``vllm bench serve`` (vLLM's ``benchmarks/datasets.py`` and ``benchmarks/serve.py``) sends
``--num-prompts`` requests from a dataset at ``--request-rate`` (``inf``: all at once), with
``--burstiness`` shaping the gaps (gamma of shape ``burstiness``; 1 is Poisson). Two datasets are
taken here, with the options' own names (dashes or underscores):

- ``random``: prompt lengths uniform in ``[floor(input_len x (1 - range_ratio)), ceil(input_len x
  (1 + range_ratio))]``, outputs likewise, after a ``prefix_len``-token prefix every request shares;
- ``sharegpt``: each conversation's first message and answer (``dataset_path``, a ShareGPT JSON
  file), in the file's order, lengths counted at ``chars_per_token`` (vLLM tokenizes; cosim has no
  tokenizer), ``sharegpt_output_len`` replacing the answer's length where given; as vLLM, pairs
  with a prompt or answer under 4 tokens are dropped, and so are prompts over 1024 tokens and
  pairs over 2048 unless the output length is fixed.

:func:`expand_vllm_bench` writes the section as cosim's own workload keys (requests, arrival,
lengths, prefix, trace), so everything downstream is the ordinary workload.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from .bounds import MAX_RATE_PER_S, MAX_REQUESTS, MAX_TOKENS
from .frozen import FrozenModel


class VllmBenchConfig(FrozenModel):
    """The dataset and load options of ``vllm bench serve`` (its defaults where it has them)."""

    dataset_name: Literal["random", "sharegpt"] = Field("random", description="--dataset-name: random or sharegpt.")
    num_prompts: int = Field(1000, ge=1, le=MAX_REQUESTS, description="--num-prompts: requests to send.")
    request_rate: float | Literal["inf"] = Field(
        "inf", description="--request-rate: requests per second; inf sends them all at time 0.")
    burstiness: float = Field(1.0, gt=0, le=1e3, description="--burstiness: gamma shape of the gaps (1: Poisson).")
    random_input_len: int = Field(1024, ge=1, le=MAX_TOKENS, description="--random-input-len (tokens).")
    random_output_len: int = Field(128, ge=1, le=MAX_TOKENS, description="--random-output-len (tokens).")
    random_range_ratio: float = Field(0.0, ge=0, lt=1, description="--random-range-ratio: lengths uniform within "
                                                                  "+-ratio of the given ones.")
    random_prefix_len: int = Field(0, ge=0, le=MAX_TOKENS, description="--random-prefix-len: tokens every prompt "
                                                                       "starts with.")
    dataset_path: str | None = Field(None, description="--dataset-path: the ShareGPT JSON file (sharegpt).")
    sharegpt_output_len: int | None = Field(None, ge=1, le=MAX_TOKENS,
                                            description="--sharegpt-output-len: every output this long.")
    chars_per_token: float = Field(4.0, gt=0, le=1000, description="sharegpt: characters per token (cosim's count; "
                                                                   "vLLM tokenizes).")

    @model_validator(mode="before")
    @classmethod
    def _dashes(cls, data: Any) -> Any:
        """``random-input-len`` as ``random_input_len``: the command line's spelling is accepted."""
        if isinstance(data, dict):
            return {str(key).replace("-", "_"): value for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _check(self) -> VllmBenchConfig:
        if self.dataset_name == "sharegpt" and self.dataset_path is None:
            raise ValueError("dataset_name sharegpt needs dataset_path (a ShareGPT JSON file)")
        if isinstance(self.request_rate, float | int) and not 0 < self.request_rate <= MAX_RATE_PER_S:
            raise ValueError(f"request_rate must be in (0, {MAX_RATE_PER_S:g}] or inf, got {self.request_rate}")
        return self


def _arrival(bench: VllmBenchConfig) -> dict[str, Any]:
    if bench.request_rate == "inf":
        return {"process": "constant"}
    if bench.burstiness == 1.0:
        return {"process": "poisson", "rate_per_s": float(bench.request_rate)}
    # vLLM draws gaps from gamma(shape=burstiness, scale=1/(rate x burstiness)): CV = 1/sqrt(burstiness)
    return {"process": "gamma", "rate_per_s": float(bench.request_rate), "cv": 1.0 / math.sqrt(bench.burstiness)}


def _uniform(length: int, ratio: float) -> dict[str, Any]:
    low, high = max(1, math.floor(length * (1 - ratio))), math.ceil(length * (1 + ratio))
    return {"dist": "fixed", "value": length} if low == high else {"dist": "uniform", "low": low, "high": high}


def expand_vllm_bench(data: dict[str, Any]) -> dict[str, Any]:
    """The ``workload:`` mapping with its ``vllm_bench`` section written as cosim's own keys in its
    place; a mapping without one, unchanged. Validates the section first.

    Raises:
        pydantic.ValidationError: a bad option (located under ``vllm_bench``).
    """
    raw = data.get("vllm_bench")
    if not isinstance(raw, dict):
        return data
    bench = VllmBenchConfig.model_validate(raw)
    clash = sorted(k for k in ("requests", "arrival", "input_tokens", "output_tokens", "prefix", "trace") if k in data)
    if clash:
        raise ValueError(f"vllm_bench gives the requests, their lengths and times: remove {', '.join(clash)}")
    out = {key: value for key, value in data.items() if key != "vllm_bench"}
    out.update(requests=bench.num_prompts, arrival=_arrival(bench))
    if bench.dataset_name == "random":
        out["input_tokens"] = _uniform(bench.random_input_len, bench.random_range_ratio)
        out["output_tokens"] = _uniform(bench.random_output_len, bench.random_range_ratio)
        if bench.random_prefix_len:
            out["prefix"] = {"num_prefixes": 1, "tokens": bench.random_prefix_len}
        return out
    assert bench.dataset_path is not None  # validated
    out["trace"] = {"path": bench.dataset_path, "format": "sharegpt", "chars_per_token": bench.chars_per_token,
                    "fixed_output_tokens": bench.sharegpt_output_len}
    out["input_tokens"] = {"dist": "trace"}
    out["output_tokens"] = {"dist": "trace"}
    return out
