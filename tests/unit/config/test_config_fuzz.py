"""Mutated example configs give a named error or a sound run (issue 23: no input crashes or lies).

Hypothesis sets a few fields of an example config or a fuzz seed (``tests/fuzz/seeds``: classes,
dp_group, requests.parquet, hf_config and presets files' content, sweeps' varied values) to edge values
(0, -1, 1e-300, 1e300, 1e20, NaN, infinities, huge integers, wrong types) or deletes them;
``cosim.validate`` must name every problem (a ScenarioError with a path, never another exception), and a
config it accepts must run (built-in backends, a dozen requests) to a finite summary with every request
completed. Derandomized and bounded (about 150 examples, a deadline each), so that the suite stays fast
and repeatable; ``python -m tests.fuzz.fuzz_configs -n 2000`` explores further.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.mutations import (
    DELETE,
    EDGE_VALUES,
    EXAMPLES,
    SCALES,
    Mutation,
    apply,
    base_config,
    check,
    mutable_paths,
    scaled,
    value_at,
)

# mixed-fidelity.yaml times steps with GenZ and SCALE-Sim (seconds a run): the script covers it.
FAST_EXAMPLES = [path for path in EXAMPLES if path.name != "mixed-fidelity.yaml"]


@st.composite
def mutated_configs(draw: st.DrawFn) -> tuple[dict[str, Any], list[Mutation]]:
    example = draw(st.sampled_from(FAST_EXAMPLES))
    config = base_config(example)
    mutations = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(mutable_paths(config)))
        value = draw(st.sampled_from((DELETE, *EDGE_VALUES)))
        old = value_at(config, path)
        if isinstance(old, int | float) and not isinstance(old, bool) and draw(st.booleans()):
            value = scaled(old, draw(st.sampled_from(SCALES)))
        mutation = Mutation(path, value)
        try:
            config = apply(config, mutation)
        except (KeyError, IndexError, TypeError):
            continue  # a path a previous mutation removed or retyped
        mutations.append(mutation)
    return config, mutations


@settings(max_examples=150, deadline=timedelta(seconds=20), derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated_configs())
def test_mutated_example_is_a_named_error_or_a_sound_run(case: tuple[dict[str, Any], list[Mutation]]) -> None:
    config, mutations = case
    outcome = check(config)
    assert outcome.kind in ("rejected", "ran"), f"{[str(m) for m in mutations]}: {outcome}"


@pytest.mark.parametrize(("example", "path", "value"), [
    # found by fuzzing: each was a traceback, or accepted by validate and refused by the run
    ("quickstart.yaml", ("models",), True),
    ("quickstart.yaml", ("backends", "analytical", "options"), {"mbu_decode": 1e20}),
    ("disaggregated.yaml", ("backends", "analytical", "options", "kernels"), 2**63 - 1),
    ("mist-code.yaml", ("clients", 0, "memory", "levels", 0, "bandwidth_gbps"), -1e300),
    ("hermes-rag.yaml", ("workload", "requests"), None),
    # a sweep ran every point of a config whose prompts no client could serve, then lost sweep.csv
    ("sweep.yaml", ("clients", 0, "scheduler", "max_num_batched_tokens"), 1),
    # an impossible model in a config.json was refused with pydantic's own dump
    ("hf-config.yaml", ("models", "moe", "hf_config", "config", "num_attention_heads"), -1),
    # a presets file's device figures were unbounded: the roofline overflowed on these
    ("presets-file.yaml", ("presets", "devices", 0, "intra_node_latency_us"), 2**63),
    ("presets-file.yaml", ("presets", "devices", 0, "intra_node_latency_us"), float("inf")),
    ("presets-file.yaml", ("presets", "devices", 0, "intra_node_bus_efficiency"), 1e-300),
    # a backend option that is not finite reached the backend (which failed to serialize it)
    ("mixed.yaml", ("backends", "analytical", "options", "kernels"), float("-inf")),
    # a roofline efficiency near 0 passed validation and stretched a step past the simulation's clock
    ("disagg-long.yaml", ("backends", "analytical", "options", "mbu_decode"), 7.5e-13),
])
def test_fuzz_finding_stays_fixed(example: str, path: tuple[str | int, ...], value: Any) -> None:
    base = base_config(next(p for p in EXAMPLES if p.name == example))
    outcome = check(apply(base, Mutation(path, value)))
    assert outcome.kind in ("rejected", "ran"), outcome
