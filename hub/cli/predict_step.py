"""``cosim predict step``: one step timed by a runtime backend, over gRPC.

    cosim predict step --backend roofline --model meta-llama/Llama-2-70b-hf \\
        --device H100-SXM --tp 4 --batch "2048:0,1:900" [--json]

``--batch`` lists one ``new:context`` pair per sequence: ``2048:0`` is a
prefill of 2048 tokens with nothing cached, ``1:900`` a decode at context 900.
The backend is served in-process on loopback and reached through the same
client a run uses.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..backends import BUILTIN_BACKENDS, BUILTIN_KINDS, RuntimeClient, launch_python
from ..errors import BackendError, ScenarioError

# The built-in kinds that time steps (--backend).
RUNTIME_KINDS = [kind for kind, spec in BUILTIN_KINDS.items() if spec.service == "runtime"]


def register_predict(predict_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds ``step`` to the ``cosim predict`` subcommands."""
    parser = predict_subparsers.add_parser(
        "step", help="time one forward step on a runtime backend",
        description="Time one step (a batch of prefill chunks and decodes) of a model on a device.")
    parser.add_argument("--backend", default="roofline", choices=RUNTIME_KINDS, help="built-in runtime backend kind")
    parser.add_argument("--model", required=True, help="model preset (HF id or alias, e.g. meta-llama/Llama-2-70b-hf)")
    parser.add_argument("--device", required=True, help="device preset, e.g. H100-SXM")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree (default 1)")
    parser.add_argument("--dtype", default="fp16", help="compute dtype for the device's peak (default fp16)")
    parser.add_argument("--batch", required=True, help='sequences as "new:context,..." e.g. "2048:0" or "1:900,1:900"')
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="backend session option (repeatable), e.g. mfu_prefill=0.5 or profile=none")
    parser.add_argument("--json", action="store_true", help="print a JSON object with duration_ns and breakdown")
    parser.set_defaults(handler=run)


def parse_batch(text: str) -> tuple[list[int], list[int]]:
    """``"512:0,1:900"`` -> ([512, 1], [0, 900]).

    Raises:
        ScenarioError: a malformed pair, or new tokens < 1.
    """
    new, ctx = [], []
    for i, part in enumerate(p.strip() for p in text.split(",")):
        head, sep, tail = part.partition(":")
        try:
            n, c = int(head), int(tail) if sep else 0
        except ValueError:
            raise ScenarioError("--batch", f"entry {i} {part!r} is not new:context (two integers)") from None
        if n < 1 or c < 0:
            raise ScenarioError("--batch", f"entry {i} {part!r}: new tokens must be >= 1 and context >= 0")
        new.append(n)
        ctx.append(c)
    return new, ctx


def _options(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ScenarioError("--option", f"{pair!r} is not KEY=VALUE")
        try:
            out[key] = float(value)
        except ValueError:
            out[key] = value
    return out


def _session_spec(args: argparse.Namespace) -> Any:
    from cosim.hub.config.presets import UnknownPreset, get_model, hardware_spec
    from cosim.v1 import types_pb2 as pb

    if args.tp < 1 or args.pp < 1:
        raise ScenarioError("--tp" if args.tp < 1 else "--pp", "must be >= 1")
    try:
        model = get_model(args.model).to_model_spec()
    except UnknownPreset as err:
        raise ScenarioError("--model", str(err)) from err
    try:
        hardware = hardware_spec(args.device, args.tp * args.pp, dtype=args.dtype)
    except UnknownPreset as err:
        raise ScenarioError("--device" if err.kind == "device" else "--dtype", str(err)) from err
    spec = pb.SessionSpec(client="cli", model=model, hardware=hardware,
                          parallelism=pb.Parallelism(tensor=args.tp, pipeline=args.pp))
    spec.options.update(_options(args.option))
    return spec


def run(args: argparse.Namespace) -> int:
    """Times the step through the backend and prints it."""
    from cosim.v1 import types_pb2 as pb

    if args.backend not in RUNTIME_KINDS:
        raise ScenarioError("--backend", f"unknown runtime backend {args.backend!r}; built in: "
                                         f"{', '.join(RUNTIME_KINDS)}")
    new, ctx = parse_batch(args.batch)
    spec = _session_spec(args)
    launched = launch_python(args.backend, BUILTIN_BACKENDS[args.backend])
    client = RuntimeClient(args.backend, launched.address)
    try:
        try:
            session_id = client.open_session(spec).session_id
        except BackendError as err:  # the backend rejected the model/device/parallelism
            raise ScenarioError("--model/--device/--tp", err.message) from err
        (timing,) = client.predict_steps(session_id, [pb.StepBatch(new_tokens=new, context_tokens=ctx)])
        client.close_session(session_id)
    finally:
        client.close()
        launched.stop()
    _report(args, timing)
    return 0


def _report(args: argparse.Namespace, timing: Any) -> None:
    breakdown = dict(sorted(timing.breakdown.items(), key=lambda kv: -kv[1]))
    if args.json:
        out = {"duration_ns": timing.duration_ns, "compute_ns": timing.compute_ns, "memory_ns": timing.memory_ns,
               "communication_ns": timing.communication_ns, "dispatch_ns": timing.dispatch_ns,
               "energy_j": timing.energy_j, "out_of_range": timing.out_of_range, "breakdown": breakdown}
        sys.stdout.write(json.dumps(out) + "\n")
        return
    lines = [f"step time: {timing.duration_ns / 1e6:.3f} ms ({args.backend}, {args.model} on {args.tp * args.pp} x "
             f"{args.device}, tp={args.tp} pp={args.pp})",
             f"  compute {timing.compute_ns / 1e6:.3f} ms, memory {timing.memory_ns / 1e6:.3f} ms, "
             f"communication {timing.communication_ns / 1e6:.3f} ms, dispatch {timing.dispatch_ns / 1e6:.3f} ms"]
    if timing.energy_j:
        lines.append(f"  energy {timing.energy_j:.3f} J")
    lines += [f"  {key:<16} {value / 1e6:10.3f} ms" for key, value in breakdown.items()]
    sys.stdout.write("\n".join(lines) + "\n")
