"""Reading session files: ShareGPT conversations and LLMServingSim's agentic JSONL.

:func:`load_sessions` returns one :class:`TracedSession` per session, each a list of
:class:`TracedTurn` (a turn's whole prompt, its output, the pause before it). Every problem
raises :class:`~cosim.hub.errors.ScenarioError` at ``file:line`` with the field in the message
(``conversations[3].value``, ``sub_requests[1].output_toks``), as :mod:`.traces` does.

- ``sharegpt``: a JSON array (or JSON lines) of ``{"id", "conversations": [{"from", "value"}]}``
  (``role``/``content`` and ``messages`` are read too). Each model message (``gpt``,
  ``function_call``, ``assistant``, ...) is a turn: its prompt is every message before it, its
  output the message. Tokens are counted from the text, ``ceil(characters / chars_per_token)``
  (OpenAI's rule of thumb: a token is about 4 characters of English text); the file has no
  times, so pauses come from ``sessions.think_time_s``. Conversations without a model message
  are skipped (ShareGPT has some), and so are input messages after the last model message.
- ``llmservingsim``: a line per session, ``{"session_id", "arrival_time_ns", "sub_requests":
  [{"input_toks", "output_toks", "tool_duration_ns"}]}`` (LLMServingSim's
  ``docs/workloads/jsonl-format.md``). ``input_toks`` is a call's whole prompt, its history
  included; ``tool_duration_ns`` the pause after the call before the next one is released (the
  last one's is ignored, as LLMServingSim does). A line without ``sub_requests`` is a one-turn
  session. Token ids (``input_tok_ids``) are not read: the history a call repeats is known from
  the chain.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosim.hub.config.bounds import MAX_TIME_NS, MAX_TOKENS
from cosim.hub.config.quoting import quoted
from cosim.hub.errors import ScenarioError

# ShareGPT's speakers (and those of the datasets in its format) whose messages the model writes.
MODEL_ROLES = frozenset({"gpt", "function_call", "assistant", "chatgpt", "bing", "bard", "model"})
INPUT_ROLES = frozenset({"human", "user", "observation", "system", "tool", "function"})


@dataclass(frozen=True, slots=True)
class TracedTurn:
    """One turn read from a file: its whole prompt, its output, and the pause (ns) between the
    previous turn's end and its release (None: from ``sessions.think_time_s``)."""

    input_tokens: int
    output_tokens: int
    think_ns: int | None


@dataclass(frozen=True, slots=True)
class TracedSession:
    """One session read from a file: its turns, its start time (ns, None: not in the file), and
    where it was read (``file:line``)."""

    turns: tuple[TracedTurn, ...]
    start_ns: int | None
    source: str


def load_sessions(path: Path, fmt: str, *, chars_per_token: float = 4.0) -> list[TracedSession]:
    """Reads a session file.

    Raises:
        ScenarioError: missing or unreadable file, a bad row (at ``file:line``, naming the field),
            no sessions.
    """
    label = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ScenarioError(label, f"session file not found (looked for {path.resolve()})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(label, f"cannot read session file: {err}") from None
    rows = _json_rows(text, label)
    if fmt == "sharegpt":
        sessions = [s for line, row in rows if (s := _sharegpt(row, f"{label}:{line}", chars_per_token)) is not None]
    else:
        sessions = [_llmservingsim(row, f"{label}:{line}") for line, row in rows]
    if not sessions:
        raise ScenarioError(label, "has no sessions (no conversation with a model message)")
    return sessions


def _json_rows(text: str, label: str) -> list[tuple[int, Any]]:
    """(line, value) of each element of a JSON array, or of each JSON line."""
    start = len(text) - len(text.lstrip())
    rows: list[tuple[int, Any]] = []
    if text[start:start + 1] != "[":
        for number, content in enumerate(text.splitlines(), start=1):
            if content.strip():
                try:
                    rows.append((number, json.loads(content)))
                except json.JSONDecodeError as err:
                    raise ScenarioError(f"{label}:{number}", f"not valid JSON: {err.msg}") from None
        return rows
    decoder = json.JSONDecoder()
    index = start + 1
    while True:
        index = _skip(text, index, label)
        if text[index:index + 1] == "]":
            return rows
        line = text.count("\n", 0, index) + 1
        try:
            value, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError as err:
            raise ScenarioError(f"{label}:{err.lineno}", f"not valid JSON: {err.msg}") from None
        rows.append((line, value))
        index = _skip(text, index, label)
        if text[index:index + 1] == ",":
            index += 1
        elif text[index:index + 1] != "]":
            raise ScenarioError(f"{label}:{text.count(chr(10), 0, index) + 1}", "expected ',' or ']' in the array")


def _skip(text: str, index: int, label: str) -> int:
    while index < len(text) and text[index] in " \t\r\n":
        index += 1
    if index >= len(text):
        raise ScenarioError(f"{label}:{text.count(chr(10)) + 1}", "the JSON array is not closed")
    return index


def _tokens(text: str, chars_per_token: float) -> int:
    return math.ceil(len(text) / chars_per_token)


def _sharegpt(row: Any, where: str, chars_per_token: float) -> TracedSession | None:
    if not isinstance(row, dict):
        raise ScenarioError(where, f"expected a JSON object, got {type(row).__name__}")
    key = "conversations" if "conversations" in row else "messages"
    messages = row.get(key)
    if not isinstance(messages, list):
        raise ScenarioError(where, f"conversations={quoted(messages, where)} is not a list of messages")
    turns: list[TracedTurn] = []
    prompt = pending = 0  # tokens of the conversation so far; of the input since the last model message
    for k, message in enumerate(messages):
        field = f"{key}[{k}]"
        if not isinstance(message, dict):
            raise ScenarioError(where, f"{field} is not an object")
        role = message.get("from", message.get("role"))
        text = message.get("value", message.get("content"))
        if role not in MODEL_ROLES | INPUT_ROLES:
            raise ScenarioError(where, f"{field}.from={quoted(role, where)} is not one of "
                                       f"{sorted(MODEL_ROLES | INPUT_ROLES)}")
        if not isinstance(text, str):
            raise ScenarioError(where, f"{field}.value={quoted(text, where)} is not a string")
        tokens = _tokens(text, chars_per_token)
        if role in INPUT_ROLES:
            pending += tokens
            continue
        if not turns and not pending:
            raise ScenarioError(where, f"{field}.from={role!r}: the conversation opens with a model message "
                                       "(its first turn would have no prompt)")
        output = max(tokens, 1)  # an empty answer still samples its end-of-sequence token
        prompt += pending
        if prompt + output > MAX_TOKENS:
            raise ScenarioError(where, f"{field}: the conversation passes {MAX_TOKENS:.0e} tokens")
        turns.append(TracedTurn(input_tokens=prompt, output_tokens=output, think_ns=None))
        prompt += output
        pending = 0
    return TracedSession(tuple(turns), None, where) if turns else None


def _int_field(value: Any, field: str, where: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer() \
            or not low <= value <= high:
        raise ScenarioError(where, f"{field}={quoted(value, where)} is not an integer in [{low}, {high:.4g}]")
    return int(value)


def _llmservingsim(row: Any, where: str) -> TracedSession:
    if not isinstance(row, dict):
        raise ScenarioError(where, f"expected a JSON object, got {type(row).__name__}")
    start = _int_field(row.get("arrival_time_ns"), "arrival_time_ns", where, low=0, high=MAX_TIME_NS)
    calls = row.get("sub_requests", [row])  # a flat line is a session of one call
    if not isinstance(calls, list) or not calls:
        raise ScenarioError(where, f"sub_requests={quoted(calls, where)} is not a non-empty list")
    turns: list[TracedTurn] = []
    pause: int | None = None
    for k, call in enumerate(calls):
        field = f"sub_requests[{k}]" if "sub_requests" in row else ""
        dot = f"{field}." if field else ""
        if not isinstance(call, dict):
            raise ScenarioError(where, f"{field} is not an object")
        inputs = _int_field(call.get("input_toks"), f"{dot}input_toks", where, low=1, high=MAX_TOKENS)
        outputs = _int_field(call.get("output_toks"), f"{dot}output_toks", where, low=1, high=MAX_TOKENS)
        turns.append(TracedTurn(input_tokens=inputs, output_tokens=outputs, think_ns=pause if k else None))
        pause = _int_field(call.get("tool_duration_ns", 0), f"{dot}tool_duration_ns", where, low=0,
                           high=MAX_TIME_NS)
    return TracedSession(tuple(turns), start, where)
