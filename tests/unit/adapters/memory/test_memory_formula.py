"""Predict mode of the memory backend: MIST's recursive formula, by hand."""

from __future__ import annotations

import pytest

from cosim.adapters.memory import MemoryHierarchyBackend, expected_ns, serve_probabilities
from cosim.adapters.sdk import FailedPrecondition, Session
from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import types_pb2 as pb

LOOKUP, STORE, EVICT = mem_pb.ACCESS_OP_LOOKUP, mem_pb.ACCESS_OP_STORE, mem_pb.ACCESS_OP_EVICT


def make_level(latency_ns: int, bandwidth_gbps: float, hit_rate: float,
               capacity_bytes: int = 10**12) -> mem_pb.MemoryLevel:
    return mem_pb.MemoryLevel(capacity_bytes=capacity_bytes, bandwidth_gbps=bandwidth_gbps,
                              latency_ns=latency_ns, hit_rate=hit_rate)


# Near: 100 ns + 1e6 B / 100 GB/s = 10_100 ns. Far: 1000 ns + 1e6 B / 10 GB/s = 101_000 ns.
NEAR, FAR = make_level(100, 100.0, 0.5), make_level(1000, 10.0, 0.8)
DCN = make_level(20_000_000, 128.0, 1.0)  # 20 ms + 1e6 / 128 = 20_007_812.5 ns


def predict(levels: list[mem_pb.MemoryLevel], size_bytes: int, *, kv_bytes_per_token: int = 1000,
            backend: MemoryHierarchyBackend | None = None, op: int = LOOKUP, access_id: int = 1,
            key: str = "p") -> mem_pb.AccessResult:
    backend = backend or MemoryHierarchyBackend()
    spec = mem_pb.MemorySessionSpec(levels=levels, mode=pb.SYNC_MODE_PREDICT, kv_bytes_per_token=kv_bytes_per_token)
    session = Session("s", spec, backend.open_session(spec))
    access = mem_pb.MemoryAccess(id=access_id, op=op, key=key, size_bytes=size_bytes)
    (result,) = backend.access(session, [access])
    return result


def test_two_levels_give_the_hand_computed_expectation() -> None:
    # 0.5 * 10_100 + 0.5 * 0.8 * 101_000 = 5_050 + 40_400; a miss costs nothing here.
    result = predict([NEAR, FAR], 10**6)
    assert (result.duration_ns, result.level, result.hit) == (45_450, 0, True)
    assert result.recompute_tokens == 100  # miss probability 0.5 * 0.2 of 1000 tokens


def test_three_levels_add_the_dcn_term_and_leave_nothing_to_recompute() -> None:
    # 45_450 + 0.5 * 0.2 * 20_007_812.5 = 2_046_231.25, rounded up.
    result = predict([NEAR, FAR, DCN], 10**6)
    assert (result.duration_ns, result.recompute_tokens) == (2_046_232, 0)
    assert expected_ns([NEAR, FAR, DCN], 10**6) == pytest.approx(2_046_231.25)


def test_a_certain_miss_recomputes_every_token_rounded_up() -> None:
    result = predict([make_level(100, 100.0, 0.0)], 1001, kv_bytes_per_token=1000)
    assert (result.duration_ns, result.level, result.hit, result.recompute_tokens) == (0, -1, False, 2)


def test_level_names_the_most_likely_outcome() -> None:
    # Serve probabilities 0.1, 0.18, 0.72: the far level is likeliest.
    result = predict([make_level(100, 100.0, 0.1), make_level(1000, 10.0, 0.2)], 10**6)
    assert (result.level, result.hit) == (-1, False)
    assert predict([make_level(100, 100.0, 0.1), make_level(1000, 10.0, 0.9)], 10**6).level == 1


def test_a_level_smaller_than_the_kv_cannot_hit() -> None:
    small = make_level(100, 100.0, 1.0, capacity_bytes=1000)
    assert serve_probabilities([small, FAR], 10**6) == [0.0, 0.8, pytest.approx(0.2)]
    assert predict([small, FAR], 10**6).level == 1


def test_store_writes_to_the_nearest_level_that_fits() -> None:
    small = make_level(100, 100.0, 1.0, capacity_bytes=1000)
    result = predict([small, FAR], 10**6, op=STORE)
    assert (result.level, result.duration_ns) == (1, 101_000)
    assert predict([small], 10**6, op=STORE).level == -1


def test_evict_in_predict_mode_is_free() -> None:
    assert predict([NEAR], 10**6, op=EVICT).duration_ns == 0


def test_sampled_outcomes_are_deterministic_and_average_to_the_formula() -> None:
    backend = MemoryHierarchyBackend(sampling="sampled", seed=7)
    results = [predict([NEAR, FAR], 10**6, backend=backend, access_id=i) for i in range(4000)]
    again = [predict([NEAR, FAR], 10**6, backend=MemoryHierarchyBackend(sampling="sampled", seed=7),
                     access_id=i) for i in range(50)]
    assert [r.level for r in results[:50]] == [r.level for r in again]
    assert {r.duration_ns for r in results} == {0, 10_100, 101_000}
    assert all(r.recompute_tokens == 1000 for r in results if r.level == -1)
    mean = sum(r.duration_ns for r in results) / len(results)
    assert mean == pytest.approx(45_450, rel=0.05)
    assert sum(r.level == -1 for r in results) / len(results) == pytest.approx(0.1, abs=0.02)


def test_unknown_sampling_is_refused() -> None:
    with pytest.raises(ValueError, match="sampling='mean'"):
        MemoryHierarchyBackend(sampling="mean")


def test_advance_is_refused_in_predict_mode() -> None:
    backend = MemoryHierarchyBackend()
    spec = mem_pb.MemorySessionSpec(levels=[NEAR], mode=pb.SYNC_MODE_PREDICT)
    with pytest.raises(FailedPrecondition, match="predict mode"):
        backend.advance(Session("s", spec, backend.open_session(spec)), 10)
