"""The sweep's report.html from hand-made rows: a failed point, columns no point has, links only to reports
that exist."""

from __future__ import annotations

from pathlib import Path

from cosim.hub.studies.key_metrics import key_metrics
from cosim.hub.studies.study_report import sweep_report_html


def test_a_failed_point_shows_its_error_and_empty_columns_are_left_out(tmp_path: Path) -> None:
    (tmp_path / "000-seqs=1").mkdir()
    (tmp_path / "000-seqs=1" / "report.html").write_text("<html></html>")
    summary = {"requests": {"completed": 20}, "latency": {"ttft_s": {"mean": 0.0123, "p90": 0.5}},
               "throughput": {"requests_per_s": 4.0}}
    rows = [{"point": "000-seqs=1", "seqs": "1", **key_metrics(summary), "error": ""},
            {"point": "001-seqs=<2>", "seqs": "<2>", **key_metrics({}), "error": "backend lin failed at t=1 < 2"}]
    page = sweep_report_html(tmp_path, rows, ["seqs"], {}, [])
    header = page[page.index("<thead>"):page.index("</thead>")]
    assert header == ("<thead><tr><th>point</th><th>seqs</th><th>completed requests</th><th>TTFT mean (ms)</th>"
                      "<th>TTFT p90 (ms)</th><th>throughput (req/s)</th></tr>")  # no energy, no TPOT
    assert ('<tr><td><a href="000-seqs=1/report.html">000-seqs=1</a></td><td>1</td><td class="n">20</td>'
            '<td class="n">12.3</td><td class="n">500</td><td class="n">4</td></tr>') in page
    assert ('<tr><td>001-seqs=&lt;2&gt;</td><td>&lt;2&gt;</td><td class="n">-</td><td class="n">-</td>'
            '<td class="n">-</td><td class="n">-</td></tr>') in page  # no report to link
    assert "<ul><li>001-seqs=&lt;2&gt;: backend lin failed at t=1 &lt; 2</li></ul>" in page
    assert "No SLO in the config" in page and "No plots" in page
    assert "Failed points" not in sweep_report_html(tmp_path, rows[:1], ["seqs"], {}, [])
