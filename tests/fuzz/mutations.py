"""Mutated example configs, and what cosim must make of each (issue 23, "Bad input").

A mutation sets a few fields of an example config (``examples/*.yaml``, ``examples/bench``,
``examples/multistage``, and the seeds of ``tests/fuzz/seeds``: request classes, ``dp_group``,
requests.parquet, ``hf_config`` files, presets files and sweeps) to edge values (0, -1, 1e-300, 1e300,
1e20, NaN, infinities, huge integers, wrong types) or deletes them. The files a config names for
presets are inlined, so mutations reach their content (:mod:`tests.fuzz.seed_files`). :func:`check`
then asks ``cosim.validate``, and runs what it accepts (built-in backends, in-process, a few requests);
a config with a ``vary:`` (the sweep seed) is swept instead, ``cosim.sweep(config, vary)``, and judged
point by point. Every outcome is one of:

- ``rejected``: validate named every problem (a :class:`~cosim.ScenarioError` with a path);
- ``ran``: the run completed every request, with a finite summary and sane records;
- ``traceback``: an exception that is not a named cosim error, or a HubError (a cosim bug); also a
  rejection that passes on a raw exception: pydantic's own dump, or an unexpected exception in a
  built-in backend's code (``ValueError: ... at cosim/adapters/roofline/estimator.py:314``), where the
  config check should have named the field;
- ``accepted_not_run``: validate accepted a config the run then refused or failed;
- ``nonsense``: the run completed but its summary or records (or a sweep's sweep.csv, or a run
  folder's requests.parquet) are not finite or not complete.

Both ``tests/unit/config/test_config_fuzz.py`` (hypothesis, bounded time) and ``tests/fuzz/fuzz_configs.py``
(thousands of mutations, a timeout each) use these.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import random
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import cosim
from cosim.hub.config.loading import parse_config
from cosim.hub.errors import CosimError, HubError, ScenarioError
from cosim.hub.studies.sweep import METRIC_COLUMNS, SWEEP_CSV
from tests.fuzz import seed_files
from tests.paths import REPO

SEEDS = sorted(REPO.glob("tests/fuzz/seeds/*.yaml"))
EXAMPLES = sorted([*REPO.glob("examples/*.yaml"), *REPO.glob("examples/bench/*.yaml"),
                   *REPO.glob("examples/multistage/*.yaml")]) + SEEDS
#: What a rejection's text shows when it passes on a raw exception instead of naming the problem: pydantic's
#: dump (its headline, its links), or a built-in backend's unexpected exception with its site.
RAW_EXCEPTION = re.compile(r"validation errors? for |errors\.pydantic\.dev|\bat (cosim/)?adapters/\S+:\d+ in ")
#: Output keys this harness sets (a run folder is written only where a seed asks for requests_format).
OWN_OUTPUT_KEYS = ("dir", "plots")

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
    the files it names for presets inlined, at most :data:`MAX_RUN_REQUESTS` requests."""
    config: dict[str, Any] = yaml.safe_load(example.read_text())
    config["base_dir"] = str(example.parent)
    kept = {k: v for k, v in (config.get("output") or {}).items() if k not in OWN_OUTPUT_KEYS}
    config["output"] = {"dir": None, "plots": False, **kept}
    seed_files.inline(config, example.parent)
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
    fields this harness owns (base_dir, output.dir, output.plots)."""
    def own(path: tuple[str | int, ...]) -> bool:
        return path[0] == "base_dir" or path[0] == "output" and (len(path) == 1 or path[1] in OWN_OUTPUT_KEYS)

    paths = [p for p, _ in leaves(config) if not own(p)]
    numbers = [p for p, v in leaves(config) if not own(p) and isinstance(v, int | float) and not isinstance(v, bool)]
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
    """What cosim makes of ``config``: validated, then run when validation accepts it; swept instead when it
    has a ``vary:`` (varied key -> values, the harness's own key, taken out of the scenario)."""
    config = copy.deepcopy(config)
    with tempfile.TemporaryDirectory(prefix="cosim-fuzz-") as tmp:
        folder = Path(tmp)
        seed_files.write_back(config, folder)
        if "vary" in config:
            return _check_sweep(config, config.pop("vary"), folder)
        return _check_run(config, folder)


def _check_run(config: dict[str, Any], folder: Path) -> Outcome:
    """A run of ``config``; its run folder is written into ``folder`` (and judged) where the config sets
    ``output.requests_format``."""
    try:
        config, refused = _capped_requests(config)
        if refused:
            return _rejected(refused)
        errors = cosim.validate(config)
    except Exception as err:  # noqa: BLE001 - validate must return problems, never raise
        return Outcome("traceback", f"validate raised {type(err).__name__}: {err}")
    if errors:
        unnamed = [e for e in errors if not isinstance(e, ScenarioError) or not e.where]
        if unnamed:
            return Outcome("traceback", f"validate returned unnamed problems: {unnamed}")
        return _rejected("; ".join(map(str, errors)))
    output = config.get("output")
    out = folder / "run" if isinstance(output, dict) and "requests_format" in output else None
    try:
        result = cosim.run(config, output_dir=out)
    except HubError as err:
        return Outcome("traceback", f"run raised HubError: {err}", accepted=True)
    except CosimError as err:
        return Outcome("accepted_not_run", f"{type(err).__name__}: {err}", accepted=True)
    except Exception as err:  # noqa: BLE001 - anything else is a traceback a user would see
        return Outcome("traceback", f"run raised {type(err).__name__}: {err}", accepted=True)
    outcome = _judge(result)
    return _judge_requests_file(out, len(result.requests)) if out is not None and outcome.kind == "ran" else outcome


def _rejected(text: str) -> Outcome:
    """``rejected`` with ``text``; ``traceback`` where the text passes on a raw exception (:data:`RAW_EXCEPTION`)."""
    if RAW_EXCEPTION.search(text):
        return Outcome("traceback", f"rejected with a raw exception: {text}"[:2000])
    return Outcome("rejected", text[:500])


def vary_specs(vary: Any) -> list[str]:
    """``cosim sweep``'s ``--vary`` specs of a (mutated) ``vary:`` mapping: ``key=[v1, v2]``, each value in
    YAML's flow style; anything but a mapping becomes specs as it stands (which the sweep must refuse)."""
    def flow(value: Any) -> str:
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("...\n").strip()

    if isinstance(vary, dict):
        return [f"{key}={flow(values)}" for key, values in vary.items()]
    return [flow(v) for v in vary] if isinstance(vary, list) else [flow(vary)]


def _check_sweep(config: dict[str, Any], vary: Any, folder: Path) -> Outcome:
    """A sweep of ``config`` over ``vary``: refused with a named error, or every point run to a sound summary
    and a finite row of sweep.csv (and a DataFrame of them)."""
    try:
        config, refused = _capped_requests(config)
    except Exception as err:  # noqa: BLE001 - the config check must name problems, never raise
        return Outcome("traceback", f"config check raised {type(err).__name__}: {err}")
    if refused:
        return _rejected(refused)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    try:
        result = cosim.sweep(path, vary_specs(vary), output_dir=folder / "sweep", plots=False)
        result.df()  # the varied values typed as the config read them
    except HubError as err:
        return Outcome("traceback", f"sweep raised HubError: {err}")
    except ScenarioError as err:
        if not err.where:
            return Outcome("traceback", f"sweep raised an unnamed problem: {err}")
        return _rejected(str(err))
    except CosimError as err:
        return Outcome("accepted_not_run", f"{type(err).__name__}: {err}", accepted=True)
    except Exception as err:  # noqa: BLE001 - anything else is a traceback a user would see
        return Outcome("traceback", f"sweep raised {type(err).__name__}: {err}")
    return _judge_sweep(result)


def _judge_sweep(result: cosim.SweepResult) -> Outcome:
    """``ran`` when every point completed all its requests with a finite summary and sweep.csv holds a
    finite row per point; else what went wrong."""
    for row in result.rows:
        if row["error"]:
            return Outcome("accepted_not_run", f"point {row['point']}: {row['error']}", accepted=True)
        summary = json.loads((result.output_dir / row["point"] / "summary.json").read_text())
        counts = summary.get("requests", {})
        if not counts.get("submitted") or counts.get("completed") != counts.get("submitted"):
            return Outcome("nonsense", f"point {row['point']}: requests {counts}", accepted=True)
        bad = _finite(summary)
        if bad:
            return Outcome("nonsense", f"point {row['point']}: not finite: {bad}", accepted=True)
    with (result.output_dir / SWEEP_CSV).open(newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    if [r["point"] for r in table] != [r["point"] for r in result.rows]:
        return Outcome("nonsense", f"sweep.csv has points {[r['point'] for r in table]}", accepted=True)
    for r in table:
        bad = next((f"{c}={r[c]!r}" for c in METRIC_COLUMNS if r[c] and not _is_finite_text(r[c])), None)
        if bad:
            return Outcome("nonsense", f"sweep.csv point {r['point']}: {bad}", accepted=True)
    return Outcome("ran", accepted=True)


def _is_finite_text(text: str) -> bool:
    """Whether ``text`` reads as a finite number."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _judge_requests_file(out: Path, count: int) -> Outcome:
    """``ran`` when the run folder's requests table (requests.parquet, or requests.csv) has ``count`` rows
    and no number in it is infinite or NaN; else ``nonsense``."""
    parquet = out / "requests.parquet"
    if parquet.is_file():
        import pyarrow.parquet as pq

        columns: dict[str, list[Any]] = pq.read_table(parquet).to_pydict()
    elif (out / "requests.csv").is_file():
        with (out / "requests.csv").open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        columns = {name: [_csv_number(r[name]) for r in rows] for name in (rows[0] if rows else {})}
    else:
        return Outcome("nonsense", f"no requests table in {sorted(p.name for p in out.iterdir())}", accepted=True)
    lengths = {len(values) for values in columns.values()}
    if lengths != {count}:
        return Outcome("nonsense", f"requests table of {lengths} rows for {count} requests", accepted=True)
    for name, values in columns.items():
        bad = next((v for v in values if isinstance(v, float) and not math.isfinite(v)), None)
        if bad is not None:
            return Outcome("nonsense", f"requests table column {name} holds {bad}", accepted=True)
    return Outcome("ran", accepted=True)


def _csv_number(text: str) -> Any:
    """A CSV cell as a float where it reads as one (``nan`` and ``inf`` included), else the text."""
    try:
        return float(text)
    except ValueError:
        return text


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
