"""The coordinator: MIST Algorithm 1 for prefill/decode serving.

Three kinds of events drive it:

- **stage push** (a request arrives, or its previous stage ended): route the
  stage to a client that serves that kind and model, start a transfer if the
  stage's input lives elsewhere (a prefill client's KV for a decode client),
  and hand the stage to the client when the data is there;
- **client step** (inside :class:`LLMClient`): finished stages come back
  through :meth:`Coordinator.on_stage_done`;
- **transfer done**: the stage is enqueued on its client.

A request on a ``mixed`` client runs prefill and decode as one ``generate``
stage; with ``prefill`` and ``decode`` clients it runs a ``prefill`` stage
(which yields the first token), a KV transfer, and a ``decode`` stage.
"""

from __future__ import annotations

from typing import Callable, Protocol

from .clients.llm import LLMClient
from .errors import ScenarioError
from .kernel import ARRIVAL, Kernel
from .records import RequestRecord, StageRecord
from .router import Router
from .scheduling import Sequence
from .workload import RequestSpec


class TransferService(Protocol):
    """Moves data between two clients: ``on_done(duration_ns)`` runs when it arrives."""

    def start(self, src: str, dst: str, size_bytes: int, on_done: Callable[[int], None]) -> None: ...


class Coordinator:
    """Routes stages to clients and moves requests through their pipelines.

    Args:
        kernel: the event kernel.
        clients: every LLM client, in config order.
        router: picks among candidate clients.
        transfers: times inter-client transfers.
        kv_bytes_per_token: per model name, KV bytes of one token (all layers).
        on_request_done: called with each finished request.
    """

    def __init__(self, *, kernel: Kernel, clients: list[LLMClient], router: Router, transfers: TransferService,
                 kv_bytes_per_token: dict[str, float],
                 on_request_done: Callable[[RequestRecord], None] = lambda r: None) -> None:
        self.kernel, self.router, self.transfers = kernel, router, transfers
        self.clients = clients
        self.kv_bytes_per_token = kv_bytes_per_token
        self.on_request_done = on_request_done
        self.requests: list[RequestRecord] = []
        self.num_finished = 0
        self.transfer_bytes = 0
        for client in clients:
            client.on_stage_done = self.on_stage_done

    # -- arrivals ----------------------------------------------------------
    def schedule_arrivals(self, specs: list[RequestSpec], default_model: str) -> None:
        """Creates the request records and schedules their arrivals."""
        for spec in specs:
            record = RequestRecord(id=spec.id, model=spec.model or default_model, arrival_ns=spec.arrival_ns,
                                   input_tokens=spec.input_tokens, output_tokens=spec.output_tokens,
                                   prefix_id=spec.prefix_id, prefix_tokens=spec.prefix_tokens)
            self.requests.append(record)
            self.kernel.call_at(spec.arrival_ns, ARRIVAL, self.push_prefill, record)

    def candidates(self, kind: str, model: str) -> list[LLMClient]:
        """Clients serving stage ``kind`` of ``model``, in config order."""
        return [c for c in self.clients if kind in c.serves and c.info.model == model]

    # -- stage push --------------------------------------------------------
    def push_prefill(self, request: RequestRecord) -> None:
        """A request arrived: route its prefill (or whole generation)."""
        options = self.candidates("prefill", request.model)
        if not options:
            raise ScenarioError("clients", f"no client serves stage 'prefill' of model {request.model!r} "
                                           f"(request {request.id})")
        client = self.router.choose(options, request)
        whole = "decode" in client.serves
        stage = StageRecord(kind="generate" if whole else "prefill", client=client.name,
                            enqueue_ns=self.kernel.now_ns)
        request.stages.append(stage)
        seq = Sequence(request, stage, num_tokens=request.input_tokens, num_computed=0,
                       target_generated=request.output_tokens if whole else 1, order=0,
                       prefix_id=request.prefix_id)
        self._hand_over(client, seq)

    def _hand_over(self, client: LLMClient, seq: Sequence) -> None:
        request = seq.request
        client.outstanding += 1
        client.outstanding_input_tokens += request.input_tokens
        client.submit(seq)

    def on_stage_done(self, seq: Sequence, now_ns: int) -> None:
        """A client finished a stage: push the request's next stage or finish it."""
        request = seq.request
        if request.generated_tokens >= request.output_tokens:
            request.finish_ns = now_ns
            self.num_finished += 1
            self.on_request_done(request)
            return
        options = self.candidates("decode", request.model)
        decode_only = [c for c in options if "prefill" not in c.serves]
        client = self.router.choose(decode_only or options, request)
        if client.name == seq.stage.client:
            self._start_decode(request, client, 0)
            return
        size = int(self.kv_bytes_per_token[request.model] * request.input_tokens)
        self.transfer_bytes += size
        self.transfers.start(seq.stage.client, client.name, size,
                             lambda duration_ns: self._start_decode(request, client, duration_ns))

    def _start_decode(self, request: RequestRecord, client: LLMClient, transfer_ns: int) -> None:
        stage = StageRecord(kind="decode", client=client.name, enqueue_ns=self.kernel.now_ns, transfer_ns=transfer_ns)
        request.stages.append(stage)
        seq = Sequence(request, stage, num_tokens=request.input_tokens + request.generated_tokens,
                       num_computed=request.input_tokens + request.generated_tokens - 1,
                       target_generated=request.output_tokens, order=0)
        self._hand_over(client, seq)
