"""A session's declared step error: the contract field, the roofline's band, the hub's scaling of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from cosim.adapters.roofline import RooflineBackend
from cosim.adapters.sdk import BackendServer, Session
from cosim.adapters.sdk.testing import LinearBackend, sample_session_spec
from cosim.hub.backends import RuntimeClient, free_port
from cosim.hub.backends.inprocess import in_process_runtime_client
from cosim.hub.errors import BackendError
from cosim.hub.timing.cache import RuntimeSessionProxy, SharedTimings
from cosim.hub.timing.step_error import edge_scale
from cosim.v1 import types_pb2 as pb
from tests.unit.adapters.roofline.roofline_helpers import make_spec
from tests.unit.adapters.roofline.test_roofline_fitted import A100, H100, LLAMA31_8B


def test_the_step_error_round_trips_and_an_older_reply_has_none() -> None:
    reply = pb.OpenSessionResponse(session_id="s", step_error=pb.StepError(low=-0.12, high=0.2, basis="cv"))
    parsed = pb.OpenSessionResponse.FromString(reply.SerializeToString())
    assert parsed.HasField("step_error") and parsed.step_error == reply.step_error
    older = pb.OpenSessionResponse.FromString(pb.OpenSessionResponse(session_id="s").SerializeToString())
    assert not older.HasField("step_error")  # a backend built before the field declares none


def _declared(device: dict[str, Any], **options: Any) -> pb.StepError | None:
    spec = make_spec(model=LLAMA31_8B, hardware=device, options={"profile": "auto", **options})
    return RooflineBackend().step_error(Session(id="s", spec=spec))


def test_a_device_its_family_measured_declares_the_familys_pooled_leave_one_model_out_mape() -> None:
    # fitted.yaml, ampere lomo: splitwise/A100-80GB 126 steps 12.6%, vidur/A100-80GB 203 steps 4.0%.
    pooled = round((126 * 12.6 + 203 * 4.0) / 329, 1)
    assert pooled == 7.3
    band = _declared(A100)
    assert band is not None and (band.low, band.high) == (-0.073, 0.073)
    assert "ampere family, leave-one-model-out step MAPE 7.3% (splitwise, vidur; 329 steps)" in band.basis


def test_a_device_its_family_did_not_measure_declares_the_leave_one_gpu_out_mape() -> None:
    # fitted.yaml, hopper logo: splitwise/H100-SXM 126 steps 12.8%, vidur/H100-SXM 147 steps 8.5%.
    assert round((126 * 12.8 + 147 * 8.5) / 273, 1) == 10.5
    pcie = dict(H100, device="H100-PCIe", mem_bandwidth_gbps=2000.0)
    band = _declared(pcie)
    assert band is not None and (band.low, band.high) == (-0.105, 0.105)
    assert "hopper family, leave-one-GPU-out step MAPE 10.5%" in band.basis
    measured = _declared(H100)  # hopper lomo: (126 x 11.8 + 147 x 4.1) / 273 = 7.65
    assert measured is not None and measured.high == 0.077


def test_a_family_without_step_measurements_takes_the_generic_leave_one_gpu_out_mape() -> None:
    # generic logo over 687 steps: 17 x 33.6 + 68 x 6.5 + 126 x 11.4 + 126 x 12.8 + 203 x 8.8 + 147 x 8.5
    pooled = (17 * 33.6 + 68 * 6.5 + 126 * 11.4 + 126 * 12.8 + 203 * 8.8 + 147 * 8.5) / 687
    b200 = dict(H100, device="B200", peak_tflops=2250.0, mem_bandwidth_gbps=8000.0)
    band = _declared(b200)
    assert band is not None and round(pooled, 1) == 10.3 and band.high == 0.103
    assert "blackwell family (no step measurements" in band.basis


def test_other_profiles_and_parameters_set_by_option_declare_none() -> None:
    assert _declared(A100, profile="bestserve") is None
    assert _declared(A100, profile="calibrated") is None
    assert _declared(A100, gemm_eff=0.9) is None  # not what the cross-validation scored
    assert _declared(A100, tdp_w=400) is not None  # energy only: the steps are the fitted default's
    ascend = dict(H100, device="Ascend-910B3")
    assert _declared(ascend) is None  # BestServe's parameters: not cross-validated


def test_the_hub_receives_the_band_in_process_and_over_grpc() -> None:
    spec = sample_session_spec()
    spec.options.update({"step_error": 0.25})
    local = in_process_runtime_client("lin", "cosim.adapters.sdk.testing:LinearBackend")
    assert local.open_session(spec).step_error.high == 0.25
    assert not local.open_session(sample_session_spec()).HasField("step_error")
    port = free_port()
    server = BackendServer(LinearBackend(), port=port).start()
    remote = RuntimeClient("lin", f"127.0.0.1:{port}")
    try:
        assert remote.open_session(spec).step_error == pb.StepError(
            low=-0.25, high=0.25, basis="linear test backend: option step_error")
    finally:
        remote.close()
        server.stop(0)


def test_a_session_renamed_by_the_hub_keeps_its_band() -> None:
    class SameIdStub:  # a restarted backend handing out an id callers still hold
        def OpenSession(self, request: Any, timeout: float | None = None) -> pb.OpenSessionResponse:
            return pb.OpenSessionResponse(session_id="lab-1", step_error=pb.StepError(low=-0.1, high=0.1))

    client = RuntimeClient("lab", "in-process", stub=SameIdStub())
    client.open_session(pb.SessionSpec())
    client.sessions.lose_all()
    again = client.open_session(pb.SessionSpec())
    assert again.session_id == "lab-1~2" and again.step_error.high == 0.1


def test_an_edge_scales_by_one_plus_the_band_and_a_bad_band_is_the_backends_error() -> None:
    opened = pb.OpenSessionResponse(step_error=pb.StepError(low=-0.25, high=0.5))
    assert edge_scale(opened, "low", backend="b") == 0.75 and edge_scale(opened, "high", backend="b") == 1.5
    assert edge_scale(pb.OpenSessionResponse(), "high", backend="b") == 1.0
    for low, high in ((0.1, 0.2), (-0.2, -0.1), (-1.0, 0.1), (-0.1, float("nan"))):
        bad = pb.OpenSessionResponse(step_error=pb.StepError(low=low, high=high))
        with pytest.raises(BackendError, match="-1 < low <= 0 <= high") as err:
            edge_scale(bad, "low", backend="lab")
        assert err.value.backend == "lab"


class ConstantClient:
    """Stands in for a RuntimeClient: every step takes 1001 ns, 400 of them memory."""

    step_batch = pb.StepBatch

    def __init__(self) -> None:
        self.calls = 0

    def predict_steps(self, session_id: str, batches: Sequence[pb.StepBatch], **_: Any) -> list[pb.StepTiming]:
        self.calls += 1
        return [pb.StepTiming(duration_ns=1001, compute_ns=601, memory_ns=400) for _ in batches]


def test_a_scaled_proxy_scales_each_step_and_keeps_a_cache_of_its_own() -> None:
    shared, client = SharedTimings(), ConstantClient()
    nominal = RuntimeSessionProxy(client, "s", lookahead=False, shared_cache=shared.cache(("spec", 1.0)))  # type: ignore[arg-type]
    assert nominal.step_time([1], [10], now_ns=0).duration_ns == 1001
    low = RuntimeSessionProxy(client, "s", lookahead=False, shared_cache=shared.cache(("spec", 0.75)),  # type: ignore[arg-type]
                              scale=0.75)
    timing = low.step_time([1], [10], now_ns=0)
    assert (timing.duration_ns, timing.compute_ns, timing.memory_ns) == (751, 451, 300)  # round(x * 0.75)
    assert client.calls == 2  # the scaled run asked the backend: no timing of the nominal one served it
    assert low.step_time([1], [10], now_ns=0).duration_ns == 751 and client.calls == 2
