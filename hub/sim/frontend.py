"""vLLM's API server in front of one serving instance: what a client measures beyond the engine.

vLLM's OpenAI-compatible server runs in a process of its own (``AsyncLLM``'s front end): it
receives a request over HTTP, renders and tokenizes its prompt, and hands it to the engine core
over ZMQ; the engine core sends each step's sampled tokens back, and the front end's output
handler detokenizes them and streams one chunk per token to the client. A :class:`FrontEnd`
models both ways for one instance (a data-parallel group shares one), from the ``frontend``
section (:class:`~cosim.hub.config.frontend.FrontendConfig`):

- **in** (:meth:`FrontEnd.admit`): a request reaches the server ``network_latency_s`` after it
  was sent, is handled for ``request_s``, and joins vLLM's ``AsyncMicrobatchTokenizer``. That
  batcher takes the first prompt in its queue, waits ``tokenizer_batch_wait_s`` for others (or
  until ``tokenizer_max_batch`` are in), then tokenizes the batch on its one thread
  (``tokenize_s_per_token`` per prompt token) before it takes the next; prompts queued meanwhile
  form the next batch. ``engine_handoff_s`` later the engine has the request: its arrival there
  is the record's ``arrival_ns`` (engine-side latencies start there), the time it was sent
  ``client_send_ns``;
- **out** (:meth:`FrontEnd.deliver`): each step's sampled tokens are processed on the server's
  one event loop, ``output_s_per_step`` plus ``output_s_per_token`` each, after any earlier
  step's; the client has them ``network_latency_s`` after that
  (``client_first_token_ns``, ``client_last_token_ns``), and the gaps between a request's
  tokens there are its client-side ITLs (:attr:`FrontEnd.token_gaps`).

Tokenization runs on its own thread and does not hold the event loop (HF tokenizers release
the GIL), so it does not delay output processing; request handling, which does, is not queued
behind it (a documented simplification: at benchmark rates it is a small share of the loop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..config.frontend import FrontendConfig
from .kernel import ARRIVAL, Kernel
from .records import RequestRecord
from .scheduling import Sequence as Seq
from .token_times import TokenTimes

NS_PER_S = 1_000_000_000


def _ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


@dataclass
class _Batch:
    """Prompts the tokenizer's batcher is gathering: opened at ``open_ns``, closed at ``close_ns``."""

    open_ns: int
    close_ns: int
    members: list[tuple[RequestRecord, Callable[[], None]]] = field(default_factory=list)
    tokens: int = 0


class FrontEnd:
    """The API server of one serving instance (see the module docstring).

    Args:
        config: the scenario's ``frontend`` section.
        kernel: the event kernel (ingress completions are events).
        name: the instance's name, for event labels.
    """

    def __init__(self, config: FrontendConfig, kernel: Kernel, name: str) -> None:
        self.config, self.kernel, self.name = config, kernel, name
        self._network_ns, self._request_ns = _ns(config.network_latency_s), _ns(config.request_s)
        self._wait_ns, self._handoff_ns = _ns(config.tokenizer_batch_wait_s), _ns(config.engine_handoff_s)
        self._step_ns = _ns(config.output_s_per_step)
        self._batch: _Batch | None = None  # the batch being gathered
        self._tokenizer_free_ns = 0  # when the batcher's thread is done with its batch
        self._loop_free_ns = 0  # when the event loop is done with the outputs it has
        self.token_gaps: dict[int, int] = {}  # client-side ITL: gap in ns -> tokens
        self.token_times = TokenTimes()  # tokens the clients got at each instant
        self.num_requests = self.num_batches = 0
        self.ingress_ns = 0  # summed over requests: sent -> the engine has it
        self.first_egress_ns = 0  # summed over first tokens: the step sampled it -> the client has it
        self.num_first_tokens = 0
        self.output_busy_ns = 0  # the event loop's time on outputs

    # -- in ----------------------------------------------------------------------
    def admit(self, request: RequestRecord, then: Callable[[], None]) -> None:
        """``request`` was sent now: ``then()`` runs when the engine has it (and ``arrival_ns`` says when).

        NOTE: requests reach the tokenizer's queue in the order they are sent (every one is handled
        for the same time), so a batch is final once a prompt queues at or after its close: its
        tokenization, and the engine's arrivals, are known then.
        """
        now = self.kernel.now_ns
        request.client_send_ns = now
        queued = now + self._network_ns + self._request_ns
        batch = self._batch
        if batch is None or queued >= batch.close_ns:
            if batch is not None:
                self._finish(batch)
            # The batcher takes the first prompt once its thread is free, then gathers for the wait.
            start = max(queued, self._tokenizer_free_ns)
            batch = self._batch = _Batch(open_ns=start, close_ns=start + self._wait_ns)
            self.kernel.call_at(batch.close_ns, ARRIVAL, self._on_close, batch, label=f"tokenize {self.name}")
        batch.members.append((request, then))
        batch.tokens += request.input_tokens
        if len(batch.members) >= self.config.tokenizer_max_batch:  # full: it goes as its last prompt queues
            batch.close_ns = max(queued, batch.open_ns)
            self._finish(batch)

    def _on_close(self, batch: _Batch) -> None:
        if self._batch is batch:  # no later prompt, nor its filling up, finished it already
            self._finish(batch)

    def _finish(self, batch: _Batch) -> None:
        """The batch, its members final, is tokenized from its close; then each request goes to the engine."""
        self._batch = None
        done = batch.close_ns + _ns(batch.tokens * self.config.tokenize_s_per_token)
        self._tokenizer_free_ns = done
        self.num_batches += 1
        ready = done + self._handoff_ns
        for request, then in batch.members:
            self.num_requests += 1
            self.ingress_ns += ready - request.client_send_ns
            request.arrival_ns = ready
            self.kernel.call_at(ready, ARRIVAL, then, label="engine gets a request")

    # -- out ---------------------------------------------------------------------
    def deliver(self, sampled: Sequence[Seq], now_ns: int) -> None:
        """A step that ended at ``now_ns`` sampled a token for each of ``sampled``: the event loop
        processes them after what it has, and the client gets each when that is done."""
        if not sampled:
            return
        start = max(now_ns, self._loop_free_ns)
        busy = self._step_ns + _ns(len(sampled) * self.config.output_s_per_token)
        self._loop_free_ns = start + busy
        self.output_busy_ns += busy
        at = self._loop_free_ns + self._network_ns
        gaps, timed = self.token_gaps, 0
        for seq in sampled:
            request = seq.request
            if request.client_first_token_ns < 0:
                request.client_first_token_ns = at
                self.first_egress_ns += at - now_ns
                self.num_first_tokens += 1
                timed += 1
                if request.itl_ns is not None:  # the run keeps each request's gaps: the client's too
                    request.client_itl_ns = []
            else:
                gap = at - request.client_last_token_ns
                if gap:  # parallel paths of a request sampling in one step count once, as the engine's ITL
                    gaps[gap] = gaps.get(gap, 0) + 1
                    timed += 1
                    if request.client_itl_ns is not None:
                        request.client_itl_ns.append(gap)
            request.client_last_token_ns = at
        if timed:
            self.token_times.add(at, timed)

    def summary(self, sim_time_ns: int) -> dict[str, float | int | None]:
        """What the front end did: requests, tokenizer batches, mean time in, mean time out of a first
        token (the two front-end parts of a client's TTFT, docs/validation.md), and the event loop's load."""
        return {"requests": self.num_requests, "tokenizer_batches": self.num_batches,
                "mean_tokenizer_batch": self.num_requests / self.num_batches if self.num_batches else None,
                "mean_ingress_s": self.ingress_ns / self.num_requests / NS_PER_S if self.num_requests else None,
                "mean_first_token_egress_s": (self.first_egress_ns / self.num_first_tokens / NS_PER_S
                                              if self.num_first_tokens else None),
                "output_utilization": self.output_busy_ns / sim_time_ns if sim_time_ns > 0 else None}
