"""Fingerprints of what every example, bench scenario and replay writes, to check a refactor changes no byte.

    python scripts/golden_outputs.py record runs/golden.json     # run them all, write each output's SHA-256
    python scripts/golden_outputs.py check runs/golden.json      # run them again, list what differs

A run's ``summary.json`` is hashed without ``wall_time_s`` (the one figure that is not simulated), and
without the top-level keys named by ``--ignore`` (a change that reshapes one block on purpose, such as
``--ignore benchmark``, can still show that nothing else moved).
Scenarios that need a backend outside the process (``address:``, ``image:``, a Rust build) are left
out; replays need ``../shared/data`` beside the checkout and are skipped, saying so, without it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPLAYS = REPO.parent / "shared" / "data" / "llmservingsim" / "scenarios"
OUTPUTS = ("summary.json", "requests.csv", "clients.csv", "trace.json")
QUICK = ["--no-progress", "--in-process", "--set", "output.plots=false"]
# Big scenarios are cut to a size that still takes every path they exist for.
CUTS = {"examples/bench/scale-1m.yaml": 20_000, "examples/bench/chat-10k.yaml": 3_000,
        "examples/bench/prefix-100k.yaml": 1_000, "examples/bench/aisimulate-matched.yaml": 1_000,
        "examples/bench/vidur-matched.yaml": 1_000}
LEFT_OUT = ("examples/byo/python/address.yaml", "examples/byo/python/image.yaml", "examples/byo/rust/",
            "examples/search/")


def scenarios() -> dict[str, list[str]]:
    """Every scenario as a name and the cosim arguments that run it (the output folder is added)."""
    runs: dict[str, list[str]] = {}
    for path in sorted(REPO.glob("examples/**/*.yaml")):
        rel = path.relative_to(REPO).as_posix()
        if any(rel.startswith(prefix) for prefix in LEFT_OUT):
            continue
        args = ["run", rel, *QUICK]
        if rel in CUTS:
            args += ["--set", f"workload.requests={CUTS[rel]}"]
        runs[rel] = args
    if REPLAYS.is_dir():
        for path in sorted(REPLAYS.glob("*.json")):
            runs[f"replay/{path.stem}"] = ["replay", str(path), "--no-plots"]
    else:
        print(f"no {REPLAYS}: replays left out", file=sys.stderr)  # noqa: T201
    return runs


def fingerprint(folder: Path, ignore: tuple[str, ...] = ()) -> dict[str, str]:
    """SHA-256 of each output file of a run folder (summary.json less its wall time and ``ignore``)."""
    digests = {}
    for name in OUTPUTS:
        path = folder / name
        if not path.exists():
            continue
        data = path.read_bytes()
        if name == "summary.json":
            summary = json.loads(data)
            for key in ("wall_time_s", *ignore):
                summary.pop(key, None)
            data = json.dumps(summary, sort_keys=True).encode()
        digests[name] = hashlib.sha256(data).hexdigest()
    return digests


def run_all(only: str | None, ignore: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for i, (name, args) in enumerate(scenarios().items()):
            if only and only not in name:
                continue
            out = Path(scratch) / str(i)
            proc = subprocess.run([str(Path(sys.executable).with_name("cosim")), *args, "-o", str(out)], cwd=REPO,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                results[name] = {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
            else:
                results[name] = fingerprint(out, ignore)
            print(f"{name}: {results[name].get('error', 'ok')}",  # noqa: T201
                  file=sys.stderr)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["record", "check"])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--only", help="run only the scenarios whose name contains this")
    parser.add_argument("--ignore", action="append", default=[], metavar="KEY",
                        help="a top-level summary.json key left out of its hash (repeatable)")
    args = parser.parse_args()
    results = run_all(args.only, tuple(args.ignore))
    if args.action == "record":
        args.manifest.parent.mkdir(parents=True, exist_ok=True)
        args.manifest.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        return 0
    recorded = json.loads(args.manifest.read_text())
    differ = [f"{name}: {file}" for name, files in results.items() for file, digest in files.items()
              if recorded.get(name, {}).get(file) != digest]
    for line in differ:
        print("differs:", line)  # noqa: T201
    print(f"{len(results)} scenarios, {len(differ)} outputs differ")  # noqa: T201
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
