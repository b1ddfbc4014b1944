"""The coordinator: MIST Algorithm 1 over multi-stage request pipelines.

Three kinds of events drive it:

- **stage push** (a request arrives, or its previous stage ended): route the
  stage to a client that serves that kind (and the request's model, for LLM
  stages), start a transfer when the stage's input lives elsewhere (a RAG
  client's retrieved context, a prefill client's KV for a decode client),
  and hand the stage to the client when the data is there;
- **client step** (inside the clients): finished stages come back through
  :meth:`Coordinator.on_llm_done` or :meth:`Coordinator.on_service_done`;
- **transfer done**: the stage is enqueued on its client.

The LLM stages of a pipeline (prefill, then decode and/or reason) run as one
sequence on a ``mixed`` client; with ``prefill`` and ``decode`` clients the
prefill client yields the first token and the rest runs on a decode client
after the KV transfer.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import Protocol

from .clients.llm import LLMClient
from .clients.service import ServiceClient
from .clients.stages import KVRetrievalTimer
from .errors import ScenarioError
from .kernel import ARRIVAL, Kernel
from .pipelines import LLM_STAGES, Pipeline, decode_kind
from .records import RequestRecord, StageRecord
from .router import Router
from .scheduling import Sequence
from .workload import RequestSpec

# How many upcoming arrivals a client's next-arrival forecast looks through.
FORECAST_ARRIVALS = 8


class TransferService(Protocol):
    """Moves data between two clients: ``on_done(duration_ns)`` runs when it arrives."""

    def start(self, src: str, dst: str, size_bytes: int, on_done: Callable[[int], None]) -> None: ...


class Coordinator:
    """Routes stages to clients and moves requests through their pipelines.

    Clients are built with the coordinator as their stage sink, then :meth:`register` ed.

    Args:
        kernel: the event kernel.
        router: picks among candidate clients.
        transfers: times inter-client transfers.
        kv_bytes_per_token: per model name, KV bytes of one token (all layers).
        on_request_done: called with each finished request.
    """

    def __init__(self, *, kernel: Kernel, router: Router, transfers: TransferService,
                 kv_bytes_per_token: dict[str, float], on_request_done: Callable[[RequestRecord], None]) -> None:
        self.kernel, self.router, self.transfers = kernel, router, transfers
        self.kv_bytes_per_token = kv_bytes_per_token
        self.on_request_done = on_request_done
        self.clients: list[LLMClient] = []
        self.services: list[ServiceClient] = []
        self.requests: list[RequestRecord] = []
        self._arrivals: dict[str, list[int]] = {}  # per model, sorted arrival times
        self.num_finished = 0
        self.transfer_bytes = 0

    def register(self, client: LLMClient | ServiceClient) -> None:
        """Adds a client (routing prefers clients registered first)."""
        if isinstance(client, LLMClient):
            self.clients.append(client)
        else:
            self.services.append(client)

    # -- arrivals ----------------------------------------------------------
    def schedule_arrivals(self, specs: Seq[RequestSpec], pipelines: Seq[Pipeline]) -> None:
        """Creates the request records and schedules their arrivals."""
        for spec, pipeline in zip(specs, pipelines):
            record = RequestRecord(id=spec.id, model=pipeline.model, arrival_ns=spec.arrival_ns,
                                   input_tokens=spec.input_tokens, output_tokens=spec.output_tokens,
                                   prefix_id=spec.prefix_id, prefix_tokens=spec.prefix_tokens,
                                   prompt_token_ids=spec.prompt_token_ids,
                                   template=pipeline.template, pipeline=pipeline.stages,
                                   branches=pipeline.branches)
            self.requests.append(record)
            self.kernel.call_at(spec.arrival_ns, ARRIVAL, self.push_stage, record, label="arrival")
        for spec, pipeline in zip(specs, pipelines):
            self._arrivals.setdefault(pipeline.model, []).append(spec.arrival_ns)
        for times in self._arrivals.values():
            times.sort()

    def next_arrival_at(self, client: LLMClient, now: int) -> int | None:
        """When the next request may reach ``client`` (a lookahead hint): the first of the next
        few arrivals of its model that the router's forecast sends there, else the last of
        them; where the router cannot forecast, the next arrival's wait times the candidates."""
        times = self._arrivals.get(client.info.model, [])
        start = bisect.bisect_right(times, now)
        upcoming = times[start:start + FORECAST_ARRIVALS]
        if not upcoming:
            return None
        candidates = self.candidates("prefill", client.info.model)
        plan = self.router.forecast(candidates, len(upcoming))
        if plan is None:
            return now + (upcoming[0] - now) * len(candidates)
        return next((t for t, target in zip(upcoming, plan) if target is client), upcoming[-1])

    def candidates(self, kind: str, model: str) -> list[LLMClient]:
        """LLM clients serving stage ``kind`` of ``model``, in config order."""
        return [c for c in self.clients if kind in c.serves and c.info.model == model]

    # -- stage push --------------------------------------------------------
    def push_stage(self, request: RequestRecord) -> None:
        """Routes the request's next stage, or finishes the request."""
        if request.stage_index >= len(request.pipeline):
            request.finish_ns = self.kernel.now_ns
            self.num_finished += 1
            self.on_request_done(request)
            return
        kind = request.pipeline[request.stage_index]
        if kind in LLM_STAGES:
            self._push_prefill(request)
            return
        options = [s for s in self.services if s.kind == kind]
        if not options:
            raise ScenarioError("clients", f"no client serves stage {kind!r} (template {request.template!r})")
        service = self.router.choose(options, request)
        stage = StageRecord(kind=kind, client=service.name, enqueue_ns=self.kernel.now_ns)
        request.stages.append(stage)
        service.submit(request, stage)

    def on_service_done(self, request: RequestRecord, stage: StageRecord) -> None:
        """A pre/post-processing, RAG or KV-retrieval stage ended."""
        request.stage_index += 1
        if stage.kind == "rag":
            request.data_at = stage.client
        self.push_stage(request)

    def _push_prefill(self, request: RequestRecord) -> None:
        options = self.candidates("prefill", request.model)
        if not options:
            raise ScenarioError("clients", f"no client serves stage 'prefill' of model {request.model!r} "
                                           f"(template {request.template!r}, request {request.id})")
        client = self.router.choose(options, request)
        if request.data_at and request.context_bytes:
            source, request.data_at = request.data_at, ""
            self.transfer_bytes += request.context_bytes
            self.transfers.start(source, client.name, request.context_bytes,
                                 lambda ns: self._start_prefill(request, client, ns))
            return
        self._start_prefill(request, client, 0)

    def _start_prefill(self, request: RequestRecord, client: LLMClient, transfer_ns: int) -> None:
        whole = "decode" in client.serves
        stage = StageRecord(kind="prefill", client=client.name, enqueue_ns=self.kernel.now_ns,
                            transfer_ns=transfer_ns)
        request.stages.append(stage)
        per_branch = request.output_tokens // request.branches
        seq = Sequence(request, stage, num_tokens=request.input_tokens, num_computed=request.retrieved_tokens,
                       target_generated=per_branch if whole else 1,
                       prefix_id=request.prefix_id if not request.retrieved_tokens else None,
                       forks=request.branches - 1 if whole else 0)
        client.submit(seq)

    def _store_prefix(self, request: RequestRecord) -> None:
        """A prefix the request's KV-retrieval client missed was recomputed: that client stores it."""
        looked_up = next(stage.client for stage in request.stages if stage.kind == "kv_retrieval")
        timer = next(s.timer for s in self.services if s.name == looked_up)
        assert isinstance(timer, KVRetrievalTimer)
        timer.store(request)

    def on_llm_done(self, seq: Sequence, now_ns: int, release_kv: Callable[[], None]) -> None:
        """An LLM client finished its part: decode elsewhere (its KV freed once copied), or move
        past the LLM stages."""
        request = seq.request
        if request.generated_tokens >= request.output_tokens or seq.stage.kind != "prefill":
            release_kv()
        if seq.stage.kind != "prefill":
            request.branches_done += 1
            if request.branches_done < request.branches:
                return  # one reasoning path ended; its siblings are still generating
        if request.generated_tokens >= request.output_tokens:
            if "kv_retrieval" in request.pipeline and request.prefix_tokens and not request.retrieved_tokens:
                self._store_prefix(request)
            while request.stage_index < len(request.pipeline) and request.pipeline[request.stage_index] in LLM_STAGES:
                request.stage_index += 1
            self.push_stage(request)
            return
        options = self.candidates("decode", request.model)
        decode_only = [c for c in options if "prefill" not in c.serves]
        client = self.router.choose(decode_only or options, request)
        if client.name == seq.stage.client:
            release_kv()
            self._start_decode(request, client, 0)
            return
        kv_tokens = request.input_tokens - (request.retrieved_tokens if request.retrieved_at_decode else 0)
        size = int(self.kv_bytes_per_token[request.model] * kv_tokens)
        self.transfer_bytes += size

        def copied(duration_ns: int) -> None:
            release_kv()
            self._start_decode(request, client, duration_ns)
        self.transfers.start(seq.stage.client, client.name, size, copied)

    def _start_decode(self, request: RequestRecord, client: LLMClient, transfer_ns: int) -> None:
        stage = StageRecord(kind=decode_kind(request), client=client.name, enqueue_ns=self.kernel.now_ns,
                            transfer_ns=transfer_ns)
        request.stages.append(stage)
        seq = Sequence(request, stage, num_tokens=request.input_tokens + 1, num_computed=request.input_tokens,
                       target_generated=request.output_tokens // request.branches, generated=1,
                       forks=request.branches - 1)
        client.submit(seq)
