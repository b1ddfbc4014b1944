"""The hub's timing cache calls the in-process roofline's compiled model directly on a miss
(``RuntimeBackend.native_model``): the same timings, counters and errors as through its Python
``predict_steps`` asked step by step (a native miss predicts nothing ahead: it costs less than a
forecast)."""

from __future__ import annotations

from typing import Any

import pytest
from cosim_core import RuntimeSessionProxy

from cosim.adapters.sdk.testing import sample_session_spec
from cosim.hub.backends import BUILTIN_BACKENDS
from cosim.hub.backends.inprocess import in_process_runtime_client
from cosim.hub.errors import BackendError

# (new, context, fields) of each step, and of the batches predicted to follow each
STEPS: list[tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[str, tuple[int, ...]], ...]]] = [
    ((512, 1), (0, 300), ()),
    ((1, 1), (512, 301), ()),
    ((1, 1, 1), (513, 302, 40), (("dp_rank_tokens", (3, 9)),)),
    ((3, 1), (514, 303), (("draft_tokens", (2, 0)),)),
    ((64, 1), (0, 50), (("lora_ranks", (16, 0)), ("lora_ids", (1, 0)))),
    ((1, 1), (512, 301), ()),
]


def _proxy(native: bool, scale: float = 1.0, lookahead: bool = True) -> tuple[RuntimeSessionProxy, Any]:
    client = in_process_runtime_client("roofline", BUILTIN_BACKENDS["roofline"])
    session_id = client.open_session(sample_session_spec()).session_id
    model = client.native_model(session_id) if native else None
    return RuntimeSessionProxy(client, session_id, scale=scale, native=model, lookahead=lookahead), client


def _run(proxy: RuntimeSessionProxy) -> list[object]:
    timings = []
    for i, (new, context, fields) in enumerate(STEPS):
        ahead = [(n, c, *f) for n, c, f in STEPS[i + 1:]]
        timings.append(proxy.step_time(new, context, now_ns=i, ahead=lambda depth, a=ahead: a[:depth],
                                       fields=list(fields)))
    return timings


@pytest.mark.parametrize("scale", [1.0, 1.25])
def test_native_misses_time_and_count_as_the_python_path_step_by_step(scale: float) -> None:
    native, native_client = _proxy(True, scale)
    python, python_client = _proxy(False, scale, lookahead=False)
    assert native.native and not python.native
    assert not native.lookahead and _proxy(False)[0].lookahead
    assert _run(native) == _run(python) == _run(_proxy(False, scale)[0])
    assert (native.num_lookups, native.num_hits, native_client.num_calls + native.num_native_calls) == \
        (python.num_lookups, python.num_hits, python_client.num_calls) == (6, 1, 6)  # open, 5 misses
    assert native.num_native_calls == 5 and python.num_native_calls == 0
    assert native.cached() == python.cached()


def test_a_batch_the_checks_refuse_raises_the_python_paths_error() -> None:
    errors = []
    for native in (True, False):
        proxy, client = _proxy(native)
        calls = client.num_calls
        with pytest.raises(BackendError, match="batch.lora_ids") as err:
            proxy.step_time((1, 1), (5, 6), now_ns=0, fields=[("lora_ranks", (8, 8)), ("lora_ids", (1,))])
        errors.append((str(err.value), client.num_calls - calls))
    assert errors[0] == errors[1]


def test_a_grpc_client_hands_over_no_model() -> None:
    from cosim.hub.backends import RuntimeClient

    assert RuntimeClient.native_model(object.__new__(RuntimeClient), "s") is None  # type: ignore[arg-type]
