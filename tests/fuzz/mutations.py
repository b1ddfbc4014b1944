"""Mutated example configs, and what cosim must make of each (issue 23, "Bad input").

A mutation sets a few fields of an example config (``examples/*.yaml``, ``examples/bench``,
``examples/multistage``) to edge values (0, -1, 1e-300, 1e300, 1e20, NaN, infinities, huge
integers, wrong types) or deletes them. :func:`check` then asks ``cosim.validate``, and runs what
it accepts (built-in backends, in-process, a few requests). Every outcome is one of:

- ``rejected``: validate named every problem (a :class:`~cosim.ScenarioError` with a path);
- ``ran``: the run completed every request, with a finite summary and sane records;
- ``traceback``: an exception that is not a named cosim error, or a HubError (a cosim bug);
- ``accepted_not_run``: validate accepted a config the run then refused or failed;
- ``nonsense``: the run completed but its summary or records are not finite or not complete.

Both ``tests/unit/config/test_config_fuzz.py`` (hypothesis, bounded time) and ``tests/fuzz/fuzz_configs.py``
(thousands of mutations, a timeout each) use these.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import cosim
from cosim.hub.config.loading import parse_config
from cosim.hub.errors import CosimError, HubError, ScenarioError
from tests.paths import REPO

EXAMPLES = sorted([*REPO.glob("examples/*.yaml"), *REPO.glob("examples/bench/*.yaml"),
                   *REPO.glob("examples/multistage/*.yaml")])

#: Requests a mutated config runs at most (its workload.requests is lowered to this before validating,
#: so that validation, which draws the workload, and the run see the same config).
MAX_RUN_REQUESTS = 12

EDGE_VALUES: tuple[Any, ...] = (
    0, -1, 1, 2, 0.5, 1e-300, -1e-300, 1e300, -1e300, 1e20, 1e12, float("nan"), float("inf"), float("-inf"),
    2**31, 2**63 - 1, 2**63, 2**64, 10**30, -(2**63), "x", "", None, [], {}, True, False, [1], {"a": 1},
)
DELETE = object()  # the mutation that removes the key
#: Factors a number is scaled by: valid but extreme values, which validate accepts more often.
SCALES = (1e-6, 1e-3, 0.1, 0.5, 2, 10, 1e3, 1e6)


@dataclass(frozen=True)
class Mutation:
    """One field of a config set to a value (or deleted: ``value is DELETE``)."""

    path: tuple[str | int, ...]
    value: Any

    def __str__(self) -> str:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in self.path).lstrip(".")
        return f"{where} deleted" if self.value is DELETE else f"{where}={self.value!r}"


@dataclass(frozen=True)
class Outcome:
    """What cosim made of a mutated config (see the module's docstring for the kinds)."""

    kind: str
    detail: str = ""
    accepted: bool = False  # validate accepted the config (and it was run)


def base_config(example: Path) -> dict[str, Any]:
    """An example as a mapping to mutate: no run folder, no plots, its relative paths from its folder,
    at most :data:`MAX_RUN_REQUESTS` requests."""
    config: dict[str, Any] = yaml.safe_load(example.read_text())
    config["base_dir"] = str(example.parent)
    config["output"] = {"dir": None, "plots": False}
    workload = config["workload"]
    workload["requests"] = min(workload.get("requests") or MAX_RUN_REQUESTS, MAX_RUN_REQUESTS)
    return config


def leaves(node: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every (path, value) below ``node``, containers included (their keys may be deleted too)."""
    items: Any = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*path, key), value
        yield from leaves(value, (*path, key))


def mutable_paths(config: dict[str, Any]) -> list[tuple[str | int, ...]]:
    """Paths worth mutating: numbers first (the issue's subject), then everything but names and the
    fields this harness owns (base_dir, output)."""
    skip = ("base_dir", "output")
    paths = [p for p, _ in leaves(config) if p[0] not in skip]
    numbers = [p for p, v in leaves(config) if p[0] not in skip and isinstance(v, int | float)
               and not isinstance(v, bool)]
    return numbers * 3 + paths  # numbers three times as likely


def apply(config: dict[str, Any], mutation: Mutation) -> dict[str, Any]:
    """A copy of ``config`` with ``mutation`` applied."""
    mutated = copy.deepcopy(config)
    node: Any = mutated
    for part in mutation.path[:-1]:
        node = node[part]
    last = mutation.path[-1]
    if mutation.value is DELETE:
        if isinstance(node, list):
            node.pop(int(last))
        else:
            node.pop(last)
    else:
        node[last] = copy.deepcopy(mutation.value)
    return mutated


def scaled(value: float, factor: float) -> float:
    """``value`` times ``factor``, an integer again where ``value`` is one (at least 1 when it was)."""
    if isinstance(value, int):
        return max(int(value * factor), 1 if value >= 1 else 0)
    return value * factor


def value_at(config: Any, path: tuple[str | int, ...]) -> Any:
    """The value at ``path`` in ``config``."""
    for part in path:
        config = config[part]
    return config


def random_mutations(config: dict[str, Any], rng: random.Random, count: int) -> list[Mutation]:
    """``count`` mutations of ``config`` drawn with ``rng`` (each applied after the ones before)."""
    found: list[Mutation] = []
    current = config
    for _ in range(count):
        paths = mutable_paths(current)
        if not paths:
            break
        path = rng.choice(paths)
        value = DELETE if rng.random() < 0.1 else rng.choice(EDGE_VALUES)
        old = value_at(current, path)
        if isinstance(old, int | float) and not isinstance(old, bool) and rng.random() < 0.4:
            value = scaled(old, rng.choice(SCALES))
        mutation = Mutation(path, value)
        try:
            current = apply(current, mutation)
        except (KeyError, IndexError, TypeError):
            continue
        found.append(mutation)
    return found


def _finite(node: Any, path: str = "summary") -> str | None:
    """The path of the first number in ``node`` that is not finite, or None."""
    if isinstance(node, float) and not math.isfinite(node):
        return f"{path}={node}"
    items: Any = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        bad = _finite(value, f"{path}.{key}")
        if bad:
            return bad
    return None


def _capped_requests(config: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``config`` with at most MAX_RUN_REQUESTS requests; and the problem, if the uncapped count is one
    the config check refuses (checked on the uncapped config alone: drawing it could be huge)."""
    workload = config.get("workload")
    if not isinstance(workload, dict):
        return config, None
    requests = workload.get("requests")
    if isinstance(requests, bool) or not isinstance(requests, int | float) or not requests > MAX_RUN_REQUESTS:
        if workload.get("requests") is None and isinstance(workload.get("trace"), dict):
            workload["requests"] = MAX_RUN_REQUESTS  # all of a trace's rows would be slow, and prove nothing more
        return config, None
    try:
        parse_config(config)
    except ScenarioError as err:
        return config, str(err)
    workload["requests"] = MAX_RUN_REQUESTS
    return config, None


def check(config: dict[str, Any]) -> Outcome:
    """What cosim makes of ``config``: validated, then run when validation accepts it."""
    config = copy.deepcopy(config)
    try:
        config, refused = _capped_requests(config)
        if refused:
            return Outcome("rejected", refused)
        errors = cosim.validate(config)
    except Exception as err:  # noqa: BLE001 - validate must return problems, never raise
        return Outcome("traceback", f"validate raised {type(err).__name__}: {err}")
    if errors:
        unnamed = [e for e in errors if not isinstance(e, ScenarioError) or not e.where]
        if unnamed:
            return Outcome("traceback", f"validate returned unnamed problems: {unnamed}")
        return Outcome("rejected", "; ".join(map(str, errors))[:500])
    try:
        result = cosim.run(config)
    except HubError as err:
        return Outcome("traceback", f"run raised HubError: {err}", accepted=True)
    except CosimError as err:
        return Outcome("accepted_not_run", f"{type(err).__name__}: {err}", accepted=True)
    except Exception as err:  # noqa: BLE001 - anything else is a traceback a user would see
        return Outcome("traceback", f"run raised {type(err).__name__}: {err}", accepted=True)
    return _judge(result)


def _judge(result: cosim.RunResult) -> Outcome:
    """``ran``, or ``nonsense`` saying what is wrong with a completed run."""
    counts = result.summary.get("requests", {})
    if counts.get("completed") != counts.get("submitted") or counts.get("submitted") != len(result.requests):
        return Outcome("nonsense", f"requests {counts}, {len(result.requests)} records", accepted=True)
    bad = _finite(result.summary)
    if bad:
        return Outcome("nonsense", f"not finite: {bad}", accepted=True)
    for r in result.requests:
        if not (r.input_tokens >= 1 and r.generated_tokens == r.output_tokens >= 1
                and 0 <= r.arrival_ns <= r.first_token_ns <= r.finish_ns):
            return Outcome("nonsense", f"request {r.id}: input {r.input_tokens}, output {r.generated_tokens}/"
                                       f"{r.output_tokens}, times {r.arrival_ns} {r.first_token_ns} {r.finish_ns}",
                           accepted=True)
    return Outcome("ran", accepted=True)
