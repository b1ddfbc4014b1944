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

import heapq
from array import array
from bisect import bisect_right
from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import TYPE_CHECKING, Protocol

from ..config.templates import LLM_STAGES
from ..errors import ScenarioError
from ..metrics.request_table import RequestColumns, RequestTable
from .admission import check_requests
from .arrivals import PendingRequests
from .clients.llm import LLMClient
from .clients.service import ServiceClient
from .clients.stages import KVRetrievalTimer, RagStageTimer
from .kernel import ARRIVAL, Kernel
from .pipelines import Pipeline, decode_kind
from .records import RequestRecord, StageRecord
from .request_log import RequestLog, RequestView
from .routing import Router, routes
from .scheduling import Sequence
from .workload import RequestSpecs

if TYPE_CHECKING:
    from .conversations import SessionDriver

# How many upcoming arrivals a client's next-arrival forecast looks through.
FORECAST_ARRIVALS = 8


# A decode client's next KV transfer, where none is in flight, is expected after this share of the
# mean gap between transfers to it: the median wait were they a Poisson stream (ln 2). The median
# rather than the mean: predictions past an arrival are wasted, and one that comes later costs a call.
MEDIAN_GAP_SHARE = 0.69
# The weight of each new gap in that mean (a moving average, so that it follows the load).
GAP_WEIGHT = 0.2


class TransferService(Protocol):
    """Moves data between two clients: ``on_done(duration_ns)`` runs when it arrives; ``start``
    returns when that is expected (a lookahead hint)."""

    def start(self, src: str, dst: str, size_bytes: int, on_done: Callable[[int], None]) -> int: ...


class Landings:
    """The KV transfers to a decode client, as its next-arrival hint: its requests come from prefill
    clients, so no arrival schedule says when."""

    __slots__ = ("ends", "gap_ns", "last_start_ns", "duration_ns")

    def __init__(self) -> None:
        self.ends: list[int] = []  # the expected ends of those in flight (a heap)
        self.gap_ns: float | None = None  # the mean gap between their starts
        self.last_start_ns: int | None = None
        self.duration_ns = 0  # how long the last one is expected to take

    def started(self, now_ns: int, end_ns: int) -> None:
        """A transfer to the client started at ``now_ns``, expected to end at ``end_ns``."""
        heapq.heappush(self.ends, end_ns)
        self.duration_ns = end_ns - now_ns
        if self.last_start_ns is not None:
            gap = now_ns - self.last_start_ns
            self.gap_ns = gap if self.gap_ns is None else self.gap_ns + GAP_WEIGHT * (gap - self.gap_ns)
        self.last_start_ns = now_ns

    def next_at(self, now_ns: int) -> int | None:
        """When the next transfer may land: the first in flight, else after the median gap (no
        sooner than a transfer takes); None before the gap is known."""
        while self.ends and self.ends[0] <= now_ns:
            heapq.heappop(self.ends)
        if self.ends:
            return self.ends[0]
        if self.gap_ns is None:
            return None
        return now_ns + max(int(MEDIAN_GAP_SHARE * self.gap_ns), self.duration_ns)


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
        # Requests not yet arrived, in flight, and finished (records, and the numbers the summary needs).
        self.pending: PendingRequests | None = None
        self.in_flight: dict[int, RequestRecord] = {}
        self._scheduled: RequestRecord | None = None  # the next to arrive, its arrival scheduled
        self._released: dict[int, RequestRecord] = {}  # session turns released, not yet arrived
        self.sessions: SessionDriver | None = None  # multi-turn sessions (hub/sim/conversations.py), if any
        self.log = RequestLog(spill=False)
        self.columns = RequestColumns()
        # Per model, the sorted arrival times: an int64 array that bisect searches and slices into Python ints
        # at no per-call cost of numpy's (8 bytes a request, as the numpy column was).
        self._arrivals: dict[str, array[int]] = {}
        # Per (stage kind, model), the clients serving it: routing asks per stage, the lookahead per
        # miss, and the answer changes only as clients come and go (register, unregister).
        self._candidates: dict[tuple[str, str], tuple[LLMClient, ...]] = {}
        self._landings: dict[str, Landings] = {}  # per decode client, the KV transfers to it
        self.num_finished = 0
        self.transfer_bytes = 0

    def register(self, client: LLMClient | ServiceClient) -> None:
        """Adds a client (routing prefers clients registered first)."""
        if isinstance(client, LLMClient):
            self.clients.append(client)
            self._candidates.clear()
        else:
            self.services.append(client)

    def unregister(self, client: LLMClient) -> None:
        """Routes no more stages to ``client`` (an autoscaled replica draining)."""
        self.clients.remove(client)
        self._candidates.clear()

    # -- arrivals ----------------------------------------------------------
    def schedule_arrivals(self, specs: RequestSpecs, pipelines: Seq[Pipeline], *, spill: bool = False) -> None:
        """Takes the requests and schedules their arrivals; ``spill``: finished requests' records go to
        a temporary file (:class:`RequestLog`), not memory.

        Raises:
            ScenarioError: a request no route through the LLM clients can ever serve (see
                :func:`check_requests`), before anything runs.
        """
        self.check(specs, pipelines)
        self.log = RequestLog(spill=spill)
        self.pending = PendingRequests(specs, pipelines)
        models = dict.fromkeys(p.model for p in pipelines)
        self._arrivals = {model: array("q", self.pending.arrival_times(model).tobytes()) for model in models}
        self._schedule_arrival()

    def check(self, specs: RequestSpecs, pipelines: Seq[Pipeline]) -> None:
        """Refuses a request no route through the LLM clients can ever serve (:func:`check_requests`)."""
        retrieved = [s.timer.config.top_k * s.timer.config.doc_tokens for s in self.services
                     if isinstance(s.timer, RagStageTimer)]
        check_requests([c.limits for c in self.clients if c.limits is not None], specs, pipelines,
                       retrieved_tokens=min(retrieved, default=0), route=routes(self.router.config))

    def schedule_sessions(self, sessions: SessionDriver, specs: RequestSpecs, pipelines: Seq[Pipeline], *,
                          spill: bool = False) -> None:
        """Runs multi-turn sessions: their turns arrive as ``sessions`` releases them (:meth:`release`).

        Args:
            sessions: the session driver.
            specs, pipelines: every turn known before the run, checked as :meth:`schedule_arrivals` does.
        """
        self.check(specs, pipelines)
        self.log = RequestLog(spill=spill)
        self.sessions = sessions
        sessions.start()

    def release(self, request: RequestRecord) -> None:
        """Schedules the arrival of a request made during the run (a session's turn)."""
        self._released[request.id] = request
        self.kernel.call_at(request.arrival_ns, ARRIVAL, self._arrive_released, request, label="arrival")

    def _arrive_released(self, request: RequestRecord) -> None:
        del self._released[request.id]
        self.in_flight[request.id] = request
        self.push_stage(request)

    def _schedule_arrival(self) -> None:
        """Schedules the next pending request's arrival: one at a time, so that requests not yet
        arrived cost a row of numbers each, not a record and an event (arrivals are the only events
        of their priority, so the order of events is the same as with all of them scheduled at once)."""
        scheduled = self._scheduled = self.pending.pop() if self.pending is not None else None
        if scheduled is not None:
            self.kernel.call_at(scheduled.arrival_ns, ARRIVAL, self._arrive, scheduled, label="arrival")

    def _arrive(self, request: RequestRecord) -> None:
        self.in_flight[request.id] = request
        self._schedule_arrival()
        pipeline = request.pipeline
        if pipeline and pipeline[0] in LLM_STAGES:  # as push_stage would route its first stage, one call sooner
            self._push_prefill(request)
        else:
            self.push_stage(request)

    @property
    def requests(self) -> RequestView:
        """Every request, sorted by id: finished (from :attr:`log`), in flight and not yet arrived."""
        return self.log.view(self.unfinished())

    def unfinished(self) -> list[RequestRecord]:
        """The requests not finished, sorted by id: in flight, then (in a partial run) not yet arrived."""
        scheduled = [self._scheduled] if self._scheduled is not None else []
        started = [*self.in_flight.values()]
        if self.sessions is not None:  # session turns: numbered as released, arriving in another order
            started = sorted([*started, *self._released.values()], key=lambda r: r.id)
        return [*started, *scheduled, *(self.pending.remaining() if self.pending is not None else ())]

    def table(self) -> RequestTable:
        """Every request's numbers, sorted by id (what the summary and the run folder need)."""
        return self.columns.table(self.unfinished())

    def next_arrival_at(self, client: LLMClient, now: int) -> int | None:
        """When the next request may reach ``client`` (a lookahead hint): for a client serving
        prompts, the first of the next few arrivals of its model that the router would send there
        (:meth:`Router.stages_before`), else the last of them, and where the router cannot tell, the
        next arrival's wait times the candidates; for a decode client, when the next KV transfer to
        it may land."""
        if "prefill" not in client.serves:
            landings = self._landings.get(client.name)
            return landings.next_at(now) if landings is not None else None
        model = client.info.model
        times = self._arrivals.get(model)
        if times is None:
            return None
        start = bisect_right(times, now)
        if start == len(times):
            return None
        candidates = self.candidates("prefill", model)
        ahead = self.router.stages_before(candidates, client)
        if ahead is None:
            return now + (times[start] - now) * len(candidates)
        return times[min(start + ahead, start + FORECAST_ARRIVALS - 1, len(times) - 1)]

    def candidates(self, kind: str, model: str) -> tuple[LLMClient, ...]:
        """LLM clients serving stage ``kind`` of ``model``, in config order."""
        key = (kind, model)
        found = self._candidates.get(key)
        if found is None:
            found = self._candidates[key] = tuple(c for c in self.clients if kind in c.serves and c.info.model == model)
        return found

    # -- stage push --------------------------------------------------------
    def push_stage(self, request: RequestRecord) -> None:
        """Routes the request's next stage, or finishes the request."""
        pipeline, index = request.pipeline, request.stage_index
        if index >= len(pipeline):
            request.finish_ns = self.kernel.now_ns
            self.num_finished += 1
            del self.in_flight[request.id]
            self.columns.add(request)
            self.log.add(request)
            self.on_request_done(request)
            if self.sessions is not None and request.session >= 0:
                self.sessions.turn_done(request)
            return
        kind = pipeline[index]
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
        stage = StageRecord("prefill", client.name, self.kernel.now_ns, -1, -1, transfer_ns)  # positional: cheaper
        request.stages.append(stage)
        # each read of a record's field is a call into the core: read once
        input_tokens, branches, retrieved_tokens = request.input_tokens, request.branches, request.retrieved_tokens
        target = request.output_tokens // branches if whole else 1
        self._check_fits(request, client, input_tokens, target, prefills=True)
        seq = Sequence(request, stage, num_tokens=input_tokens, num_computed=retrieved_tokens, target_generated=target,
                       prefix_id=request.prefix_id if not retrieved_tokens else None,
                       forks=branches - 1 if whole else 0)
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
        request, prefilled = seq.request, seq.stage.kind == "prefill"
        generated = request.generated_tokens >= request.output_tokens
        if generated or not prefilled:
            release_kv()
        if not prefilled:
            request.branches_done += 1
            if request.branches_done < request.branches:
                return  # one reasoning path ended; its siblings are still generating
        if generated:
            pipeline, index = request.pipeline, request.stage_index
            if "kv_retrieval" in pipeline and request.prefix_tokens and not request.retrieved_tokens:
                self._store_prefix(request)
            while index < len(pipeline) and pipeline[index] in LLM_STAGES:
                index += 1
            request.stage_index = index
            self.push_stage(request)
            return
        options = self.candidates("decode", request.model)
        decode_only = [c for c in options if "prefill" not in c.serves]
        client = self.router.choose(decode_only or options, request)
        decode = self._decode_sequence(request, client)
        if client.name == seq.stage.client:
            release_kv()
            self._start_decode(decode, client, 0)
            return
        # vLLM's decode instance pulls only the prompt blocks its own prefix cache lacks
        kv_tokens = request.input_tokens - (request.retrieved_tokens if request.retrieved_at_decode else 0)
        kv_tokens -= min(kv_tokens, client.cached_prefix_tokens(decode))
        size = int(self.kv_bytes_per_token[request.model] * kv_tokens)
        self.transfer_bytes += size

        def copied(duration_ns: int) -> None:
            release_kv()
            self._start_decode(decode, client, duration_ns)
        end = self.transfers.start(seq.stage.client, client.name, size, copied)
        self._landings.setdefault(client.name, Landings()).started(self.kernel.now_ns, end)

    def _decode_sequence(self, request: RequestRecord, client: LLMClient) -> Sequence:
        """The sequence that decodes ``request`` on ``client``: its prompt computed (transferred, or
        found in the client's prefix cache), its first token sampled. Its stage starts with it."""
        self._check_fits(request, client, request.input_tokens, request.output_tokens // request.branches,
                         prefills=False)
        stage = StageRecord(kind=decode_kind(request), client=client.name, enqueue_ns=-1)
        return Sequence(request, stage, num_tokens=request.input_tokens + 1,
                        num_computed=request.input_tokens, target_generated=request.output_tokens // request.branches,
                        generated=1, prefix_id=request.prefix_id if not request.retrieved_tokens else None,
                        forks=request.branches - 1)

    def _start_decode(self, seq: Sequence, client: LLMClient, transfer_ns: int) -> None:
        seq.stage.enqueue_ns, seq.stage.transfer_ns = self.kernel.now_ns, transfer_ns
        seq.request.stages.append(seq.stage)
        client.submit(seq)

    def _check_fits(self, request: RequestRecord, client: LLMClient, prompt: int, generated: int, *,
                    prefills: bool) -> None:
        """Refuses a request ``client`` can never serve (its prompt as it reaches the client, with any
        retrieved context): it would wait there forever."""
        problem = client.limits.problem(prompt, generated, prefills=prefills) if client.limits else None
        if problem is not None:
            part, why = problem
            raise ScenarioError(f"workload.{'input_tokens' if part == 'prompt' else 'output_tokens'}",
                                f"request {request.id} can never be served: {why}")

