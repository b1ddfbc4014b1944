"""The genz backend against GenZ's own API calls on the same model and system."""

from __future__ import annotations

import warnings

import pytest
from google.protobuf.struct_pb2 import Struct

pytest.importorskip("GenZ")

from GenZ import chunked_moddeling, decode_moddeling, prefill_moddeling

from cosim.adapters.genz import GenzBackend, model_config, parse_options, system
from cosim.adapters.genz.backend import GenzState
from cosim.adapters.sdk import InvalidArgument, Session
from cosim.adapters.sdk.testing import sample_session_spec
from cosim.v1 import types_pb2 as pb


def open_session(spec: pb.SessionSpec | None = None) -> tuple[GenzBackend, Session[pb.SessionSpec]]:
    backend, spec = GenzBackend(), spec or sample_session_spec()
    return backend, Session(id="s", spec=spec, state=backend.open_session(spec))


def direct_system(spec: pb.SessionSpec):  # type: ignore[no-untyped-def]
    return system(spec, parse_options({}), "bf16")


def step_ns(backend: GenzBackend, session: Session[pb.SessionSpec], new: list[int], ctx: list[int]) -> int:
    return backend.predict(session, pb.StepBatch(new_tokens=new, context_tokens=ctx)).duration_ns


def test_prefill_equals_genz_prefill_moddeling() -> None:
    backend, session = open_session()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        direct = prefill_moddeling(model=model_config(session.spec.model), batch_size=1, input_tokens=512,
                                   system_name=direct_system(session.spec))
    assert step_ns(backend, session, [512], [0]) == pytest.approx(direct["Latency"] * 1e6, abs=1)


def test_decode_batch_equals_genz_decode_moddeling() -> None:
    """Four decodes at the same length are GenZ's decode of batch 4 (beam 1)."""
    backend, session = open_session()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        direct = decode_moddeling(model=model_config(session.spec.model), batch_size=4, input_tokens=1000, Bb=1,
                                  system_name=direct_system(session.spec))
    assert step_ns(backend, session, [1] * 4, [1000] * 4) == pytest.approx(direct["Latency"] * 1e6, rel=1e-3)


def test_mixed_step_equals_genz_chunked_moddeling() -> None:
    backend, session = open_session()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        direct = chunked_moddeling(model=model_config(session.spec.model), prefill_kv_sizes=[(256, 256)],
                                   decode_kv_sizes=[64, 900], system_name=direct_system(session.spec))
    assert step_ns(backend, session, [256, 1, 1], [256, 64, 900]) == pytest.approx(direct["Latency"] * 1e6, abs=1)


def test_tensor_parallel_adds_communication_and_shortens_the_step() -> None:
    spec = sample_session_spec()
    spec.hardware.count, spec.parallelism.tensor = 2, 2
    backend, tp2 = open_session(spec)
    _, tp1 = open_session()
    timing = backend.predict(tp2, pb.StepBatch(new_tokens=[1024], context_tokens=[0]))
    assert timing.communication_ns > 0
    assert timing.duration_ns < step_ns(backend, tp1, [1024], [0])


def test_steps_are_cached_by_signature() -> None:
    backend, session = open_session()
    for _ in range(3):
        step_ns(backend, session, [1, 1], [10, 20])
    state: GenzState = session.state
    assert state.num_evaluations == 1


def test_bucket_tokens_rounds_contexts_up() -> None:
    spec = sample_session_spec()
    spec.options.update({"bucket_tokens": 64})
    backend, session = open_session(spec)
    assert step_ns(backend, session, [1], [100]) == step_ns(backend, session, [1], [128])
    assert session.state.num_evaluations == 1


@pytest.mark.parametrize("options, field", [
    ({"compute_efficiency": 1.5}, "spec.options.compute_efficiency"),
    ({"bits": "fp7"}, "spec.options.bits"),
    ({"bucket_tokens": -1}, "spec.options.bucket_tokens"),
    ({"speed": 2}, "spec.options.speed"),
])
def test_bad_options_name_the_field(options: dict[str, object], field: str) -> None:
    spec = sample_session_spec()
    spec.options.CopyFrom(Struct())
    spec.options.update(options)
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        GenzBackend().open_session(spec)


def test_unknown_device_figures_are_rejected() -> None:
    spec = sample_session_spec()
    spec.hardware.peak_tflops = 0
    with pytest.raises(InvalidArgument, match=r"spec\.hardware\.peak_tflops"):
        GenzBackend().open_session(spec)
