"""``python -m cosim.adapters.scalesim.benchmark``: simulation speed with and without reuse.

Replays the steps of a small continuous-batching run (prefill-prioritized,
one prompt per step, up to 32 decodes; Poisson-free: every request is
waiting at t=0) of Llama-3-8B on the default TPU-v4-like chip, once with
``reuse`` and once without, and prints the Markdown table kept in
``docs/scalesim.md``. Without reuse only the first ``--steps-without``
steps are replayed (it is slow) and the rate is given per step.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from cosim.adapters.sdk import Session
from cosim.adapters.sdk.testing import sample_session_spec
from cosim.v1 import types_pb2 as pb

from .backend import ScaleSimBackend


def make_steps(num_requests: int, output_tokens: int, max_seqs: int, seed: int = 0) -> list[pb.StepBatch]:
    """Steps of a prefill-prioritized continuous batcher over lognormal prompts (median 512)."""
    rng = np.random.default_rng(seed)
    prompts = [int(p) for p in np.clip(rng.lognormal(np.log(512), 0.5, num_requests), 16, 4096)]
    waiting, running, steps = list(prompts), [], []  # running: [context, tokens left]
    while waiting or running:
        if waiting and len(running) < max_seqs:
            prompt = waiting.pop(0)
            steps.append(pb.StepBatch(new_tokens=[prompt], context_tokens=[0]))
            running.append([prompt, output_tokens - 1])
            continue
        steps.append(pb.StepBatch(new_tokens=[1] * len(running), context_tokens=[c for c, _ in running]))
        running = [[c + 1, left - 1] for c, left in running if left > 1]
    return steps


def replay(steps: list[pb.StepBatch], options: dict[str, Any]) -> tuple[float, int, float]:
    """(wall seconds, SCALE-Sim runs, simulated seconds) of timing ``steps``."""
    spec = sample_session_spec()
    spec.options.update(options)
    backend = ScaleSimBackend()
    session = Session(id="bench", spec=spec, state=backend.open_session(spec))
    start = time.perf_counter()
    simulated = sum(backend.predict(session, batch).duration_ns for batch in steps)
    return time.perf_counter() - start, session.state.num_simulations, simulated / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--steps-without", type=int, default=40)
    args = parser.parse_args(argv)
    steps = make_steps(args.requests, args.output_tokens, max_seqs=32)
    rows = ["| mode | steps | wall s | SCALE-Sim runs | ms per step |", "|---|---:|---:|---:|---:|"]
    for label, options, subset in [
        ("reuse (default)", {}, steps),
        ("reuse + bucket_m", {"bucket_m": True}, steps),
        ("no reuse", {"reuse": False}, steps[:args.steps_without]),
    ]:
        wall, runs, _ = replay(subset, options)
        rows.append(f"| {label} | {len(subset)} | {wall:.1f} | {runs} | {1e3 * wall / len(subset):.1f} |")
    sys.stdout.write(f"{args.requests} requests, {args.output_tokens} output tokens, {len(steps)} steps\n\n")
    sys.stdout.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
