"""Builders of small scenarios on the linear test backend (exact integer times)."""

from __future__ import annotations

import copy
from typing import Any

import cosim.hub.studies.runner as runner
from cosim.hub.sim.records import RequestRecord


def scenario(*, clients: list[dict[str, Any]] | None = None, step_ns: int = 1000, per_token_ns: int = 0,
             requests: list[tuple[float, int, int]] | None = None, **sections: Any) -> dict[str, Any]:
    """A config with one linear backend; ``requests`` are (arrival_s, input, output) written to a trace.

    Its run folders have no plots (most of a small run's time goes to drawing them): a test of the
    plots sets ``output={"plots": True}``."""
    config: dict[str, Any] = {
        "seed": 1,
        "models": {"m": {"preset": "meta-llama/Meta-Llama-3-8B"}},
        "hardware": {"h": {"preset": "H100-SXM"}},
        "backends": {"lin": {"python": "cosim.adapters.sdk.testing:LinearBackend",
                             "options": {"step_ns": step_ns, "per_token_ns": per_token_ns}}},
        "clients": clients or [{"name": "c0", "model": "m", "backend": "lin", "hardware": {"device": "h"}}],
        "workload": {"requests": 4, "arrival": {"process": "constant"},
                     "input_tokens": {"dist": "fixed", "value": 100},
                     "output_tokens": {"dist": "fixed", "value": 3}},
        "output": {"plots": False},
    }
    config.update(copy.deepcopy(sections))
    return config


def client(name: str = "c0", **scheduler: Any) -> dict[str, Any]:
    role = scheduler.pop("role", "mixed")
    return {"name": name, "model": "m", "backend": "lin", "role": role, "hardware": {"device": "h"},
            "scheduler": scheduler}


def run_with_trace(config: dict[str, Any], rows: list[tuple[float, int, int]], tmp_path: Any) -> list[RequestRecord]:
    """Runs ``config`` on requests given as (arrival_s, input_tokens, output_tokens) rows."""
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input,output\n" + "".join(f"{a},{i},{o}\n" for a, i, o in rows))
    source = {"path": str(trace), "format": "csv", "arrival_column": "arrival_s",
              "input_column": "input", "output_column": "output"}
    config["workload"] = {"requests": len(rows), "trace": source, "arrival": {"process": "trace"},
                          "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}}
    return runner.run(config).requests


def times(record: RequestRecord) -> tuple[int, int, int]:
    """(TTFT, E2E, first token) in ns."""
    return record.first_token_ns - record.arrival_ns, record.finish_ns - record.arrival_ns, record.first_token_ns
