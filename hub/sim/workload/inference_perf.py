"""The requests an inference-perf profile sends, as cosim sessions of staged turns.

Semantics of kubernetes-sigs/inference-perf v0.4.0 (``datagen/shared_prefix_datagen.py``,
``datagen/random_datagen.py``, ``loadgen/load_timer.py``, ``loadgen/load_generator.py``,
``apis/user_session.py``), the release the H100 runs of ``validation/blis-h100`` used:

- **Timers.** A stage sends ``int(rate x duration)`` requests. The ``constant`` timer draws that
  many exponential gaps of mean ``1 / rate`` and rescales them to sum to ``duration``, so the last
  request goes exactly at the stage's end. The ``poisson`` timer draws a Poisson count for each
  second and spreads it over that second with the constant timer (a second with none is skipped).
- **Stages** run one after the other; the next starts when every request of this one has finished,
  plus ``interval`` and one second (:mod:`cosim.hub.sim.staged`).
- **shared_prefix.** ``num_unique_system_prompts x num_users_per_system_prompt`` prompts (users),
  each a system prompt of its group and a question of its own, shuffled once; request ``j`` of a
  stage goes to user ``j mod users``, so every user's question is sent again and again. The
  prompts are built from token ids (:mod:`.token_ids`): a group's system prompt is the same ids in
  every request of the group, a user's question the same ids every time, so vLLM's prefix cache
  finds them by content as it does in the real run.
- **enable_multi_turn_chat.** Each user is a chat (``LocalUserSession``): round ``r`` sends the
  chat's context then the question, and the context becomes that prompt and its answer; a round is
  sent when its time comes or when the round before it has finished, whichever is later (the
  session's lock; the wait is not in the measured latency, as inference-perf starts its clock
  after the lock). The context starts as the system prompt and is kept across stages, so prompts
  grow by ``question_len + output_len`` per round for the whole run.
- **random.** Request ``j`` of a stage takes input and output length ``j`` of the
  ``total_count`` drawn (normal, rounded and clipped to ``min..max``); prompts share nothing.

What inference-perf does that is not modelled: text round trips (it decodes random token ids to
text and the server re-tokenizes it, so real prompts are a few tokens off) and vLLM's refusal of a
round whose prompt and ``max_tokens`` pass ``--max-model-len`` (cosim refuses such a scenario).
"""

from __future__ import annotations

import numpy as np

from cosim.hub.config.inference_perf import InferencePerfConfig, InferencePerfLoad, LengthDistribution
from cosim.hub.errors import ScenarioError

from ..conversations import SessionSpec, TurnSpec
from .generator import RequestSpec, RequestSpecs
from .token_ids import SEGMENTS_PER_SESSION, question_key

__all__ = ["InferencePerfSessions", "STREAM", "send_offsets_ns"]

STREAM = 0x1F9E  # the plan draws from default_rng([seed, STREAM, part])
_WHERE = "workload.inference_perf"


def send_offsets_ns(load: InferencePerfLoad, stage: int, rng: np.random.Generator) -> np.ndarray:
    """Send times of stage ``stage``'s requests, in ns after the stage starts (ascending)."""
    spec = load.stages[stage]
    count = int(spec.rate * spec.duration)
    if load.type == "constant":
        gaps = rng.exponential(1.0 / spec.rate, count)
        seconds = np.cumsum(gaps * (spec.duration / gaps.sum()))
    else:  # poisson: a count per second, spread over it by the constant timer
        parts: list[np.ndarray] = []
        second, drawn = 0.0, 0
        while drawn < count:
            per_second = int(rng.poisson(spec.rate))
            if per_second:
                gaps = rng.exponential(1.0 / per_second, per_second)
                parts.append(second + np.cumsum(gaps / gaps.sum()))
                drawn += per_second
            second += 1.0
        seconds = np.concatenate(parts)[:count]
    return np.rint(seconds * 1e9).astype(np.int64)


def _lengths(dist: LengthDistribution, rng: np.random.Generator) -> np.ndarray:
    """inference-perf's ``generate_distribution``: normal draws, rounded and clipped to min..max."""
    assert dist.total_count is not None  # validated for random data
    drawn = rng.normal(dist.mean, dist.std_dev, dist.total_count)
    return np.clip(np.rint(drawn), dist.min, dist.max).astype(np.int64)


class InferencePerfSessions:
    """The sessions (users, or one per request) of an inference-perf profile, for the session driver
    (:class:`~cosim.hub.sim.conversations.SessionDriver`, staged by :class:`~cosim.hub.sim.staged.StageClock`).

    Each turn's request class is its stage (``stage_0``, ``stage_1``, ...), so summary.json's
    ``classes`` block reports every stage as inference-perf's per-stage report does.

    Args:
        config: ``workload.inference_perf``.
        seed: the scenario's seed (inference-perf draws from the clock; cosim from the seed).

    Raises:
        ScenarioError: a random stage asks for more requests than ``total_count`` lengths, or a chat
            would hold more rounds than cosim numbers.
    """

    closed_loop = False
    duration_s: float | None = None

    def __init__(self, config: InferencePerfConfig, seed: int) -> None:
        self.config = config
        load = config.load
        self.stage_totals: list[int] | None = [int(s.rate * s.duration) for s in load.stages]
        self.stage_gap_ns = round((load.interval + 1.0) * 1e9)
        offsets = [send_offsets_ns(load, s, np.random.default_rng([seed, STREAM, s]))
                   for s in range(len(load.stages))]
        data = config.data
        if data.type == "random":
            self.sessions = self._random(offsets, np.random.default_rng([seed, STREAM, 1 << 20]))
        else:
            self.sessions = self._shared_prefix(offsets, np.random.default_rng([seed, STREAM, 1 << 21]))

    # -- the plan's interface (SessionPlan) ------------------------------------
    def session(self, k: int) -> SessionSpec | None:
        """Session ``k``, or None past the last."""
        return self.sessions[k] if k < len(self.sessions) else None

    def start_ns(self, k: int) -> int | None:
        """Staged sessions start with their stage (:class:`~cosim.hub.sim.staged.StageClock`)."""
        return None

    def num_starts(self) -> int:
        return 0

    def check_specs(self) -> RequestSpecs:
        """Every turn as a request (arrival 0), for the admission checks."""
        return RequestSpecs.of([RequestSpec(id=i, arrival_ns=0, input_tokens=t.input_tokens,
                                            output_tokens=t.output_tokens)
                                for i, t in enumerate(t for s in self.sessions for t in s.turns)])

    # -- building -------------------------------------------------------------
    def _shared_prefix(self, offsets: list[np.ndarray], rng: np.random.Generator) -> list[SessionSpec]:
        settings = self.config.data.prefix_settings
        users, per_group = settings.num_users, settings.num_users_per_system_prompt
        group = rng.permutation(users) // per_group  # position i's system prompt (the one shuffle)
        system, question, output = settings.system_prompt_len, settings.question_len, settings.output_len
        if not settings.enable_multi_turn_chat:
            sessions: list[SessionSpec] = []
            for stage, times in enumerate(offsets):
                for j, at in enumerate(times.tolist()):
                    user = j % users
                    turn = TurnSpec(input_tokens=system + question, output_tokens=output, think_ns=0, parents=(),
                                    stage=stage, offset_ns=at, new_key=question_key(user), label=f"stage_{stage}")
                    sessions.append(self._spec(len(sessions), (turn,), int(group[user]), system))
            return sessions
        turns: list[list[TurnSpec]] = [[] for _ in range(users)]
        context = [system] * users  # a chat's context: its system prompt, then each prompt and answer
        for stage, times in enumerate(offsets):
            for j, at in enumerate(times.tolist()):
                user = j % users
                rounds = turns[user]
                if len(rounds) >= SEGMENTS_PER_SESSION // 2:
                    raise ScenarioError(f"{_WHERE}.load.stages", f"sends user {user} more than "
                                        f"{SEGMENTS_PER_SESSION // 2} chat rounds, the most a cosim session holds")
                prompt = context[user] + question
                rounds.append(TurnSpec(input_tokens=prompt, output_tokens=output, think_ns=0,
                                       parents=(len(rounds) - 1,) if rounds else (), stage=stage, offset_ns=at,
                                       new_key=question_key(user), label=f"stage_{stage}"))
                context[user] = prompt + output
        return [self._spec(user, tuple(rounds), int(group[user]), system) for user, rounds in enumerate(turns)
                if rounds]

    def _random(self, offsets: list[np.ndarray], rng: np.random.Generator) -> list[SessionSpec]:
        data = self.config.data
        assert data.input_distribution is not None and data.output_distribution is not None  # validated
        inputs, outputs = _lengths(data.input_distribution, rng), _lengths(data.output_distribution, rng)
        sessions: list[SessionSpec] = []
        for stage, times in enumerate(offsets):
            if len(times) > min(len(inputs), len(outputs)):
                raise ScenarioError(f"{_WHERE}.data.input_distribution.total_count",
                                    f"{min(len(inputs), len(outputs))} lengths, fewer than the {len(times)} requests "
                                    f"of stage {stage} (inference-perf gives request j of a stage length j)")
            for j, at in enumerate(times.tolist()):
                turn = TurnSpec(input_tokens=int(inputs[j]), output_tokens=int(outputs[j]), think_ns=0, parents=(),
                                stage=stage, offset_ns=at, label=f"stage_{stage}")
                sessions.append(self._spec(len(sessions), (turn,), -1, 0))
        return sessions

    @staticmethod
    def _spec(index: int, turns: tuple[TurnSpec, ...], group: int, system: int) -> SessionSpec:
        shared = group >= 0 and system > 0
        return SessionSpec(index=index, turns=turns, prefix_index=group if shared else -1,
                           prefix_tokens=system if shared else 0)
