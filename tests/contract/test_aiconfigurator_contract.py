"""The aiconfigurator backend: step times from the library's tables, its errors, in-process and over gRPC.

Skipped, saying so, where ``aiconfigurator-core`` (the ``cosim[aiconfigurator]`` extra, part of ``dev``)
is not installed; test_builtin_conformance.py runs the SDK suite on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed: pip install "
                    "'cosim[aiconfigurator]' (the dev extra includes it)")

from google.protobuf.struct_pb2 import Struct

from cosim.adapters.aiconfigurator import AiconfiguratorBackend
from cosim.adapters.sdk import BackendServer, InvalidArgument, Session
from cosim.adapters.sdk.testing import run_conformance
from cosim.hub.config import presets
from cosim.hub.errors import ScenarioError
from cosim.hub.studies.replay import replay
from cosim.hub.studies.replay.scenario import ReplayScenario, build_config
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb
from tests.paths import SHARED_DATA

# One backend for the module: it reads the library's list of systems once (seconds), as a server would.
BACKEND = AiconfiguratorBackend()


def make_spec(model: str = "meta-llama/Llama-3.1-8B", device: str = "H100-SXM", *, tp: int = 1, ep: int = 1,
              **options: str) -> pb.SessionSpec:
    """A session of a cosim model preset on ``tp`` devices of a cosim device preset."""
    struct = Struct()
    struct.update(options)
    return pb.SessionSpec(client="c", model=presets.get_model(model).to_model_spec(),
                          hardware=presets.hardware_spec(device, tp), parallelism=pb.Parallelism(tensor=tp, expert=ep),
                          options=struct)


def open_session(spec: pb.SessionSpec) -> Session[pb.SessionSpec]:
    return Session("s", spec, BACKEND.open_session(spec))


def step(session: Session[pb.SessionSpec], new: list[int], context: list[int],
         dp_rank_tokens: tuple[int, ...] = ()) -> pb.StepTiming:
    return BACKEND.predict(session, pb.StepBatch(new_tokens=new, context_tokens=context,
                                                 dp_rank_tokens=dp_rank_tokens))


@pytest.fixture(scope="module")
def llama_h100() -> Session[pb.SessionSpec]:
    return open_session(make_spec())


def test_llama_8b_decode_on_h100_is_in_a_sane_range(llama_h100: Session[pb.SessionSpec]) -> None:
    """One decode reads the 16 GB of weights: >= 4.8 ms at H100's 3.35 TB/s, and vLLM measures about 6-7 ms."""
    timing = step(llama_h100, [1], [1000])
    assert 4_800_000 < timing.duration_ns < 9_000_000
    assert timing.compute_ns == timing.duration_ns and timing.communication_ns == 0
    assert {"qkv_gemm", "attention", "gate_ffn1_gemm", "logits_gemm"} <= set(timing.breakdown)


def test_step_time_grows_with_batch_and_context(llama_h100: Session[pb.SessionSpec]) -> None:
    times = {(b, c): step(llama_h100, [1] * b, [c] * b).duration_ns for b in (1, 32, 128) for c in (1000, 4000)}
    assert times[1, 1000] < times[32, 1000] < times[128, 1000]
    for batch in (1, 32, 128):
        assert times[batch, 1000] < times[batch, 4000]
    assert step(llama_h100, [512], [0]).duration_ns < step(llama_h100, [2048], [0]).duration_ns
    # A chunk with cached context attends to more keys than the same chunk without.
    assert step(llama_h100, [512], [0]).duration_ns < step(llama_h100, [512], [3072]).duration_ns


def test_a_mixed_step_adds_its_decodes_attention(llama_h100: Session[pb.SessionSpec]) -> None:
    chunk = step(llama_h100, [512], [0])
    mixed = step(llama_h100, [512, 1, 1], [0, 3000, 5000])
    assert mixed.duration_ns > chunk.duration_ns
    assert mixed.breakdown["attention"] > chunk.breakdown["attention"]


def test_dp_lock_step_pads_the_token_wise_operators(llama_h100: Session[pb.SessionSpec]) -> None:
    alone = step(llama_h100, [1] * 8, [1000] * 8)
    padded = step(llama_h100, [1] * 8, [1000] * 8, dp_rank_tokens=(8, 256))
    assert padded.breakdown["gate_ffn1_gemm"] > alone.breakdown["gate_ffn1_gemm"]
    assert padded.breakdown["attention"] == pytest.approx(alone.breakdown["attention"])


def test_a_tp2_step_has_communication_from_the_all_reduce_tables() -> None:
    timing = step(open_session(make_spec(tp=2)), [1] * 8, [1000] * 8)
    assert 0 < timing.communication_ns < timing.duration_ns
    assert timing.breakdown["ar_1"] > 0 and timing.compute_ns + timing.communication_ns == timing.duration_ns


def test_an_expert_parallel_moe_step_has_dispatch_communication() -> None:
    timing = step(open_session(make_spec("Qwen/Qwen3-30B-A3B", tp=2, ep=2)), [1] * 8, [1000] * 8)
    assert timing.breakdown["moe"] > 0 and timing.breakdown["moe_pre_dispatch"] > 0
    assert timing.communication_ns > 0


def test_a_shared_expert_is_timed_as_a_dense_mlp_of_its_size() -> None:
    """Llama 4's shared expert (ModelSpec.shared_experts), which the library's MoE model has no span for,
    takes the library's own shared-expert operators: at every shape they cost what the gated MLP of a dense
    model of the same hidden and intermediate size costs, and the step grows by exactly them."""
    shape = dict(num_layers=48, hidden_size=5120, num_attention_heads=40, num_kv_heads=8, head_dim=128,
                 intermediate_size=8192, vocab_size=202048, gated_mlp=True, bytes_per_param=1.0,
                 bytes_per_kv_element=1.0)

    def session_of(name: str, **moe: int) -> Session[pb.SessionSpec]:
        return open_session(pb.SessionSpec(client="c", model=pb.ModelSpec(name=name, **shape, **moe),
                                           hardware=presets.hardware_spec("H100-SXM", 2),
                                           parallelism=pb.Parallelism(tensor=2)))

    shared = session_of("moe-with-shared", num_experts=16, experts_per_token=2, shared_experts=1)
    routed = session_of("moe-routed-only", num_experts=16, experts_per_token=1)
    dense = session_of("dense")
    assert "+ 1 shared" in shared.state.engines[1].label
    for new, context in (([1] * 8, [1024] * 8), ([512], [0]), ([256, 1, 1], [0, 700, 900])):
        with_shared, without = step(shared, new, context), step(routed, new, context)
        mlp = step(dense, new, context).breakdown
        span = {op: ns for op, ns in with_shared.breakdown.items() if op.startswith("shared_")}
        assert span == pytest.approx({"shared_gate_up_gemm": mlp["gate_ffn1_gemm"], "shared_act_gate": mlp["act_gate"],
                                      "shared_ffn2_gemm": mlp["ffn2_gemm"]}, rel=1e-9)
        assert with_shared.duration_ns - without.duration_ns == pytest.approx(sum(span.values()), abs=2)


@pytest.mark.parametrize(("spec", "field", "text"), [
    (lambda: make_spec(device="MI300X"), "spec.hardware.device", "has no aiconfigurator system"),
    (lambda: make_spec(system="h100_pcie"), "spec.options.system", "no measured data for system 'h100_pcie'"),
    (lambda: make_spec("deepseek-ai/DeepSeek-V3", "H200"), "spec.model", "family DEEPSEEK"),
    (lambda: make_spec("deepseek-ai/DeepSeek-R1", "H200"), "spec.model", "family DEEPSEEK"),
    (lambda: make_spec(engine_version="0.19.0"), "spec.options.engine_version", "queryable versions"),
    (lambda: make_spec(engine="tensorrt"), "spec.options.engine", "must be one of"),
    (lambda: make_spec("Qwen/Qwen3-30B-A3B", tp=1, ep=4), "spec.parallelism.expert", "must divide"),
])
def test_what_has_no_data_is_a_named_error(spec: object, field: str, text: str) -> None:
    with pytest.raises(InvalidArgument, match=text) as err:
        session = open_session(spec())  # type: ignore[operator]
        step(session, [1], [100])  # an expert degree beyond TP is checked once the batch's DP ranks are known
    assert err.value.field == field


def test_a_preset_whose_shape_was_changed_is_not_timed_as_the_library_model() -> None:
    spec = make_spec()
    spec.model.num_layers = 16
    with pytest.raises(InvalidArgument, match=r"num_layers \(library 32, spec 16\)"):
        BACKEND.open_session(spec)


def test_the_sdk_conformance_suite_passes_on_rtx_pro_6000() -> None:
    assert "predict_steps" in run_conformance(AiconfiguratorBackend(), make_spec(device="RTX-PRO-6000"))


def test_an_unknown_device_is_invalid_argument_over_grpc() -> None:
    with (BackendServer(BACKEND) as server, grpc.insecure_channel(server.address) as channel,
          pytest.raises(grpc.RpcError) as err):
        rt_grpc.RuntimeBackendServiceStub(channel).OpenSession(
            rt_pb.OpenSessionRequest(spec=make_spec(device="MI300X")), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.hardware.device" in err.value.details()


REPLAY_DATA = SHARED_DATA / "llmservingsim"
RTX_PRO_RUN = "rtxpro6000_llama-3.1-8b_tp1"


@pytest.mark.skipif(not (REPLAY_DATA / "groundtruth").is_dir(),
                    reason=f"{REPLAY_DATA} is absent (the LLMServingSim data set lives only in ../shared)")
def test_replay_of_the_measured_rtx_pro_6000_run_on_aiconfigurator(tmp_path: Path) -> None:
    """docs/aiconfigurator.md: TPOT mean -10%, throughput +11% against vLLM 0.19; kept within 15%."""
    result = replay(REPLAY_DATA / "scenarios" / f"{RTX_PRO_RUN}.json", backend="aiconfigurator",
                    measured=REPLAY_DATA / "groundtruth" / RTX_PRO_RUN / "requests.jsonl", output_dir=tmp_path,
                    plots=False)
    assert json.loads((tmp_path / "replay_config.json").read_text())["backends"] == {
        "aiconfigurator": {"kind": "aiconfigurator", "options": {"engine": "vllm"}}}
    assert result.comparison is not None
    assert abs(result.comparison["tpot_s"]["mean"]["error_pct"]) < 15
    assert abs(result.comparison["output_tokens_per_s"]["error_pct"]) < 15


def test_a_replay_names_the_backends_it_knows(tmp_path: Path) -> None:
    scenario = ReplayScenario(
        scenario_id="s", path=tmp_path / "s.json", model="meta-llama/Llama-3.1-8B", hardware="RTXPRO6000", tp=1,
        dp=1, ep=1, max_num_seqs=8, max_num_batched_tokens=512, block_size=16, num_gpu_blocks=None,
        enable_prefix_caching=False, async_scheduling=True, enforce_eager=False, trace=tmp_path / "t.jsonl",
        profile_bundle=tmp_path)
    with pytest.raises(ScenarioError, match=r"one of \['profile', 'aiconfigurator'\]"):
        build_config(scenario, backend="roofline")


def test_the_library_s_yaml_files_read_the_same_under_libyaml() -> None:
    """libyaml_reads hands the library LibYAML's safe loader: every YAML file the library ships parses to
    the same objects, and the list of systems it builds is the same."""
    import yaml
    from aiconfigurator_core.sdk import perf_database

    from cosim.adapters.aiconfigurator.libyaml import libyaml_reads

    files = [path for root in perf_database.get_systems_paths() for path in sorted(Path(root).rglob("*.yaml"))]
    assert len(files) > 100
    for path in files:
        text = path.read_text(encoding="utf-8")
        with libyaml_reads():
            fast = perf_database.yaml.safe_load(text)
        assert fast == yaml.safe_load(text), path
    assert perf_database.yaml is yaml  # given back
    with libyaml_reads():
        with libyaml_reads():
            pass
        assert perf_database.yaml is not yaml  # an inner block's end leaves the outer one's swap
    assert perf_database.yaml is yaml
    perf_database._derive_fleet_next.cache_clear()
    pure = perf_database.get_supported_databases()
    perf_database._derive_fleet_next.cache_clear()
    with libyaml_reads():
        assert perf_database.get_supported_databases() == pure


def test_a_system_s_versions_are_the_library_s_list_narrowed_to_it() -> None:
    """supported_versions(system, engine) is get_supported_databases()[system][engine], [] where the
    library lists none: on every system file it ships (estimate-only ones too) and every engine."""
    from aiconfigurator_core.sdk import common, perf_database

    from cosim.adapters.aiconfigurator.backend import supported_versions

    everything = perf_database.get_supported_databases()
    systems = {path.stem for root in perf_database.get_systems_paths() for path in Path(root).glob("*.yaml")}
    assert set(everything) < systems
    for system in sorted(systems | {"no_such_system"}):
        for engine in [*(backend.value for backend in common.BackendName), "no_such_engine"]:
            assert supported_versions(system, engine) == everything.get(system, {}).get(engine, []), (system, engine)


def test_a_spec_compiled_in_an_earlier_session_times_steps_the_same(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The first session writes its compiled spec, named by what it is made of; a later one reads it back
    and times every step as a session that compiles its own; another model, parallelism or library
    setting is another file, and tables outside the library's own folder write none."""
    from aiconfigurator_core.sdk import perf_database

    from cosim.adapters.aiconfigurator import engine

    monkeypatch.setattr(engine, "SCRATCH", str(tmp_path))
    specs = tmp_path / "specs"
    batches = [([1] * 8, [700 + 9 * i for i in range(8)]), ([512, 1, 1], [0, 300, 900]), ([96], [4096])]
    first = open_session(make_spec())
    assert len(list(specs.iterdir())) == 1
    again = open_session(make_spec())
    monkeypatch.setattr(engine, "_spec_key", lambda *args, **kwargs: None)
    own = open_session(make_spec())
    monkeypatch.undo()
    for new, context in batches:
        assert step(first, new, context) == step(again, new, context) == step(own, new, context)
    monkeypatch.setattr(engine, "SCRATCH", str(tmp_path))
    open_session(make_spec(tp=2))
    monkeypatch.setenv("AIC_COSIM_TEST_SETTING", "1")
    open_session(make_spec())
    assert len(list(specs.iterdir())) == 3
    monkeypatch.setattr(perf_database, "get_systems_paths", lambda: [*perf_database._SYSTEMS_PATHS, str(tmp_path)])
    open_session(make_spec())
    assert len(list(specs.iterdir())) == 3


def test_a_step_without_its_breakdown_has_the_same_times(llama_h100: Session[pb.SessionSpec]) -> None:
    """The hub's calls omit the breakdown: the same sums, added in the same order, and the timing is cached
    apart, so a later call asking for the breakdown still gets it."""
    from cosim.adapters.sdk import PlainBatch

    batches = [([1] * 8, [700 + 9 * i for i in range(8)]), ([512, 1, 1], [0, 300, 900]), ([96], [4096])]
    for new, context in batches:
        whole = step(llama_h100, new, context)
        llama_h100.omit_breakdown = True
        try:
            slim = BACKEND.predict(llama_h100, PlainBatch(tuple(new), tuple(context)))
        finally:
            llama_h100.omit_breakdown = False
        assert (slim.duration_ns, slim.compute_ns, slim.communication_ns) == (
            whole.duration_ns, whole.compute_ns, whole.communication_ns)
        assert not slim.breakdown and sum(whole.breakdown.values()) == pytest.approx(whole.duration_ns, abs=1)
        assert step(llama_h100, new, context).breakdown == whole.breakdown
