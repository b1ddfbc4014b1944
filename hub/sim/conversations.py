"""Multi-turn sessions: turns released as their predecessors finish, carrying the history.

A session (``workload.sessions``, docs/sessions.md) is a chain of turns. :class:`SessionSource`
draws session ``k`` (synthetic, from a random stream of its own, so that the order in which a
closed loop asks for sessions changes no draw; or the ``k``-th session of a file) as a
:class:`SessionSpec`. :class:`SessionDriver` runs them inside a simulation: it releases a turn
when its predecessors finished, plus its think time, as a request whose prompt repeats the
history (the previous turn's prompt and output: :class:`~cosim.hub.sim.workload.token_ids.SegmentIds`
that agree with the history's, so prefix caching and ``prefix_aware`` routing see the reuse),
starts sessions open loop (``workload.arrival``) or closed loop (``users``), and reports the
``sessions`` block of summary.json (:meth:`SessionDriver.summary`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..config.bounds import MAX_TIME_NS, MAX_TIME_S
from ..config.workload import (
    ExponentialTime,
    FixedTime,
    LognormalTime,
    TimeDist,
    TraceArrival,
    TraceLength,
    UniformTime,
    WorkloadConfig,
)
from ..errors import ScenarioError
from ..metrics.request_table import RequestTable
from ..metrics.stats import stat_block
from .kernel import ARRIVAL, Kernel
from .pipelines import Pipeline
from .records import RequestRecord
from .staged import StageClock
from .workload.generator import RequestSpec, RequestSpecs
from .workload.sampling import clip_lengths, sample_arrivals_ns, sample_lengths, sample_prefixes
from .workload.session_traces import TracedSession, load_sessions
from .workload.token_ids import SEGMENTS_PER_SESSION, SegmentIds, prefix_key, session_key

SESSION_STREAM = 0x5E55  # session k draws from default_rng([seed, SESSION_STREAM, k])
START_STREAM = 0x5E56  # the sessions' start times


@dataclass(frozen=True, slots=True)
class TurnSpec:
    """One turn: its whole prompt (the history it repeats, then new tokens), its output, the
    pause between its predecessors' end and its release, and its predecessors (turn indices).

    A staged turn (an inference-perf load stage, :mod:`.staged`) also has its ``stage`` (-1: none)
    and its send time ``offset_ns`` after that stage's start: it is released at that time or when its
    predecessors end, whichever is later. ``new_key`` names the content of its new tokens where
    other turns repeat it (default: its own, :func:`session_key`); ``label`` becomes its request's
    class (summary.json's ``classes``).
    """

    input_tokens: int
    output_tokens: int
    think_ns: int
    parents: tuple[int, ...]
    stage: int = -1
    offset_ns: int = 0
    new_key: int | None = None
    label: str | None = None


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """One session: its turns, its open-loop start (ns; None: a closed loop's user starts it), its
    declared shared prefix (``workload.prefix``: index, tokens; -1, 0: none), and its file row."""

    index: int
    turns: tuple[TurnSpec, ...]
    start_ns: int | None = None
    prefix_index: int = -1
    prefix_tokens: int = 0
    source: str | None = None


def sample_times_ns(dist: TimeDist | None, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` pauses in integer ns (all 0 without a distribution)."""
    if dist is None:
        return np.zeros(n, dtype=np.int64)
    if isinstance(dist, FixedTime):
        seconds = np.full(n, dist.value)
    elif isinstance(dist, UniformTime):
        seconds = rng.uniform(dist.low, dist.high, size=n)
    elif isinstance(dist, ExponentialTime):
        seconds = rng.exponential(dist.mean, size=n)
    else:
        assert isinstance(dist, LognormalTime)
        seconds = rng.lognormal(math.log(dist.mean) - dist.sigma**2 / 2, dist.sigma, size=n)
    return np.asarray(np.rint(np.minimum(seconds, MAX_TIME_S) * 1e9), dtype=np.int64)


class SessionPlan(Protocol):
    """What the driver asks of its sessions: :class:`SessionSource` (``workload.sessions``) or a
    staged plan (:class:`cosim.hub.sim.workload.inference_perf.InferencePerfSessions`)."""

    closed_loop: bool
    duration_s: float | None  # no session starts at or after this time (s); None: no limit
    stage_totals: list[int] | None  # turns per load stage of a staged plan; None: not staged
    stage_gap_ns: int  # between a stage's last turn's end and the next stage's start

    def session(self, k: int) -> SessionSpec | None: ...

    def start_ns(self, k: int) -> int | None: ...

    def num_starts(self) -> int: ...

    def check_specs(self) -> RequestSpecs: ...


class SessionSource:
    """The sessions of a workload, drawn (or read) one at a time by index.

    Args:
        workload: the ``workload`` section (with ``sessions``).
        seed: the scenario's seed.
        base_dir: where a relative session-file path resolves.
    """

    def __init__(self, workload: WorkloadConfig, seed: int, base_dir: Path) -> None:
        assert workload.sessions is not None
        self.workload, self.config, self.seed = workload, workload.sessions, seed
        self.traced: list[TracedSession] | None = None
        trace = self.config.trace
        if trace is not None:
            path = Path(trace.path).expanduser()
            self.traced = load_sessions(path if path.is_absolute() else base_dir / path, trace.format,
                                        chars_per_token=trace.chars_per_token)
            if self.config.count is not None and self.config.count > len(self.traced):
                raise ScenarioError("workload.sessions.count", f"{self.config.count} is more than the "
                                    f"{len(self.traced)} sessions of {self.traced[0].source.rsplit(':', 1)[0]}")
        self.count = self.config.count if self.config.count is not None else \
            (len(self.traced) if self.traced is not None else None)
        self.closed_loop = self.config.users is not None
        self.duration_s = self.config.duration_s
        self.stage_totals: list[int] | None = None  # sessions of workload.sessions are not staged
        self.stage_gap_ns = 0
        self._starts = self._start_times()

    def num_starts(self) -> int:
        """Start times drawn: every session's (open loop), each user's first (closed loop)."""
        return len(self._starts)

    def _start_times(self) -> np.ndarray:
        """Open loop: every session's start; closed loop: each user's first session's start."""
        n = self.config.users if self.config.users is not None else self.count
        assert n is not None  # validated: open loop has a count
        if self.closed_loop and self.count is not None:
            n = min(n, self.count)
        arrival = self.workload.arrival
        assert arrival is not None  # validated: sessions start by workload.arrival
        if isinstance(arrival, TraceArrival):
            assert self.traced is not None
            times = np.array([s.start_ns for s in self.traced[:n]], dtype=np.int64)
            relative = times - times.min()
            return np.asarray(np.rint(relative / arrival.speedup), dtype=np.int64) if arrival.speedup != 1.0 \
                else relative
        return sample_arrivals_ns(arrival, n, np.random.default_rng([self.seed, START_STREAM]))

    def start_ns(self, k: int) -> int | None:
        """When session ``k`` starts: open loop, its draw; closed loop, the first ``users`` ones'."""
        return int(self._starts[k]) if k < len(self._starts) else None

    def session(self, k: int) -> SessionSpec | None:
        """Session ``k``, or None past the last."""
        if self.count is not None and k >= self.count:
            return None
        if k >= SEGMENTS_PER_SESSION ** 2:
            raise ScenarioError("workload.sessions", f"session {k}: cosim numbers at most "
                                f"{SEGMENTS_PER_SESSION ** 2} sessions per run")
        rng = np.random.default_rng([self.seed, SESSION_STREAM, k])
        return self._traced(k, rng) if self.traced is not None else self._drawn(k, rng)

    def _drawn(self, k: int, rng: np.random.Generator) -> SessionSpec:
        config, workload = self.config, self.workload
        assert config.turns is not None
        where = "workload.sessions.turns"
        inputs, outputs = workload.input_tokens, workload.output_tokens
        assert not isinstance(config.turns, TraceLength) and inputs is not None and outputs is not None \
            and not isinstance(inputs, TraceLength) and not isinstance(outputs, TraceLength)  # validated
        turns = int(clip_lengths(sample_lengths(config.turns, 1, rng), config.turns.min, config.turns.max,
                                 where=where)[0])
        if turns > SEGMENTS_PER_SESSION // 2:
            raise ScenarioError(where, f"session {k} drew {turns} turns, more than the "
                                       f"{SEGMENTS_PER_SESSION // 2} cosim allows; set max")
        new = clip_lengths(sample_lengths(inputs, turns, rng), inputs.min, inputs.max, where="workload.input_tokens")
        out = clip_lengths(sample_lengths(outputs, turns, rng), outputs.min, outputs.max,
                           where="workload.output_tokens")
        think = sample_times_ns(config.think_time_s, turns, rng)
        prefix_index, prefix_tokens = -1, 0
        if workload.prefix is not None:
            prefix_index = int(sample_prefixes(workload.prefix, 1, rng)[0])
            prefix_tokens = workload.prefix.tokens if prefix_index >= 0 else 0
        specs, context = [], prefix_tokens
        for j in range(turns):
            specs.append(TurnSpec(input_tokens=context + int(new[j]), output_tokens=int(out[j]),
                                  think_ns=int(think[j]) if j else 0, parents=(j - 1,) if j else ()))
            context += int(new[j]) + int(out[j])
        return SessionSpec(index=k, turns=tuple(specs), start_ns=self.start_ns(k) if not self.closed_loop else None,
                           prefix_index=prefix_index, prefix_tokens=prefix_tokens)

    def _traced(self, k: int, rng: np.random.Generator) -> SessionSpec:
        assert self.traced is not None
        traced = self.traced[k]
        think = sample_times_ns(self.config.think_time_s, len(traced.turns), rng)
        turns = tuple(TurnSpec(input_tokens=t.input_tokens, output_tokens=t.output_tokens,
                               think_ns=0 if not j else t.think_ns if t.think_ns is not None else int(think[j]),
                               parents=(j - 1,) if j else ())
                      for j, t in enumerate(traced.turns))
        return SessionSpec(index=k, turns=turns, start_ns=self.start_ns(k) if not self.closed_loop else None,
                           source=traced.source)

    def check_specs(self) -> RequestSpecs:
        """Every turn of the sessions known before the run (all of them, but those a closed loop
        for a time would start past its ``users`` first) as a request, for the admission checks
        (:func:`cosim.hub.sim.admission.check_requests`)."""
        known = self.count if self.count is not None else len(self._starts)
        specs: list[RequestSpec] = []
        for k in range(known):
            session = self.session(k)
            assert session is not None
            specs.extend(RequestSpec(id=len(specs), arrival_ns=0, input_tokens=t.input_tokens,
                                     output_tokens=t.output_tokens, source=session.source) for t in session.turns)
        return RequestSpecs.of(specs)


@dataclass
class _Live:
    """A session in flight: its spec, the turns done, and their contexts (prompt + output ids)."""

    spec: SessionSpec
    user: int
    start_ns: int
    contexts: dict[int, SegmentIds] = field(default_factory=dict)
    done: int = 0


class SessionDriver:
    """Starts sessions and releases their turns in a running simulation.

    Args:
        source: the sessions.
        kernel: the event kernel.
        pipeline: the pipeline every turn runs (the default model's chat).
        release: hands a new request to the coordinator, which schedules its arrival.
        on_session_end: called with each finished session's index (the router forgets it).
    """

    def __init__(self, source: SessionPlan, *, kernel: Kernel, pipeline: Pipeline,
                 release: Callable[[RequestRecord], None], on_session_end: Callable[[int], None]) -> None:
        self.source, self.kernel, self.pipeline = source, kernel, pipeline
        self.release, self.on_session_end = release, on_session_end
        self.duration_ns = round(source.duration_s * 1e9) if source.duration_s is not None else None
        # The stages of a staged plan (an inference-perf profile), which release its turns; None: none.
        self.stages: StageClock[_Live] | None = None
        if source.stage_totals is not None:
            self.stages = StageClock(source.stage_totals, source.stage_gap_ns, release=self._release_staged,
                                     timing=lambda live, j: (live.spec.turns[j].stage, live.spec.turns[j].offset_ns))
        self.live: dict[int, _Live] = {}
        self.next_session = 0
        self.next_id = 0
        self.num_started = 0
        self._starts_due = 0  # session starts scheduled, not yet happened
        # Per finished session: (index, first arrival ns, last finish ns, turns); a few numbers each.
        self.finished: list[tuple[int, int, int, int]] = []

    def start(self) -> None:
        """Schedules the first sessions: open loop the next one (each start schedules the one after,
        so that sessions not started cost nothing), closed loop each user's first."""
        if self.stages is not None:
            self._start_staged(self.stages)
        elif self.source.closed_loop:
            for user in range(self.source.num_starts()):
                self._schedule_start(self.source.start_ns(user) or 0, user)
        else:
            self._schedule_start(self.source.start_ns(0), -1)

    def _start_staged(self, stages: StageClock[_Live]) -> None:
        """A staged plan: every session live from the start, its turns released by their stages."""
        k = 0
        while (session := self.source.session(k)) is not None:
            live = self.live[session.index] = _Live(session, -1, 0)
            self.num_started += 1
            for j, turn in enumerate(session.turns):
                if not turn.parents:
                    stages.ready(live, j, 0)
            k += 1
        stages.start()

    def _release_staged(self, live: _Live, j: int, at_ns: int) -> None:
        if j == 0:
            live.start_ns = at_ns  # the session's first turn: its latency counts from here
        self._release(live, j, at_ns)

    def _schedule_start(self, at_ns: int | None, user: int) -> None:
        if at_ns is None or (self.duration_ns is not None and at_ns >= self.duration_ns):
            return
        k = self.next_session
        session = self.source.session(k)
        if session is None:
            return
        self.next_session += 1
        self._starts_due += 1
        self.kernel.call_at(at_ns, ARRIVAL, self._start, session, user, label="session start")

    def idle(self) -> bool:
        """Every session that will start has ended (no session live, none due to start)."""
        return not self.live and not self._starts_due

    def _start(self, session: SessionSpec, user: int) -> None:
        now = self.kernel.now_ns
        self.num_started += 1
        self._starts_due -= 1
        live = self.live[session.index] = _Live(session, user, now)
        if user < 0:  # open loop: the next session's start
            self._schedule_start(self.source.start_ns(session.index + 1), -1)
        for j, turn in enumerate(session.turns):
            if not turn.parents:
                self._release(live, j, now)

    def _prompt(self, live: _Live, j: int) -> SegmentIds:
        """Turn ``j``'s prompt: its first predecessor's context and the others' outputs (cut to its
        prompt length, as an agent that trims its history), then new tokens of its own."""
        turn, spec = live.spec.turns[j], live.spec
        segments: list[tuple[int, int]] = []
        if not turn.parents and spec.prefix_tokens:
            segments.append((prefix_key(spec.prefix_index), spec.prefix_tokens))
        for n, parent in enumerate(turn.parents):
            context = live.contexts[parent]
            segments.extend(context.segments() if not n else context.segments()[-1:])
        history = SegmentIds([k for k, _ in segments], [n for _, n in segments])
        if len(history) >= turn.input_tokens:
            return history.head(turn.input_tokens)
        key = turn.new_key if turn.new_key is not None else session_key(spec.index, 2 * j)
        segments.append((key, turn.input_tokens - len(history)))
        return SegmentIds([k for k, _ in segments], [n for _, n in segments])

    def _release(self, live: _Live, j: int, at_ns: int) -> None:
        turn, spec = live.spec.turns[j], live.spec
        if at_ns > MAX_TIME_NS:
            raise ScenarioError("workload.sessions", f"session {spec.index} turn {j} would start at "
                                f"{at_ns / 1e9:.4g} s, past the {MAX_TIME_S:.0e} s cosim simulates")
        prompt = self._prompt(live, j)
        output = SegmentIds([session_key(spec.index, 2 * j + 1)], [turn.output_tokens])
        record = RequestRecord(id=self.next_id, model=self.pipeline.model, arrival_ns=at_ns,
                               input_tokens=turn.input_tokens, output_tokens=turn.output_tokens,
                               prompt_token_ids=prompt, output_token_ids=output, template=self.pipeline.template,
                               pipeline=self.pipeline.stages, session=spec.index, turn=j, cls=turn.label)
        self.next_id += 1
        self.release(record)

    def turn_done(self, request: RequestRecord) -> None:
        """A turn finished: release the turns waiting on it, or end the session."""
        live = self.live[request.session]
        j, turns = request.turn, live.spec.turns
        assert request.prompt_token_ids is not None and isinstance(request.output_token_ids, SegmentIds)
        prompt = request.prompt_token_ids
        assert isinstance(prompt, SegmentIds)
        live.contexts[j] = SegmentIds([*prompt.keys.tolist(), *request.output_token_ids.keys.tolist()],
                                      [n for _, n in prompt.segments()] + [request.output_tokens])
        live.done += 1
        now = self.kernel.now_ns
        for child in range(j + 1, len(turns)):
            spec = turns[child]
            if j in spec.parents and all(p in live.contexts for p in spec.parents):
                if self.stages is None:
                    self._release(live, child, now + spec.think_ns)
                else:
                    self.stages.ready(live, child, now + spec.think_ns)
        if self.stages is not None:
            self.stages.turn_done(turns[j].stage, now)
        if live.done == len(turns):
            del self.live[request.session]
            self.finished.append((live.spec.index, live.start_ns, now, len(turns)))
            self.on_session_end(live.spec.index)
            if live.user >= 0:  # closed loop: this user's next session, now
                self._schedule_start(now, live.user)

    def summary(self, table: RequestTable) -> dict[str, Any]:
        """summary.json's ``sessions`` block: sessions started and finished, session latency (first
        turn's arrival to last turn's end), TTFT by turn index, and prefix-cache hit rates of first
        and follow-up turns (prompt tokens served from a prefix cache, of those prefilled)."""
        c = table.columns
        ttft = table.metrics().ttft_s
        turn = c["turn"]
        prefilled = np.where(c["first_token_ns"] >= 0, c["input_tokens"], 0)
        cached = np.where(c["first_token_ns"] >= 0, c["cached_tokens"], 0)

        def hit_rate(mask: np.ndarray) -> float | None:
            total = int(prefilled[mask].sum())
            return int(cached[mask].sum()) / total if total else None

        latency = np.array([(end - start) / 1e9 for _, start, end, _ in self.finished], dtype=np.float64)
        by_turn = {str(j): {"requests": int(np.count_nonzero(turn == j)), **stat_block(ttft[turn == j])}
                   for j in np.unique(turn[turn >= 0]).tolist()}
        return {
            "started": self.num_started,
            "completed": len(self.finished),
            "turns_per_session": {"mean": float(np.mean([n for *_, n in self.finished])) if self.finished else None},
            "latency_s": stat_block(latency),
            "ttft_s_by_turn": by_turn,
            "prefix_cache_hit_rate": {"first_turns": hit_rate(turn == 0), "follow_up_turns": hit_rate(turn > 0)},
        }
