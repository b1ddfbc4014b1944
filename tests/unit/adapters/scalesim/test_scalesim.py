"""SCALE-Sim cycles against the closed-form systolic-array count, reuse and options."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("scalesim")

from cosim.adapters.scalesim import ArrayConfig, ScaleSimBackend, closed_form_cycles, simulate_gemm, step_work
from cosim.adapters.scalesim.workload import make_shape
from cosim.adapters.sdk import InvalidArgument, Session
from cosim.adapters.sdk.testing import sample_session_spec
from cosim.v1 import types_pb2 as pb

TINY = ArrayConfig(rows=4, cols=4, num_arrays=1, dram_words_per_cycle=16, max_folds=0, max_stream=0)
TINY_OPTIONS = {"rows": 8, "cols": 8, "num_arrays": 1, "max_folds": 2, "max_stream": 16, "clock_ghz": 1.0,
                "ifmap_sram_kb": 64, "filter_sram_kb": 64, "ofmap_sram_kb": 32}


@pytest.mark.parametrize("dataflow", ["ws", "os", "is"])
@pytest.mark.parametrize("gemm", [(4, 4, 4), (8, 4, 4), (4, 8, 4), (4, 4, 8), (5, 7, 9)])
def test_cycles_match_the_closed_form(dataflow: str, gemm: tuple[int, int, int]) -> None:
    """E.g. ws 4x4x4 on 4x4: one fold of 2R + C + T - 2 = 14 cycles, counted from 0: 13."""
    config = dataclasses.replace(TINY, dataflow=dataflow)
    result = simulate_gemm(config, *gemm)
    assert (result.compute, result.stall) == (closed_form_cycles(config, *gemm), 0)


def test_hand_computed_weight_stationary_gemm() -> None:
    """16x16x16 on 4x4, ws: 4 x 4 folds of (8 + 4 + 16 - 2) = 26 cycles, minus 1."""
    assert simulate_gemm(TINY, 16, 16, 16).compute == 16 * 26 - 1


def test_stream_extrapolation_is_exact_for_stall_free_gemms() -> None:
    full = simulate_gemm(TINY, 64, 4, 4)
    reduced = simulate_gemm(dataclasses.replace(TINY, max_stream=16), 64, 4, 4)
    assert (reduced.compute, reduced.num_simulated) == (full.compute, 2)


def test_fold_scaling_is_within_a_few_cycles() -> None:
    full = simulate_gemm(TINY, 8, 16, 16)
    reduced = simulate_gemm(dataclasses.replace(TINY, max_folds=2), 8, 16, 16)
    assert reduced.compute == pytest.approx(full.compute, abs=4)


def test_runs_are_shared_through_the_memo() -> None:
    config, memo = dataclasses.replace(TINY, max_stream=8), {}
    first = simulate_gemm(config, 40, 4, 4, memo)
    second = simulate_gemm(config, 64, 4, 4, memo)
    assert (first.num_simulated, second.num_simulated) == (2, 0)


def open_session(options: dict[str, object]) -> tuple[ScaleSimBackend, Session[pb.SessionSpec]]:
    spec = sample_session_spec()
    spec.options.update(options)
    backend = ScaleSimBackend()
    return backend, Session(id="s", spec=spec, state=backend.open_session(spec))


def test_step_reuses_gemm_results_across_steps() -> None:
    backend, session = open_session(TINY_OPTIONS)
    first = backend.predict(session, pb.StepBatch(new_tokens=[32, 1], context_tokens=[0, 40]))
    runs = session.state.num_simulations
    backend.predict(session, pb.StepBatch(new_tokens=[32, 1], context_tokens=[0, 41]))
    assert session.state.num_simulations == runs  # only the decode's KV read changed
    assert first.duration_ns == pytest.approx(first.compute_ns + first.memory_ns, abs=2)


def test_without_reuse_steps_simulate_afresh() -> None:
    backend, session = open_session({**TINY_OPTIONS, "reuse": False})
    backend.predict(session, pb.StepBatch(new_tokens=[4], context_tokens=[0]))
    runs = session.state.num_simulations
    backend.predict(session, pb.StepBatch(new_tokens=[4], context_tokens=[0]))
    assert session.state.num_simulations == 2 * runs


def test_bucket_m_interpolates_between_powers_of_two() -> None:
    backend, session = open_session({**TINY_OPTIONS, "bucket_m": True})
    low, high, mid = (backend._gemm(session.state, (m, 8, 8)) for m in (4, 8, 6))
    assert mid.compute == pytest.approx((low.compute + high.compute) / 2)


def test_step_work_counts_layers_heads_and_lm_head() -> None:
    spec = sample_session_spec()
    config = ArrayConfig(num_arrays=1)
    work = step_work(make_shape(spec), config, [16, 1], [0, 100])
    assert work.gemms[(17, 6144, 4096)] == 32  # QKV: (32 + 2 x 8) x 128
    assert work.gemms[(16, 16, 128)] == 32 * 32  # QK^T of the prefill, every head and layer
    assert work.gemms[(2, 128256, 4096)] == 1  # LM head for both sequences


@pytest.mark.parametrize("options, field", [
    ({"dataflow": "rs"}, "spec.options.dataflow"),
    ({"rows": 0}, "spec.options.rows"),
    ({"cols": 1025}, "spec.options.cols"),
    ({"max_stream": 1}, "spec.options.max_stream"),
    ({"reuse": "yes"}, "spec.options.reuse"),
    ({"array": 4}, "spec.options.array"),
])
def test_bad_options_name_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        open_session(options)
