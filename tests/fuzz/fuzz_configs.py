"""Mutate the example configs N times and count what cosim makes of them (issue 23's target:
2,000 mutated configs, 0 tracebacks, 0 hangs, 0 silent nonsense, every config validate accepts runs).

    python -m tests.fuzz.fuzz_configs -n 2000 --timeout 120 --seed 0 [--jsonl cases.jsonl] [--example 'seeds/*']

Each case (case i of seed s draws its example and 1 to 3 mutations from ``random.Random(f"{s}-{i}")``,
so any case can be replayed with ``--only i``; ``--example GLOB`` draws from the examples whose name, as
printed (``bench/mixed.yaml``, ``seeds/sweep.yaml``), matches instead) is checked in a worker process (see
:func:`tests.fuzz.mutations.check`); a case that outlasts ``--timeout`` is a hang, its worker is
killed and a new one started. Prints a line per case that is not ``rejected`` or ``ran``, then the
counts; exits 1 if any case was a traceback, a hang, nonsense or accepted but not run.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import multiprocessing as mp
import random
import sys
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

BAD = ("traceback", "hang", "nonsense", "accepted_not_run")


def example_name(example: Path) -> str:
    """How a case names its example: ``examples/quickstart.yaml``, ``bench/mixed.yaml``, ``seeds/sweep.yaml``."""
    return example.relative_to(example.parents[1]).as_posix()


def examples_matching(pattern: str | None) -> list[Path]:
    """The examples whose name (:func:`example_name`) matches the glob ``pattern`` (all of them: None)."""
    from tests.fuzz.mutations import EXAMPLES

    return [e for e in EXAMPLES if pattern is None or fnmatch.fnmatch(example_name(e), pattern)]


def case(seed: int, index: int, examples: list[Path] | None = None) -> tuple[str, list[str], dict[str, Any]]:
    """Case ``index`` of ``seed``, drawn from ``examples`` (default all): (example name, mutations, the
    mutated config)."""
    from tests.fuzz.mutations import EXAMPLES, apply, base_config, random_mutations

    rng = random.Random(f"{seed}-{index}")
    example = rng.choice(examples or EXAMPLES)
    config = base_config(example)
    mutations = random_mutations(config, rng, rng.randint(1, 3))
    for mutation in mutations:
        config = apply(config, mutation)
    return example_name(example), [str(m) for m in mutations], config


def _worker(conn: Connection) -> None:
    import logging

    from tests.fuzz.mutations import check

    logging.disable(logging.CRITICAL)  # backends' and the hub's logs are not the subject
    while True:
        config = conn.recv()
        try:
            outcome = check(config)
        except Exception as err:  # noqa: BLE001 - a fault of the harness: reported, and the run goes on
            conn.send(("traceback", f"the harness's check raised {type(err).__name__}: {err}", False))
            continue
        conn.send((outcome.kind, outcome.detail, outcome.accepted))


class Worker:
    """A process checking cases one at a time; replaced when a case hangs."""

    def __init__(self) -> None:
        context = mp.get_context("spawn")  # a fresh interpreter: no state shared with earlier cases
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker, args=(child,), daemon=True)
        self.process.start()

    def check(self, config: dict[str, Any], timeout: float) -> tuple[str, str, bool]:
        """(kind, detail, whether validate accepted it) of ``config``; a hang after ``timeout``."""
        self.conn.send(config)
        if self.conn.poll(timeout):
            try:
                kind, detail, accepted = self.conn.recv()
            except EOFError:  # the worker died (a crash in native code, or killed for memory)
                self.process.join(5)
                return "traceback", f"the worker died (exit code {self.process.exitcode})", True
            return kind, detail, accepted
        return "hang", f"no answer in {timeout:g} s", True

    def stop(self) -> None:
        self.process.kill()
        self.process.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=2000, help="cases to check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a case may take before it is a hang")
    parser.add_argument("--only", type=int, action="append", help="check only these case indexes")
    parser.add_argument("--jsonl", help="write every case's outcome here, one JSON object a line")
    parser.add_argument("--example", metavar="GLOB", help="draw only from these examples, e.g. 'seeds/*'")
    args = parser.parse_args(argv)
    examples = examples_matching(args.example)
    if not examples:
        parser.error(f"--example {args.example}: no example matches")
    out = open(args.jsonl, "w", encoding="utf-8") if args.jsonl else None  # noqa: SIM115 - closed below
    counts: Counter[str] = Counter()
    accepted = 0
    worker, started = Worker(), time.perf_counter()
    try:
        for index in args.only or range(args.n):
            example, mutations, config = case(args.seed, index, examples)
            began = time.perf_counter()
            kind, detail, was_accepted = worker.check(config, args.timeout)
            if kind == "hang" or not worker.process.is_alive():
                worker.stop()
                worker = Worker()
            counts[kind] += 1
            accepted += was_accepted
            seconds = time.perf_counter() - began
            if kind != "rejected" and kind != "ran":
                sys.stdout.write(f"{index} {example} {mutations}: {kind}: {detail[:400]}\n")
                sys.stdout.flush()
            if out is not None:
                out.write(json.dumps({"case": index, "example": example, "mutations": mutations, "kind": kind,
                                      "detail": detail[:2000], "seconds": round(seconds, 3)}) + "\n")
                out.flush()
    finally:
        worker.stop()
        if out is not None:
            out.close()
    total = sum(counts.values())
    sys.stdout.write(f"{total} cases in {time.perf_counter() - started:.0f} s: validate rejected "
                     f"{counts['rejected']}, accepted {accepted}, of which ran {counts['ran']}; tracebacks "
                     f"{counts['traceback']}, hangs {counts['hang']}, nonsense {counts['nonsense']}, accepted but "
                     f"not run {counts['accepted_not_run']}\n")
    return 1 if any(counts[k] for k in BAD) else 0


if __name__ == "__main__":
    sys.exit(main())
