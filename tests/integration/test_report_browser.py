"""report.html as a person sees it: a run folder's, a sweep's and a comparison's page opened in headless
Chromium, offline.

Chromium comes from Debian's package (``make test`` installs it where it can); without it the
test is skipped, saying so.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

import cosim
from tests.scenarios.helpers import scenario

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (make test installs it "
                                                         "with apt-get where it can: apt-get install chromium)")


def _chromium(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with no network (a proxy that does not exist) and a throwaway profile."""
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def test_report_opens_offline_with_tables_and_plots(tmp_path: Path) -> None:
    config = scenario(workload={"requests": 40, "arrival": {"process": "poisson", "rate_per_s": 2000},
                                "input_tokens": {"dist": "uniform", "low": 10, "high": 300},
                                "output_tokens": {"dist": "uniform", "low": 2, "high": 30}},
                      per_token_ns=3, slo={"ttft_s": {"p90": 0.001}, "tpot_s": {"p90": 1.0}},
                      output={"plots": True})
    folder = cosim.run(config, output_dir=tmp_path / "run").output_dir
    page = (folder / "report.html").as_uri()

    dom = _chromium("--dump-dom", page, tmp_path=tmp_path).stdout
    assert "plots shown: 6 of 6" in dom  # the page's script counted the PNGs the browser decoded
    assert "============ Serving Benchmark Result ============" in dom
    ttft_ms = cosim.run(config).summary["benchmark"]["mean_ttft_ms"]
    assert f"{'Mean TTFT (ms):':<40} {ttft_ms:<10.2f}" in dom
    for text in ("Inter-token Latency", "ITL (per token)", "missed", "met", "c0"):
        assert text in dom, text

    shot = tmp_path / "report.png"
    _chromium(f"--screenshot={shot}", "--window-size=1280,2400", page, tmp_path=tmp_path)
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (2400, 1280)
    # A rendered page, not a blank one: dark text on white, and the plots' colours.
    assert (pixels[..., :3].mean(axis=2) < 0.3).mean() > 0.003
    assert np.unique((pixels[..., :3] * 15).astype(int).reshape(-1, 3), axis=0).shape[0] > 50


def test_sweep_and_compare_reports_open_offline_with_tables_and_plots(tmp_path: Path) -> None:
    """A sweep folder's report.html and a comparison's, as a person sees them: every plot decoded, the tables
    with each point's and each run's figures."""
    config = tmp_path / "scenario.yaml"
    config.write_text(yaml.safe_dump(scenario(
        workload={"requests": 30, "arrival": {"process": "poisson", "rate_per_s": 1000},
                  "input_tokens": {"dist": "uniform", "low": 10, "high": 300},
                  "output_tokens": {"dist": "uniform", "low": 2, "high": 20}},
        per_token_ns=20, slo={"ttft_s": {"p90": 0.0005}, "tpot_s": {"p90": 0.00002}})))
    sweep = cosim.sweep(config, ["workload.arrival.rate_per_s=1000,50000"], output_dir=tmp_path / "sweep")
    dom = _chromium("--dump-dom", (tmp_path / "sweep" / "report.html").as_uri(), tmp_path=tmp_path).stdout
    assert "plots shown: 1 of 1" in dom
    for row in sweep.rows:
        assert row["point"] in dom and f"{row['ttft_s_p90'] * 1000:.4g}" in dom
    for text in ("TTFT p90 (ms)", "goodput (req/s)", "ttft_s", "0.50"):  # the SLO target, 0.5 ms
        assert text in dom, text

    points = [tmp_path / "sweep" / row["point"] for row in sweep.rows]
    comparison = cosim.compare(points, output_dir=tmp_path / "cmp")
    dom = _chromium("--dump-dom", (tmp_path / "cmp" / "report.html").as_uri(), tmp_path=tmp_path).stdout
    assert "plots shown: 3 of 3" in dom
    ttft = comparison.table["TTFT p90 (ms)"]
    assert ttft[0] is not None and ttft[1] is not None
    assert f"{ttft[0]:.4g}" in dom and f"{ttft[1]:.4g} ({(ttft[1] - ttft[0]) / ttft[0] * 100:+.1f}%)" in dom
    for text in ("Key metrics", "SLO attainment (%)", sweep.rows[0]["point"], sweep.rows[1]["point"]):
        assert text in dom, text
