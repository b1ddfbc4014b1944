"""Unit tests of the roofline backend's model (operators, Algorithm 1, TP/PP/MoE)."""

from __future__ import annotations

import random
import time

import pytest

from cosim.adapters.roofline import RooflineBackend, batch_stats, estimate, estimator, open_model
from cosim.adapters.roofline.operators import lora_adapters
from cosim.adapters.sdk import InvalidArgument, Session
from cosim.v1 import types_pb2 as pb
from tests.unit.adapters.roofline.roofline_helpers import LLAMA2_70B, make_model, make_spec, time_step

# A one-layer MHA model on a round device: every number below is worked by hand.
TINY = dict(name="tiny", num_layers=1, hidden_size=1024, num_attention_heads=8, num_kv_heads=8,
            intermediate_size=4096, vocab_size=1000, bytes_per_param=2, bytes_per_kv_element=2, gated_mlp=True)
ROUND = dict(device="round", peak_tflops=100.0, mem_bandwidth_gbps=1000.0, intra_node_gbps=100.0)
# BestServe's tables (eager kernels: separate SiLU and mul, a materialized score matrix).
HALF = {"kernels": "eager", "mfu": 0.5, "mbu": 0.5, "dispatch_norm_us": 0, "dispatch_attention_us": 0,
        "dispatch_mlp_us": 0}


def test_mlp_prefill_matches_table_1_by_hand() -> None:
    """b=1, s=128, h=1024, h0=4096, e_c S_c = 5e13 FLOP/s, e_m S_m = 5e11 B/s."""
    timing = time_step(make_model(model=TINY, hardware=ROUND, options=HALF), [(128, 0)])
    # GATE_PROJ: W = 2 s h h0 = 1,073,741,824 FLOP -> 21,474.83648 ns (compute bound:
    # Q = 2 (s (h + h0) + h h0) = 9,699,328 B -> 19,398.656 ns). UP_PROJ the same.
    assert timing.breakdown["mlp_gate_up"] == pytest.approx(2 * 21_474.83648, rel=1e-12)
    assert timing.breakdown["mlp_down"] == pytest.approx(21_474.83648, rel=1e-12)
    # SiLU: Q = 4 s h0 = 2,097,152 B -> 4,194.304 ns; mul: Q = 6 s h0 -> 6,291.456 ns.
    assert timing.breakdown["mlp_act"] == pytest.approx(4_194.304 + 6_291.456, rel=1e-12)


def test_attention_decode_projections_by_hand() -> None:
    """Q/K/V projections of one decode: Q = 2 (2 h + h^2) B each -> 3 x 4,202.496 ns."""
    timing = time_step(make_model(model=TINY, hardware=ROUND, options=HALF), [(1, 100)])
    assert timing.breakdown["qkv_proj"] == pytest.approx(3 * 2_101_248 / 5e11 * 1e9, rel=1e-12)
    # QK^T reads q (h), K (L h) and writes scores (heads L), L = 101, all x 2 bytes.
    assert timing.breakdown["attn_qk"] == pytest.approx(2 * (1024 + 101 * 1024 + 8 * 101) / 5e11 * 1e9, rel=1e-12)


def _brute_force(pre: list[tuple[float, float]], layer: list[tuple[float, float]], n: int,
                 post: list[tuple[float, float]]) -> float:
    td = tc = 0.0
    for d, c in pre + layer * n + post:
        td += d
        tc = max(td, tc) + c
    return tc


def test_algorithm_1_overlap_by_hand() -> None:
    assert estimator.run_stage([], [(10.0, 1.0), (10.0, 1.0)], 3, []) == 61.0   # dispatch bound
    assert estimator.run_stage([], [(1.0, 10.0), (1.0, 10.0)], 3, []) == 61.0   # compute bound
    assert estimator.run_stage([], [(5.0, 1.0), (1.0, 10.0)], 3, []) == 38.0    # mixed


def test_algorithm_1_shortcut_equals_the_full_loop() -> None:
    rng = random.Random(4)
    for _ in range(300):
        layer = [(rng.uniform(0, 5), rng.uniform(0, 5)) for _ in range(4)]
        pre, post = [(0.0, rng.uniform(0, 3))], [(rng.uniform(0, 2), rng.uniform(0, 2))]
        n = rng.randint(1, 40)
        assert estimator.run_stage(pre, layer, n, post) == pytest.approx(_brute_force(pre, layer, n, post), rel=1e-9)


def test_decode_is_memory_bound_and_long_prefill_compute_bound() -> None:
    model = make_model(tp=2, options={"kernels": "fused"})
    decode = time_step(model, [(1, 1000)] * 8)
    prefill = time_step(model, [(4096, 0)])
    assert decode.memory_ns > 20 * decode.compute_ns
    assert prefill.compute_ns > 5 * prefill.memory_ns
    assert prefill.duration_ns > 5 * decode.duration_ns


def test_tensor_parallelism_halves_gemm_time_and_adds_all_reduce() -> None:
    one, two = make_model(tp=1), make_model(tp=2)
    t1, t2 = time_step(one, [(2048, 0)]), time_step(two, [(2048, 0)])
    for key in ("mlp_gate_up", "mlp_down", "o_proj"):
        assert t2.breakdown[key] == pytest.approx(t1.breakdown[key] / 2, rel=1e-9)
    assert "allreduce" not in t1.breakdown and t2.breakdown["allreduce"] > 0
    assert t2.communication_ns > 0 == t1.communication_ns


def test_pipeline_parallelism_adds_stage_sends() -> None:
    """With no dispatch cost, a microbatch through 2 stages = 1 stage + one send."""
    no_dispatch = {"dispatch_norm_us": 0, "dispatch_attention_us": 0, "dispatch_mlp_us": 0, "p2p_latency_us": 5}
    one, two = make_model(options=no_dispatch), make_model(pp=2, options=no_dispatch)
    t1, t2 = time_step(one, [(512, 0)]), time_step(two, [(512, 0)])
    send = t2.breakdown["pp_send"]
    assert send > 5_000
    assert t2.duration_ns == pytest.approx(t1.duration_ns + send, abs=2)


def test_mixed_step_costs_less_than_its_parts_apart() -> None:
    # Eager kernels: with fused ones the 16 decodes alone (memory bound at the decode MBU) outlast
    # the mixed step, whose token-wise operators run at the prefill-weighted blend of efficiencies.
    model = make_model(tp=4, options={"kernels": "eager"})
    prefill, decode = time_step(model, [(512, 0)]), time_step(model, [(1, 900)] * 16)
    mixed = time_step(model, [(512, 0)] + [(1, 900)] * 16)
    assert max(prefill.duration_ns, decode.duration_ns) < mixed.duration_ns < prefill.duration_ns + decode.duration_ns


MIXTRAL = dict(LLAMA2_70B, name="mixtral", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
               intermediate_size=14336, num_experts=8, experts_per_token=2)


def test_moe_reads_only_activated_experts() -> None:
    model = make_model(model=MIXTRAL, tp=2)
    one = time_step(model, [(1, 100)])
    many = time_step(model, [(1, 100)] * 64)
    # One token activates 2 of 8 experts; 64 tokens activate nearly all 8.
    assert many.breakdown["mlp_down"] / one.breakdown["mlp_down"] == pytest.approx(4.0, rel=0.02)
    dense = time_step(make_model(model=dict(MIXTRAL, num_experts=0, experts_per_token=0), tp=2), [(1, 100)])
    assert one.breakdown["mlp_down"] == pytest.approx(2 * dense.breakdown["mlp_down"], rel=0.01)


def test_shared_experts_are_read_every_step_beside_the_routed_ones() -> None:
    """Llama-4-Scout-like layers: 16 routed experts, top-1, and one shared expert. A step's MoE is its
    routed top-1 experts plus one dense MLP over every token, which reads fewer weights at 12 decode
    tokens than two routed picks per token would (16 (1 - (15/16)^12) + 1 = 8.4 experts, not
    16 (1 - (14/16)^12) = 12.8)."""
    batch = [(1, 100)] * 12

    def mlp_down(**model: int) -> float:
        return time_step(make_model(model=dict(MIXTRAL, **model), tp=2), batch).breakdown["mlp_down"]

    shared = mlp_down(num_experts=16, experts_per_token=2, shared_experts=1)
    routed = mlp_down(num_experts=16, experts_per_token=1)
    dense = mlp_down(num_experts=0, experts_per_token=0)
    assert shared == pytest.approx(routed + dense, rel=1e-9)
    assert shared < 0.8 * mlp_down(num_experts=16, experts_per_token=2)


def test_expert_parallelism_uses_all_to_all() -> None:
    timing = time_step(make_model(model=MIXTRAL, tp=2, ep=2, options={"alltoall_latency_us": 10}), [(256, 0)])
    assert timing.breakdown["all_to_all"] > 2 * 32 * 10_000
    assert timing.breakdown["allreduce"] > 0  # the attention all-reduce stays


def test_options_override_extra_which_overrides_defaults() -> None:
    fused = {"kernels": "fused"}
    base = time_step(make_model(options=fused), [(4096, 0)]).duration_ns
    slower = time_step(make_model(extra={"mfu_prefill": 0.3}, options=fused), [(4096, 0)]).duration_ns
    back = time_step(make_model(extra={"mfu_prefill": 0.3}, options={"mfu": 0.65, **fused}), [(4096, 0)]).duration_ns
    assert slower > 1.8 * base and back == base


def test_bad_options_name_the_field() -> None:
    with pytest.raises(InvalidArgument, match=r"spec\.options\.mbu_decode=1\.5"):
        make_model(options={"mbu_decode": 1.5})
    with pytest.raises(InvalidArgument, match=r"spec\.options\.mfu_typo"):
        make_model(options={"mfu_typo": 0.5})
    with pytest.raises(InvalidArgument, match=r"spec\.options\.kernels"):
        make_model(options={"kernels": "magic"})


@pytest.mark.parametrize("key", ["mbu_decode", "mfu", "comm_eff", "gemm_eff"])
def test_an_efficiency_near_zero_is_refused(key: str) -> None:
    """Found by fuzzing: mbu_decode=7.5e-13 passed and stretched a decode step past the simulation's clock."""
    options = {"kernels": "fused", "profile": "bestserve"} if key != "gemm_eff" else {}
    with pytest.raises(InvalidArgument, match=rf"spec\.options\.{key}=7\.5e-13 must be in \[0\.001, 1\]"):
        make_model(options={**options, key: 7.5e-13})
    make_model(options={**options, key: 1e-3})


def test_unknown_device_is_rejected_naming_field_and_device() -> None:
    with pytest.raises(InvalidArgument, match=r"spec\.hardware\.peak_tflops=0\.0 .*'mystery-npu'"):
        open_model(make_spec(hardware=dict(device="mystery-npu", peak_tflops=0, mem_bandwidth_gbps=100)))
    with pytest.raises(InvalidArgument, match=r"spec\.hardware\.mem_bandwidth_gbps"):
        open_model(make_spec(hardware=dict(device="x", peak_tflops=10, mem_bandwidth_gbps=0)))


def test_shipped_profile_is_picked_by_device_name() -> None:
    spec = make_spec(hardware=dict(device="H100-SXM", peak_tflops=989, mem_bandwidth_gbps=3350, intra_node_gbps=450))
    spec.options.update({"profile": "auto"})
    assert open_model(spec).params.kernels == "fused"
    spec.options.update({"profile": "none"})
    assert open_model(spec).params.kernels == "fused"  # the default: the kernels a vLLM engine runs
    spec.options.update({"kernels": "eager"})
    assert open_model(spec).params.kernels == "eager"


def test_energy_is_tdp_times_devices_times_duration_when_asked() -> None:
    timing = time_step(make_model(tp=2, options={"tdp_w": 700}), [(1, 10)])
    assert timing.energy_j == pytest.approx(700 * 2 * timing.duration_ns / 1e9, rel=1e-6)


def test_no_energy_is_reported_from_the_presets_tdp() -> None:
    """The presets' tdp_w in extra is the hub's power model's: the roofline leaves energy_j unset."""
    timing = time_step(make_model(tp=2, extra={"tdp_w": 700}), [(1, 10)])
    assert not timing.HasField("energy_j") and timing.compute_ns + timing.memory_ns > 0


def test_one_prediction_takes_well_under_a_millisecond() -> None:
    model = make_model(tp=4)
    batches = [[(1, 500 + i + j) for j in range(64)] + [(512, i)] for i in range(200)]
    start = time.process_time()  # work done, which a busy machine does not stretch (its wall time, it does)
    for batch in batches:
        time_step(model, batch)
    per_call_s = (time.process_time() - start) / len(batches)
    assert per_call_s < 1e-3, f"{per_call_s * 1e6:.0f} µs per prediction"


def test_sessions_of_equal_models_share_their_timings_keyed_by_the_batch_sums() -> None:
    """A step's time is a function of the model and the batch's sums: sessions whose models are
    equal (another client, another run) share one cache, and batches summing alike one entry."""
    backend = RooflineBackend()
    first = Session("a", make_spec(tp=2), backend.open_session(make_spec(tp=2)))
    again = Session("b", make_spec(tp=2), backend.open_session(make_spec(tp=2)))
    other = Session("c", make_spec(tp=4), backend.open_session(make_spec(tp=4)))
    assert again.state is first.state and other.state is not first.state
    decodes = pb.StepBatch(new_tokens=[1, 1], context_tokens=[100, 300])
    timing = backend.predict(first, decodes)
    assert timing == time_step(first.state, [(1, 100), (1, 300)])
    assert backend.predict(again, pb.StepBatch(new_tokens=[1, 1], context_tokens=[200, 200])) == timing
    assert first.state.native.cached() == 1  # one entry for both batches
    assert backend.predict(other, decodes) != timing


@pytest.mark.parametrize("profile", ["bestserve", "auto"])
def test_memoized_collectives_follow_each_steps_tokens(profile: str) -> None:
    """The per-layer collective times are kept with a step's fixed operator times (keyed by tokens,
    sequences and prefill group): a session that timed other steps first times each step as a fresh
    one does, and a step of twice the tokens moves twice the all-reduce bytes (TP 2: more time)."""
    batches = [[(1, 500)] * 8, [(1, 700)] * 16, [(1, 501)] * 8, [(64, 0), (1, 900), (1, 30)], [(1, 900)] * 16]
    warm = make_model(tp=2, options={"profile": profile})
    for batch in batches:
        fresh = time_step(make_model(tp=2, options={"profile": profile}), batch)
        again = time_step(warm, batch)
        assert (again.duration_ns, again.communication_ns) == (fresh.duration_ns, fresh.communication_ns)
        assert again.breakdown["allreduce"] == fresh.breakdown["allreduce"]
    eight, sixteen = (time_step(warm, [(1, 500)] * n).communication_ns for n in (8, 16))
    assert 0 < eight < sixteen


@pytest.mark.parametrize("kwargs", [
    dict(tp=2, options={"profile": "bestserve"}),
    dict(tp=2, options={"profile": "auto"}),  # the fitted default: CUDA graphs, piecewise when mixed
    dict(tp=2, pp=2, options={"profile": "auto", "execution": "eager", "eager_seq_us": 3.0}),
    dict(pp=2, options={"profile": "bestserve", "tdp_w": 700.0}),
])
def test_a_warm_model_times_each_step_as_a_fresh_one_with_or_without_its_breakdown(kwargs: dict) -> None:
    """The memo keeps a step's whole fixed part (device times, collectives, host costs) by tokens,
    sequences and prefill group: a model that timed other steps first gives every step the message
    a fresh model gives, and leaving the breakdown out leaves every other field as it was."""
    batches = [[(1, 500)] * 8, [(1, 700)] * 16, [(1, 501)] * 8, [(64, 0), (1, 900), (1, 30)],
               [(64, 10), (1, 900), (1, 30)], [(1, 900)] * 16, [(1, 20)] * 3]
    warm = make_model(**kwargs)
    for i, batch in enumerate(batches):
        stats = batch_stats([n for n, _ in batch], [c for _, c in batch])
        if i == len(batches) - 1:
            stats = stats._replace(lora=lora_adapters([1, 1, 1], [16, 16, 8], [1, 1, 2]))
        fresh = estimate(make_model(**kwargs), stats)
        assert estimate(warm, stats) == fresh and fresh.breakdown
        slim = estimate(warm, stats, with_breakdown=False)
        fresh.ClearField("breakdown")
        assert slim == fresh
