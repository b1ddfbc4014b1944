"""Whether an LLM client can ever serve a request: checked when a workload is generated and when a
client takes a request, so that a request that can never finish is an error naming it and what does
not fit, not a run that ends with requests never finished.

A request can never finish on a client when (as vLLM refuses it):

- its prompt plus output exceeds the client's ``scheduler.max_model_len`` where one is set (vLLM's
  ``--max-model-len``; vLLM's OpenAI server refuses a prompt plus ``max_tokens`` beyond it). Unlike vLLM,
  cosim does not default it to the model's ``max_position_embeddings``: published traces hold prompts
  beyond some models' context, and studies replay them on those models;
- batching takes whole prompts (``static``, ``continuous``, ``mixed``: chunked prefill off) and the prompt
  exceeds ``max_num_batched_tokens`` (vLLM with chunked prefill off requires ``max_num_batched_tokens >=
  max_model_len``, so it never admits such a prompt); ``chunked`` splits it instead;
- its KV (prompt plus output less the last token, which is sampled but never computed) needs more blocks
  than the client has (vLLM's scheduler would wait for them forever).

A prefill-only client (disaggregated serving) holds the prompt and samples one token; a decode or mixed
client holds the whole sequence. Branches of multi-path reasoning share the prompt; each must fit alone.
A request must fit every client the router may send it to (any candidate; heavy_light: its group; ``Router.routes``), as
whichever it picks would hold it forever.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config.scheduler import SchedulerConfig
from ..errors import ScenarioError
from .pipelines import Pipeline, distinct_pipelines
from .scheduling import BatchingPolicy

if TYPE_CHECKING:
    from .workload import RequestSpec, RequestSpecs


@dataclass(frozen=True)
class ClientLimits:
    """What one LLM client can hold of one request.

    Attributes:
        name: the client's name.
        model: the key of ``models`` it serves.
        prefill: it serves prefills; decode: it serves decodes (a mixed client both).
        kv_blocks: KV blocks a request may use (vLLM's null block excluded).
        block_size: tokens per block.
        max_model_len: most prompt + output tokens of a request (0: no limit).
        prompt_budget: most prompt tokens one step computes where batching takes whole prompts
            (``max_num_batched_tokens``); None where prompts are chunked.
        batching: the batching policy (for messages).
    """

    name: str
    model: str
    prefill: bool
    decode: bool
    kv_blocks: int
    block_size: int
    max_model_len: int
    prompt_budget: int | None
    batching: str

    @classmethod
    def of(cls, name: str, model: str, serves: Iterable[str], scheduler: SchedulerConfig,
           kv_blocks: int) -> ClientLimits:
        """The limits of a client with ``scheduler``, ``kv_blocks`` usable blocks, serving ``serves``."""
        kinds = set(serves)
        whole = BatchingPolicy(scheduler).whole_prompts
        budget = scheduler.max_num_batched_tokens if whole else None
        return cls(name=name, model=model, prefill="prefill" in kinds, decode="decode" in kinds,
                   kv_blocks=kv_blocks, block_size=scheduler.block_size,
                   max_model_len=scheduler.max_model_len or 0, prompt_budget=budget,
                   batching=scheduler.batching)

    def problem(self, prompt: int, generated: int, *, prefills: bool = True) -> tuple[str, str] | None:
        """Why this client can never serve a sequence of ``prompt`` tokens that samples ``generated``
        tokens here (1 on a prefill-only client): (``"prompt"`` or ``"output"``, the one that does not
        fit; what is wrong), or None when it fits. ``prefills``: it computes the prompt here (not a
        decode whose prompt's KV was transferred)."""
        total = prompt + generated
        if self._too_long(total):
            part = "prompt" if prompt >= self.max_model_len else "output"
            return part, (f"prompt {prompt} + output {generated} = {total} tokens exceed the max_model_len "
                          f"{self.max_model_len} of client {self.name!r} (scheduler.max_model_len)")
        if prefills and self._over_budget(prompt):
            return "prompt", (f"prompt of {prompt} tokens exceeds the max_num_batched_tokens {self.prompt_budget} "
                              f"of client {self.name!r}, whose {self.batching} batching takes whole prompts "
                              "(chunked prefill off: vLLM refuses such a prompt); raise max_num_batched_tokens "
                              "or use batching: chunked")
        if self._too_big(total):
            kv_tokens = total - 1  # the last token is sampled, never computed
            capacity = self.kv_blocks * self.block_size
            part = "prompt" if self._too_big(prompt + 1) else "output"
            return part, (f"prompt {prompt} + output {generated} tokens need {kv_tokens} tokens of KV cache, "
                          f"more than client {self.name!r} holds ({self.kv_blocks} blocks x {self.block_size} = "
                          f"{capacity} tokens)" + ("" if part == "prompt" else "; the prompt fits, the output "
                                                   "does not"))
        return None

    def fails(self, prompt: np.ndarray, generated: np.ndarray) -> np.ndarray:
        """Per sequence, whether :meth:`problem` finds one (prompt computed here): its conditions over
        columns. Each grows with ``prompt`` and ``generated``, so a sequence that fits this way fits
        with fewer tokens and without the prompt computed here."""
        total = prompt + generated
        fails: np.ndarray = self._too_long(total) | self._over_budget(prompt) | self._too_big(total)
        return fails

    # The three conditions, each for one sequence or over columns (``total``: prompt + generated).
    def _too_long(self, total: Any) -> Any:
        return (total > self.max_model_len) & (self.max_model_len > 0)

    def _over_budget(self, prompt: Any) -> Any:
        return self.prompt_budget is not None and prompt > self.prompt_budget

    def _too_big(self, total: Any) -> Any:
        return -(-(total - 1) // self.block_size) > self.kv_blocks  # the last token is sampled, never computed


Route = Callable[[Sequence[ClientLimits], int], Sequence[ClientLimits]]


def every_client(candidates: Sequence[ClientLimits], prompt: int) -> Sequence[ClientLimits]:
    """The clients a router may pick for a stage: any candidate (round_robin, random, by load)."""
    return candidates


def request_problem(clients: Sequence[ClientLimits], model: str, prompt: int, output: int,
                    branches: int = 1, *, route: Route = every_client) -> tuple[str, str] | None:
    """Why some route the router may take cannot serve a request of ``model`` (None: every one can).

    A route is a client serving both prefill and decode, or a prefill-only client and then a decode
    client (decode-only ones when there are any, as the coordinator routes). A request one of them
    cannot serve would wait there forever when the router picks it.

    Args:
        clients: every LLM client's limits.
        model: the request's model (a key of ``models``).
        prompt, output: its prompt tokens and output tokens (all branches).
        branches: parallel reasoning paths; each generates ``output // branches`` tokens.
        route: narrows a stage's candidates to those the router may pick for this prompt.

    Returns:
        (the part that does not fit, ``"prompt"`` or ``"output"``; why, on the first client that
        cannot serve it), or None.
    """
    per_branch = output // branches
    serving = [c for c in clients if c.model == model]
    prefill = route([c for c in serving if c.prefill], prompt)
    decode = [c for c in serving if c.decode and not c.prefill] or [c for c in serving if c.decode]
    for client in prefill:
        if client.decode:  # the whole request runs here
            problem = client.problem(prompt, per_branch)
        else:  # its first token here, the rest on a decode client
            problem = client.problem(prompt, 1)
            if problem is None and per_branch > 1:
                problem = next((p for p in (c.problem(prompt, per_branch, prefills=False)
                                            for c in route(decode, prompt)) if p is not None), None)
        if problem is not None:
            return problem
    return None  # no prefill client at all is the config check's to report


def check_requests(clients: Sequence[ClientLimits], specs: RequestSpecs,
                   pipelines: Sequence[Pipeline], *, retrieved_tokens: int = 0,
                   route: Route = every_client) -> None:
    """Refuses a workload with a request that a route through the LLM ``clients`` can never serve
    (:func:`cosim.hub.sim.admission.request_problem`), naming the first such request (its trace row, when
    its lengths came from a trace), what does not fit, and how many more do not.

    ``retrieved_tokens``: what a ``rag`` stage adds to a prompt (the fewest of any RAG client), for
    requests whose pipeline has one. ``route``: the clients the router may pick (see
    :func:`request_problem`).

    Raises:
        ScenarioError: at the request's trace row, else at ``workload.input_tokens`` or
            ``workload.output_tokens`` (the part that does not fit).
    """
    if not clients:
        return
    first: tuple[RequestSpec, Pipeline, str, str] | None = None
    count = 0
    seen: dict[tuple[str, int, int, int], tuple[str, str] | None] = {}  # lengths repeat: check each once
    for index in _suspects(clients, specs, pipelines, retrieved_tokens).tolist():
        spec, pipeline = specs[index], pipelines[index]
        prompt = spec.input_tokens + (retrieved_tokens if "rag" in pipeline.stages else 0)
        key = (pipeline.model, prompt, spec.output_tokens, pipeline.branches)
        if key not in seen:
            seen[key] = request_problem(clients, *key, route=route)
        problem = seen[key]
        if problem is not None:
            count += 1
            if first is None:
                first = (spec, pipeline, *problem)
    if first is None:
        return
    spec, pipeline, part, why = first
    where = spec.source or f"workload.{'input_tokens' if part == 'prompt' else 'output_tokens'}"
    more = f" ({count - 1} more requests cannot either)" if count > 1 else ""
    retrieved = f" + {retrieved_tokens} retrieved" if retrieved_tokens and "rag" in pipeline.stages else ""
    raise ScenarioError(where, f"request {spec.id} (prompt {spec.input_tokens}{retrieved} tokens, output "
                               f"{spec.output_tokens} tokens) can never be served: {why}{more}")


def _suspects(clients: Sequence[ClientLimits], specs: RequestSpecs, pipelines: Sequence[Pipeline],
              retrieved_tokens: int) -> np.ndarray:
    """The indices of the requests that some client of their model cannot serve with the prompt computed
    there and a branch's output generated (:meth:`ClientLimits.fails`, over columns): every route of any
    other request fits, as each route's clients are some of those and ask no more of them."""
    inputs, outputs = specs.ints["input_tokens"], specs.ints["output_tokens"]
    kinds, distinct = distinct_pipelines(pipelines)
    suspect = np.zeros(len(specs), dtype=bool)
    for kind, pipeline in enumerate(distinct):
        members = np.flatnonzero(kinds == kind)
        prompts = inputs[members] + (retrieved_tokens if "rag" in pipeline.stages else 0)
        generated = np.maximum(outputs[members] // pipeline.branches, 1)
        for client in clients:
            if client.model == pipeline.model:
                suspect[members] |= client.fails(prompts, generated)
    return np.flatnonzero(suspect)
