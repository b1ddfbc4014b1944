"""The roofline's fitted default: kernel model, families, monotonicity, speculation, execution modes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosim.adapters.roofline import batch_stats, estimate, fitted, open_model
from cosim.adapters.roofline.fit.rows import Row, Rows, predict_ns
from cosim.adapters.roofline.kernels import ATTN, ELEM, GEMM, KERNEL_KEYS, MOE, SAMPLE, KernelParams, kernel_ns
from cosim.adapters.sdk import InvalidArgument
from cosim.v1 import types_pb2 as pb
from tests.unit.adapters.roofline.roofline_helpers import LLAMA2_70B, make_spec

LLAMA2_7B = dict(name="meta-llama/Llama-2-7b-hf", num_layers=32, hidden_size=4096, num_attention_heads=32,
                 num_kv_heads=32, intermediate_size=11008, vocab_size=32000, bytes_per_param=2,
                 bytes_per_kv_element=2, gated_mlp=True)
LLAMA31_8B = dict(LLAMA2_7B, name="meta-llama/Llama-3.1-8B", num_kv_heads=8, intermediate_size=14336,
                  vocab_size=128256)
MIXTRAL = dict(LLAMA31_8B, name="mixtral", vocab_size=32000, num_experts=8, experts_per_token=2)
# Preset figures (hub/config/presets/devices.yaml) with each device's link, as the hub fills HardwareSpec.
H100 = dict(device="H100-SXM", peak_tflops=989.4, mem_bandwidth_gbps=3350.0, intra_node_gbps=450.0,
            devices_per_node=8)
H100_LINK = {"intra_node_latency_us": 20.0, "intra_node_hop_latency_us": 0.47, "intra_node_bus_efficiency": 0.73}
A100 = dict(device="A100-80GB", peak_tflops=312.0, mem_bandwidth_gbps=2039.0, intra_node_gbps=300.0,
            devices_per_node=8)
RTX_PRO = dict(device="RTX-PRO-6000", peak_tflops=500.0, mem_bandwidth_gbps=1792.0, intra_node_gbps=64.0,
               devices_per_node=8)


def fitted_model(model: dict, hardware: dict, *, tp: int = 1, ep: int = 1, options: dict | None = None,
                 extra: dict | None = None):  # type: ignore[no-untyped-def]
    """A session under the default profile (make_spec pins bestserve unless told otherwise)."""
    return open_model(make_spec(model=model, hardware=hardware, tp=tp, ep=ep, extra=extra,
                                options={"profile": "auto", **(options or {})}))


def step_ms(model, batch: list[tuple[int, int]], drafts: list[int] | None = None) -> float:  # type: ignore[no-untyped-def]
    stats = batch_stats([n for n, _ in batch], [c for _, c in batch], drafts or ())
    return estimate(model, stats).duration_ns / 1e6


# The kernel model ----------------------------------------------------------------------------------

def test_gemm_kernel_by_hand() -> None:
    """M=64 rows of a 4096 x 4096 bf16 GEMM on a 1000 TFLOP/s, 1000 GB/s device."""
    k = KernelParams(gemm_eff=0.5, gemm_m_half=64.0, gemm_mem_eff=0.8, gemm_floor_us=4.0)
    work, traffic = 2 * 64 * 4096 * 4096, 2 * (64 * 4096 * 2 + 4096 * 4096)
    t, compute_bound = kernel_ns(GEMM, work, traffic, 64, k, 1e15, 1e12)
    # compute: 2.147e9 FLOP x (64 + 64) / (64 x 0.5 x 1e15) = 8.59 us; memory: 34.6 MB / 0.8 TB/s = 43.3 us
    assert t == pytest.approx(traffic / 0.8e12 * 1e9 + 4000.0, rel=1e-12)
    assert not compute_bound
    t, compute_bound = kernel_ns(GEMM, work * 64, traffic, 4096, k, 1e15, 1e12)
    assert t == pytest.approx(work * 64 * (4096 + 64) / (4096 * 0.5e15) * 1e9 + 4000.0, rel=1e-12)
    assert compute_bound


def test_attention_kernel_by_hand() -> None:
    """A decode-only call is bound by its KV read; a chunk's call pays the varlen efficiency and its span."""
    k = KernelParams(attn_eff=0.5, attn_mem_eff=0.8, attn_floor_us=10.0, attn_tile_us=0.05,
                     attn_varlen_share=0.5, attn_span_ns=20.0)
    t, _ = kernel_ns(ATTN, 1e6, 8e6, 100.0, k, 1e15, 1e12)
    assert t == pytest.approx(8e6 / 0.8e12 * 1e9 + 10_000.0, rel=1e-12)  # 10 us of KV read > 5 us of tiles
    t, _ = kernel_ns(ATTN, 1e6, 8e6, 100.0, k, 1e15, 1e12, span=16384)
    assert t == pytest.approx(16384 * 20.0 + 10_000.0, rel=1e-12)  # the span (327.7 us) beats 20 us of KV at 0.4


def test_moe_floor_is_a_constant_per_call() -> None:
    """A fused MoE call's own kernels take moe_floor_us whatever its tokens (work and traffic are 0)."""
    k = KernelParams(moe_floor_us=27.5)
    assert kernel_ns(MOE, 0.0, 0.0, 0.0, k, 1e15, 1e12) == (27_500.0, False)
    assert kernel_ns(MOE, 0.0, 0.0, 0.0, KernelParams(), 1e15, 1e12) == (0.0, False)  # no MoE table fitted


def test_fitted_moe_layer_pays_its_floor_once_per_layer() -> None:
    """Scout-like (16 experts, top-1, one shared expert) on two H100s: the floor adds 48 x 30 us to a
    decode step, once per MoE layer; a dense model's step is unchanged."""
    scout = dict(LLAMA31_8B, name="scout", num_layers=48, hidden_size=5120, num_attention_heads=40,
                 intermediate_size=8192, num_experts=16, experts_per_token=2, shared_experts=1, bytes_per_param=1)
    batch = [(1, 1000)] * 11

    def step_ns(model: dict, floor: float) -> int:
        session = fitted_model(model, H100, tp=2, extra=H100_LINK, options={"moe_floor_us": floor})
        return estimate(session, batch_stats([n for n, _ in batch], [c for _, c in batch])).duration_ns

    assert step_ns(scout, 30.0) - step_ns(scout, 0.0) == pytest.approx(48 * 30_000, abs=2)
    assert step_ns(LLAMA31_8B, 30.0) == step_ns(LLAMA31_8B, 0.0)


def test_fit_formula_is_the_runtime_formula() -> None:
    """fit.rows.predict_ns (numpy, fit time) times kernels exactly as kernels.kernel_ns (run time)."""
    rng = random.Random(7)
    k = KernelParams(**{key: rng.uniform(0.1, 0.9) if key.endswith(("_eff", "_share")) else rng.uniform(0.0, 30.0)
                        for key in KERNEL_KEYS})
    rows = []
    for i in range(200):
        kind = (GEMM, ELEM, ATTN, SAMPLE, MOE)[i % 5]
        span = rng.choice([0.0, rng.uniform(1, 1e4)]) if kind == ATTN else 0.0
        rows.append(Row("d", "H100-SXM", "m", "op", kind, rng.uniform(0, 1e12), rng.uniform(1e3, 1e9),
                        rng.uniform(1, 4096), 1.0, span, span > 0))
    predicted = predict_ns(Rows.of(rows), k)
    for row, p in zip(rows, predicted):
        t, _ = kernel_ns(row.kind, row.work, row.traffic, row.size, k, 989.4e12, 3350e9, row.span)
        assert p == pytest.approx(t, rel=1e-9)


# The shipped profile -------------------------------------------------------------------------------

def test_every_family_holds_every_parameter_its_sources_and_errors() -> None:
    for name, family in fitted.load().items():
        params = family["params"]
        if family.get("basis") == "bestserve":
            assert params == {}, name
            continue
        assert set(KERNEL_KEYS) <= set(params), name
        assert all(0 < params[k] <= 1 for k in KERNEL_KEYS if k.endswith(("_eff", "_share"))), name
        assert params["op_model"] == "fitted" and params["execution"] == "graphs"
        assert family["sources"]["kernel_rows"], name
        assert family["cv"]["in_sample"] or name in ("ada", "blackwell", "xe2", "generic"), name


@pytest.mark.parametrize(("device", "expected"), [
    ("H100-SXM", ("hopper", "measured")), ("h100", ("hopper", "measured")), ("H100-PCIe", ("hopper", "family")),
    ("A100-40GB", ("ampere", "family")), ("RTX-4090", ("ada-geforce", "measured")),
    ("Ascend-910B3", ("ascend", "bestserve")), ("MI300X", ("generic", "generic")), ("my-npu", ("generic", "generic"))])
def test_devices_map_to_their_family(device: str, expected: tuple[str, str]) -> None:
    assert fitted.family_of(device) == expected


def test_ascend_keeps_bestserve_and_other_devices_run_their_family() -> None:
    ascend = dict(device="Ascend-910B3", peak_tflops=313.0, mem_bandwidth_gbps=1759.2, intra_node_gbps=90.0)
    bare = open_model(make_spec(hardware=ascend, tp=4, options={"profile": "auto"}))
    assert bare.params == open_model(make_spec(hardware=ascend, tp=4, options={"profile": "bestserve"})).params
    pcie = dict(H100, device="H100-PCIe", peak_tflops=756.5, mem_bandwidth_gbps=2000.0, intra_node_gbps=64.0)
    assert fitted_model(LLAMA2_7B, pcie).params.kernel == fitted_model(LLAMA2_7B, H100).params.kernel
    with pytest.raises(InvalidArgument, match=r"spec\.options\.family='nope'"):
        fitted_model(LLAMA2_7B, H100, options={"family": "nope"})


def test_per_phase_efficiencies_are_refused_under_the_fitted_profile() -> None:
    with pytest.raises(InvalidArgument, match=r"spec\.options\.mbu_decode=0\.75 .*profile: bestserve"):
        fitted_model(LLAMA2_7B, H100, options={"mbu_decode": 0.75})
    fitted_model(LLAMA2_7B, H100, options={"profile": "bestserve", "mbu_decode": 0.75})


def preset_model(model: str, device: str, options: dict):  # type: ignore[no-untyped-def,type-arg]
    """A session as `cosim predict step` opens it, from the hub's presets."""
    from cosim.hub.config.presets import get_model, hardware_spec

    spec = pb.SessionSpec(client="t", model=get_model(model).to_model_spec(),
                          hardware=hardware_spec(device, 1, dtype="bf16"), parallelism=pb.Parallelism(tensor=1))
    spec.options.update(options)
    return open_model(spec)


def test_bestserve_profile_keeps_the_earlier_default() -> None:
    """Issue 34: the earlier bare roofline timed Llama-3.1-8B on an H100 at 15.29 ms for 1:1024 and
    9.63 ms for 2:1024 (BestServe's phases: two tokens ran at the prefill efficiencies)."""
    earlier = preset_model("meta-llama/Llama-3.1-8B", "H100-SXM", {"profile": "bestserve"})
    assert step_ms(earlier, [(1, 1024)]) == pytest.approx(15.29, abs=0.005)
    assert step_ms(earlier, [(2, 1024)]) == pytest.approx(9.63, abs=0.005)


def test_bare_decode_sits_between_the_weight_read_and_the_measured_itl() -> None:
    """Llama-2-7B, one decode on one H100-SXM: above 13.5 GB of weights at 3.35 TB/s (4.0 ms), below
    the 10.6 ms mean ITL vLLM measured under load (shared/data/blis-h100, experiment 20260217)."""
    t = step_ms(fitted_model(LLAMA2_7B, H100, extra=H100_LINK), [(1, 700)])
    assert 13.48e9 / 3350e9 * 1e3 < t < 10.6


# Monotone, speculation-aware, graph-aware --------------------------------------------------------

SESSIONS = {
    "llama3.1-8b H100": lambda: fitted_model(LLAMA31_8B, H100, extra=H100_LINK),
    "llama2-70b A100 TP4": lambda: fitted_model(LLAMA2_70B, A100, tp=4, extra=H100_LINK),
    "llama3.1-8b RTX PRO 6000": lambda: fitted_model(LLAMA31_8B, RTX_PRO),
    "mixtral H100 TP2 EP2": lambda: fitted_model(MIXTRAL, H100, tp=2, ep=2, extra=H100_LINK),
}
MODELS = {name: make() for name, make in SESSIONS.items()}
sequence = st.tuples(st.integers(1, 600), st.integers(0, 9000), st.integers(0, 4))  # (new, context, drafts)


def _arrays(batch: list[tuple[int, int, int]]) -> tuple[list[int], list[int], list[int]]:
    new, context, drafts = [], [], []
    for n, c, d in batch:
        d = min(d, n - 1) if c > 0 else 0  # drafts ride on a decode: one sampled token plus d
        if d:
            n = d + 1
        new.append(n)
        context.append(c)
        drafts.append(d)
    return new, context, drafts


def _duration(model, new: list[int], context: list[int], drafts: list[int]) -> int:  # type: ignore[no-untyped-def]
    return estimate(model, batch_stats(new, context, drafts if any(drafts) else ())).duration_ns


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(MODELS)), st.lists(sequence, min_size=1, max_size=12), sequence,
       st.integers(0, 11), st.sampled_from(["sequence", "token", "draft"]))
def test_adding_work_never_shortens_a_step(name: str, batch: list[tuple[int, int, int]],
                                           extra_seq: tuple[int, int, int], where: int, how: str) -> None:
    """Adding a sequence, a token (a decode becomes a 2-token chunk) or a draft never lowers duration."""
    model = MODELS[name]
    new, context, drafts = _arrays(batch)
    before = _duration(model, new, context, drafts)
    i = where % len(new)
    if how == "sequence":
        n2, c2, d2 = _arrays([extra_seq])
        new, context, drafts = new + n2, context + c2, drafts + d2
    elif how == "token":
        new[i], drafts[i] = new[i] + 1, 0  # one more plain token: the sequence is (or stays) a chunk
    elif context[i] > 0 and new[i] - drafts[i] == 1:
        new[i], drafts[i] = new[i] + 1, drafts[i] + 1
    else:
        new[i] += 1
    assert _duration(model, new, context, drafts) >= before


def test_two_new_tokens_are_not_faster_than_one() -> None:
    """Issue 34's example: Llama-3.1-8B on an H100, 1:1024 took 15.29 ms and 2:1024 9.63 ms."""
    model = MODELS["llama3.1-8b H100"]
    assert step_ms(model, [(2, 1024)]) >= step_ms(model, [(1, 1024)])


def test_verification_is_timed_as_a_decode_over_its_tokens() -> None:
    """Eight sequences verifying 4 drafts at context 1000 cost a little more than eight decodes (4 more
    tokens each through the GEMMs), far from a prefill's price, and no less than the decodes."""
    model = MODELS["llama3.1-8b H100"]
    decode = step_ms(model, [(1, 1000)] * 8)
    verify = step_ms(model, [(5, 1000)] * 8, [4] * 8)
    assert decode <= verify < 1.1 * decode
    stats = batch_stats([5] * 8, [1000] * 8, [4] * 8)
    assert stats.prefill.seqs == 0 and stats.decode.new == 40


def test_decode_replays_a_graph_and_eager_execution_pays_dispatch() -> None:
    """Under graphs a decode has no host time; execution: eager charges the fitted per-kernel launches."""
    graphs = estimate(MODELS["llama3.1-8b H100"], batch_stats([1] * 4, [800] * 4))
    eager = estimate(fitted_model(LLAMA31_8B, H100, extra=H100_LINK, options={"execution": "eager"}),
                     batch_stats([1] * 4, [800] * 4))
    assert graphs.dispatch_ns == 0 and eager.dispatch_ns > 1_000_000
    assert eager.duration_ns > graphs.duration_ns


def test_eager_all_reduce_bytes_beyond_the_knee_move_at_the_large_message_efficiency() -> None:
    """Llama-2-70B TP8 on H100, 4096 prefill tokens: 64 MiB all-reduces, 32 MiB of them beyond the knee."""
    base = {"execution": "eager", "eager_comm_eff": 0.5, "eager_comm_knee_mib": 0.0}  # no knee
    model = fitted_model(LLAMA2_70B, H100, tp=8, extra=H100_LINK, options=base)
    knee = fitted_model(LLAMA2_70B, H100, tp=8, extra=H100_LINK,
                        options={**base, "eager_comm_knee_mib": 32.0, "eager_comm_eff_large": 0.1})
    stats = batch_stats([4096], [0])
    size = 2 * 4096 * 8192  # bytes per rank: 4096 tokens x hidden 8192 x 2 bytes = 64 MiB
    # The 32 MiB beyond the knee: ring factor 2 x 7/8, at 0.1 instead of 0.5 of 450 GB/s, no added latency.
    extra_ns = 1.75 * (size / 2) * (1 / (0.1 * 450e9) - 1 / (0.5 * 450e9)) * 1e9
    comm, comm_knee = estimate(model, stats).communication_ns, estimate(knee, stats).communication_ns
    assert comm_knee - comm == pytest.approx(2 * 80 * extra_ns, rel=1e-6)  # two all-reduces per layer
    small = batch_stats([2048], [0])  # 32 MiB: not beyond the knee
    assert estimate(knee, small).communication_ns == estimate(model, small).communication_ns
    graphs = {k: v for k, v in base.items() if k != "execution"}  # a bare roofline: graphs, no knee
    assert (estimate(fitted_model(LLAMA2_70B, H100, tp=8, extra=H100_LINK, options=graphs), stats).duration_ns
            == estimate(fitted_model(LLAMA2_70B, H100, tp=8, extra=H100_LINK, options={
                **graphs, "eager_comm_knee_mib": 32.0, "eager_comm_eff_large": 0.1}), stats).duration_ns)


def test_eager_host_time_per_sequence_adds_to_the_step_and_graphs_ignore_it() -> None:
    """64 decodes pay 64 x 250 us of host time under eager; a graph replay pays none."""
    stats = batch_stats([1] * 64, [575] * 64)
    for execution, added_ns in (("eager", 64 * 250_000), ("graphs", 0)):
        without = fitted_model(LLAMA31_8B, H100, options={"execution": execution, "eager_seq_us": 0.0})
        with_seq = fitted_model(LLAMA31_8B, H100, options={"execution": execution, "eager_seq_us": 250.0})
        assert estimate(with_seq, stats).duration_ns - estimate(without, stats).duration_ns == added_ns


def test_eager_overlap_blends_algorithm_1_with_a_host_and_device_that_take_turns() -> None:
    """Overlap 0: the step is every module's dispatch plus its device time; 1: Algorithm 1; 0.5: the mean."""
    from cosim.adapters.roofline.estimator import device_times, run_stage

    stats = batch_stats([1] * 8, [1000] * 8)
    opts = {"execution": "eager", "eager_seq_us": 0.0, "step_overhead_us": 0.0}
    times = {o: estimate(fitted_model(LLAMA31_8B, H100, options={**opts, "eager_overlap": o}), stats).duration_ns
             for o in (0.0, 0.5, 1.0)}
    model = fitted_model(LLAMA31_8B, H100, options={**opts, "eager_overlap": 0.0})
    p, busy = model.params, device_times(model, stats).busy
    d_norm, d_attn, d_mlp, d_head = (p.decode.dispatch_norm_us * 1e3, p.decode.dispatch_attention_us * 1e3,
                                     p.decode.dispatch_mlp_us * 1e3, p.decode.dispatch_head_us * 1e3)
    layer = [(d_norm, busy[1]), (d_attn, busy[2]), (d_norm, busy[3]), (d_mlp, busy[4])]
    serial = busy[0] + 32 * sum(d + c for d, c in layer) + d_head + busy[5]
    overlapped = run_stage([(0.0, busy[0])], layer, 32, [(d_head, busy[5])])
    assert times[0.0] == round(serial) and times[1.0] == round(overlapped)
    assert times[0.5] == pytest.approx((serial + overlapped) / 2, abs=1)
    assert times[0.0] > times[0.5] > times[1.0]
    with pytest.raises(InvalidArgument, match=r"spec\.options\.eager_overlap"):
        fitted_model(LLAMA31_8B, H100, options={"eager_overlap": 1.5})


def test_kernels_eager_runs_eager_and_a_bad_execution_is_refused() -> None:
    assert fitted_model(LLAMA31_8B, H100, options={"kernels": "eager"}).params.execution == "eager"
    with pytest.raises(InvalidArgument, match=r"spec\.options\.execution"):
        fitted_model(LLAMA31_8B, H100, options={"execution": "turbo"})


def test_speculative_batches_reach_the_backend_and_key_its_cache() -> None:
    from cosim.adapters.roofline import RooflineBackend
    from cosim.adapters.sdk import Session

    backend = RooflineBackend()
    spec = make_spec(model=LLAMA31_8B, hardware=H100, options={"profile": "auto"})
    session = Session("s", spec, backend.open_session(spec))
    plain = backend.predict(session, pb.StepBatch(new_tokens=[5] * 4, context_tokens=[600] * 4))
    spec_batch = backend.predict(session, pb.StepBatch(new_tokens=[5] * 4, context_tokens=[600] * 4,
                                                       draft_tokens=[4] * 4))
    assert spec_batch is not plain and spec_batch.duration_ns <= plain.duration_ns
    with pytest.raises(InvalidArgument, match=r"batch\.draft_tokens"):
        backend.predict(session, pb.StepBatch(new_tokens=[5] * 4, context_tokens=[600] * 4, draft_tokens=[4]))
