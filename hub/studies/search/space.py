"""The deployment space of ``cosim search``: a base scenario and the knobs to vary (MIST §V-A).

Main names: :class:`SearchSpace` (the SPACE.yaml model), :func:`load_space`,
:func:`enumerate_candidates` and :class:`Candidate` (one deployment, as a full
scenario mapping, with its memory check already done).

Deployments: collocated ``xm`` (x mixed clients) for every x within the
device budget, and disaggregated ``ypzd`` (y prefill, z decode clients) for
every split y + z within the budget, each client on ``tensor x pipeline``
devices of one SKU (with ``heterogeneous: true`` prefill and decode may use
different SKUs). Each shape is crossed with batching, chunk size (chunked
only) and max_num_seqs. A candidate whose weights do not fit its devices is
kept, marked infeasible with the reason; nothing is dropped silently.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from ...config import presets, safe_yaml
from ...config.choices import BatchingName
from ...config.frozen import FrozenModel
from ...config.loading import parse_config
from ...config.resolve import kv_capacity_blocks, resolve_hardware, resolve_model
from ...errors import ScenarioError
from .scenario import as_mapping


class Budget(FrozenModel):
    """How many devices a deployment may use."""

    max_devices: int = Field(8, gt=0, description="most devices in one deployment (all clients together)")
    min_devices: int = Field(1, gt=0, description="fewest devices in one deployment")


class Parallelism(FrozenModel):
    """Model-parallel degrees to try; each client uses tensor x pipeline devices."""

    tensor: list[int] = Field(default_factory=lambda: [1], min_length=1, description="tensor-parallel degrees")
    pipeline: list[int] = Field(default_factory=lambda: [1], min_length=1, description="pipeline-parallel degrees")


Deployment = Literal["collocated", "disaggregated"]


def _continuous() -> list[BatchingName]:
    return ["continuous"]


def _both_deployments() -> list[Deployment]:
    return ["collocated", "disaggregated"]


class SchedulerKnobs(FrozenModel):
    """Scheduler settings to try; every other scheduler field comes from the base client."""

    batching: list[BatchingName] = Field(default_factory=_continuous, min_length=1, description="batching strategies")
    chunk_size: list[int] = Field(default_factory=list, description="chunked prefill budgets (chunked only)")
    max_num_seqs: list[int] = Field(default_factory=list, description="most sequences per step (default: base)")


class GoodputSettings(FrozenModel):
    """How each deployment's goodput is measured (see ``cosim goodput``)."""

    confidence: float = Field(0.9, gt=0, lt=1, description="joint confidence of the feasibility test")
    replications: int = Field(3, ge=1, description="seeded runs per rate")
    tolerance: float = Field(0.05, gt=0, description="relative width of the goodput bracket")
    requests: int | None = Field(None, gt=0, description="requests per run (default: the base workload's)")
    max_runs: int = Field(400, gt=0, description="most simulations per deployment")
    refine_upper: bool = Field(False, description="also narrow the goodput interval's upper end (about 2x runs); "
                                                  "ranking uses only the lower end")


class SearchSpace(FrozenModel):
    """A SPACE.yaml: the base scenario, the knobs to vary, and what to rank by."""

    base: str | dict[str, Any] = Field(description="a scenario (path relative to the space file, or inline)")
    model: str | None = Field(None, description="key of base models to serve (default: the first client's)")
    backend: str | None = Field(None, description="key of base backends timing every client (default: first's)")
    devices: list[str] = Field(min_length=1, description="device presets (SKUs) to try")
    prices: dict[str, float] = Field(default_factory=dict, description="$/device-hour overriding the presets")
    budget: Budget = Field(default_factory=Budget)
    parallelism: Parallelism = Field(default_factory=Parallelism)
    deployments: list[Deployment] = Field(default_factory=_both_deployments, min_length=1,
                                          description="xm and/or ypzd")
    heterogeneous: bool = Field(False, description="disaggregated: prefill and decode SKUs may differ")
    instances: list[int] = Field(default_factory=list,
                                 description="allowed client counts per deployment (default: all in budget)")
    scheduler: SchedulerKnobs = Field(default_factory=SchedulerKnobs)
    goodput: GoodputSettings = Field(default_factory=GoodputSettings)
    objective: Literal["goodput_per_usd", "goodput", "tokens_per_usd", "tokens_per_j"] = Field(
        "goodput_per_usd", description="what the table is ranked by: goodput, goodput or output tokens per dollar "
                                       "at the goodput rate, or output tokens per joule at that rate (docs/energy.md)")
    keep_top: int = Field(10, ge=0, description="rows ranked exactly as an exhaustive search ranks them; a deployment "
                                                 "that cannot reach them is pruned after its bracket (0: none is)")
    output: dict[str, str] = Field(default_factory=dict, description="{dir: folder of the results}")


@dataclass
class Candidate:
    """One deployment to evaluate.

    Attributes:
        key: hash of everything that determines the result (checkpoint key).
        label: e.g. ``H100-SXM tp1 1p2d chunked c512 s64``.
        facts: the knobs as table columns (device, tp, pp, shape, batching, ...).
        scenario: the full scenario mapping.
        cost_per_hour_usd: all devices' price per hour.
        infeasible: why it cannot run (weights do not fit), or "".
    """

    key: str
    label: str
    facts: dict[str, Any]
    scenario: dict[str, Any] = field(repr=False)
    cost_per_hour_usd: float
    infeasible: str = ""


def load_space(space: str | Path | Mapping[str, Any] | SearchSpace) -> tuple[SearchSpace, Path]:
    """Validates a space; returns it and the folder its relative paths resolve against.

    Raises:
        ScenarioError: naming the path of every problem.
    """
    if isinstance(space, SearchSpace):
        return space, Path.cwd()
    folder = Path.cwd()
    if isinstance(space, (str, Path)):
        path = Path(space)
        try:
            data = safe_yaml.load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ScenarioError(str(path), f"cannot read search space: {err}") from None
        folder = path.resolve().parent
    else:
        data = dict(space)
    try:
        return SearchSpace.model_validate(data), folder
    except ValidationError as err:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ScenarioError(str(space) if isinstance(space, (str, Path)) else "space", "; ".join(problems)) from None


def _shapes(space: SearchSpace, per_client: int) -> list[tuple[int, int, int]]:
    """(mixed, prefill, decode) client counts within the budget."""
    most = space.budget.max_devices // per_client
    allowed = set(space.instances) if space.instances else set(range(1, most + 1))
    shapes = []
    for total in range(1, most + 1):
        if total not in allowed or total * per_client < space.budget.min_devices:
            continue
        if "collocated" in space.deployments:
            shapes.append((total, 0, 0))
        if "disaggregated" in space.deployments:
            shapes.extend((0, y, total - y) for y in range(1, total))
    return shapes


def _sched_variants(space: SearchSpace, base: Mapping[str, Any]) -> list[dict[str, Any]]:
    seqs = space.scheduler.max_num_seqs or [base.get("max_num_seqs", 256)]
    variants: list[dict[str, Any]] = []
    for batching, max_num_seqs in itertools.product(space.scheduler.batching, seqs):
        chunks: list[int | None] = [*space.scheduler.chunk_size] if batching == "chunked" else []
        chunks = chunks or [None]
        variants.extend({"batching": batching, "max_num_seqs": n, "chunk_size": c}
                        for c, n in itertools.product(chunks, [max_num_seqs]))
    return variants


def _hardware_key(device: str) -> str:
    return presets.get_device(device).name


def _price(space: SearchSpace, device: str) -> float:
    name = _hardware_key(device)
    for key, value in space.prices.items():
        if _hardware_key(key) == name:
            return value
    price = presets.get_device(device).price_per_hour_usd
    if price is None:
        raise ScenarioError(f"prices.{name}", "the preset lists no price; give one under prices")
    return price


def _client(name: str, role: str, model: str, backend: str, device: str, tp: int, pp: int,
            scheduler: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": name, "model": model, "role": role, "backend": backend,
            "hardware": {"device": device, "count": tp * pp, "tensor_parallel": tp, "pipeline_parallel": pp},
            "scheduler": dict(scheduler)}


def _label(prefill_dev: str, decode_dev: str, tp: int, pp: int, shape: tuple[int, int, int],
           sched: Mapping[str, Any]) -> str:
    mixed, num_p, num_d = shape
    if mixed:
        where, form = prefill_dev, f"{mixed}m"
    elif prefill_dev == decode_dev:
        where, form = prefill_dev, f"{num_p}p{num_d}d"
    else:
        where, form = f"{prefill_dev}+{decode_dev}", f"{num_p}p{num_d}d"
    chunk = f" c{sched['chunk_size']}" if sched.get("chunk_size") else ""
    return f"{where} tp{tp}pp{pp} {form} {sched['batching']}{chunk} s{sched['max_num_seqs']}"


def candidate_key(scenario: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """A short hash of the scenario and the goodput settings (what determines a result)."""
    text = json.dumps({"scenario": scenario, "goodput": settings}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def memory_problem(scenario: Mapping[str, Any]) -> str:
    """Why some client's weights do not fit its devices, or "" when all fit."""
    config = parse_config(scenario)
    for i, client in enumerate(config.clients):
        try:
            model = resolve_model(config, str(client.model))
            kv_capacity_blocks(client, model, resolve_hardware(config, client, f"clients[{i}]"), f"clients[{i}]")
        except ScenarioError as err:
            return f"{client.name}: {err.message}"
    return ""


def enumerate_candidates(space: SearchSpace, folder: Path) -> tuple[list[Candidate], Path]:
    """Every deployment of the space, in a fixed order, with its memory check; and the base's folder."""
    base_source = str(folder / space.base) if isinstance(space.base, str) else space.base
    base, base_dir = as_mapping(base_source)
    first = base["clients"][0]
    model, backend = space.model or first["model"], space.backend or first["backend"]
    for where, name, table in (("model", model, "models"), ("backend", backend, "backends")):
        if name not in base[table]:
            raise ScenarioError(where, f"unknown {where} {name!r}; the base defines {sorted(base[table])}")
    devices = list(dict.fromkeys(_hardware_key(d) for d in space.devices))
    hardware = {d: {"preset": d, "overrides": {}, "price_per_hour_usd": _price(space, d)} for d in devices}
    pairs = [(d, d) for d in devices]
    if space.heterogeneous and "disaggregated" in space.deployments:
        pairs += [(p, d) for p, d in itertools.permutations(devices, 2)]
    settings = space.goodput.model_dump()
    found: list[Candidate] = []
    for (pre, dec), tp, pp in itertools.product(pairs, space.parallelism.tensor, space.parallelism.pipeline):
        for shape in _shapes(space, tp * pp):
            if shape[0] and pre != dec:
                continue  # a collocated deployment has one SKU
            for sched in _sched_variants(space, first["scheduler"]):
                found.append(_candidate(base, base_dir, hardware, model, backend, (pre, dec, tp, pp), shape,
                                        {**first["scheduler"], **sched}, settings))
    return found, base_dir


def _candidate(base: Mapping[str, Any], base_dir: Path, hardware: Mapping[str, Any], model: str, backend: str,
               where: tuple[str, str, int, int], shape: tuple[int, int, int], sched: dict[str, Any],
               settings: Mapping[str, Any]) -> Candidate:
    pre, dec, tp, pp = where
    mixed, num_p, num_d = shape
    clients = [_client(f"m{i}", "mixed", model, backend, pre, tp, pp, sched) for i in range(mixed)]
    clients += [_client(f"p{i}", "prefill", model, backend, pre, tp, pp, sched) for i in range(num_p)]
    clients += [_client(f"d{i}", "decode", model, backend, dec, tp, pp, sched) for i in range(num_d)]
    scenario = copy.deepcopy(dict(base))
    scenario.update(hardware={k: v for k, v in hardware.items() if k in (pre, dec)}, clients=clients)
    scenario["router"] = {**scenario["router"], "heavy_clients": []}
    num_pre, num_dec = (mixed + num_p) * tp * pp, num_d * tp * pp
    cost = num_pre * hardware[pre]["price_per_hour_usd"] + num_dec * hardware[dec]["price_per_hour_usd"]
    facts = {"prefill_device": pre, "decode_device": dec if num_d else pre, "tp": tp, "pp": pp,
             "deployment": "collocated" if mixed else "disaggregated",
             "shape": f"{mixed}m" if mixed else f"{num_p}p{num_d}d", "batching": sched["batching"],
             "chunk_size": sched.get("chunk_size"), "max_num_seqs": sched["max_num_seqs"],
             "num_devices": num_pre + num_dec}
    key = candidate_key({"scenario": scenario, "base_dir": str(base_dir)}, settings)
    return Candidate(key=key, label=_label(pre, dec, tp, pp, shape, sched), facts=facts, scenario=scenario,
                     cost_per_hour_usd=round(cost, 6), infeasible=memory_problem(scenario))
