"""The README's quickstart, and switching its client between fidelity levels by one config line."""

from __future__ import annotations

import cosim
from tests.paths import EXAMPLES

QUICKSTART = EXAMPLES / "quickstart.yaml"


def test_quickstart_switches_between_roofline_and_regression_by_one_line() -> None:
    short = ["workload.requests=40", "output.dir=null"]  # no run folder (and no runs/quickstart in the cwd)
    roofline = cosim.run(QUICKSTART, overrides=short).summary
    regression = cosim.run(QUICKSTART, overrides=[*short, "clients[0].backend=empirical"]).summary
    assert roofline["requests"]["completed"] == regression["requests"]["completed"] == 40
    for key in ("backend", "fidelity"):
        assert (roofline["clients"]["c0"][key], regression["clients"]["c0"][key]) == ("analytical", "empirical")
    assert roofline["latency"]["ttft_s"]["mean"] != regression["latency"]["ttft_s"]["mean"]
    # both are plausible for Llama-3-8B on an A100: tens of ms per decode step, not seconds
    for summary in (roofline, regression):
        assert 0.005 < summary["latency"]["tpot_s"]["p50"] < 0.1
