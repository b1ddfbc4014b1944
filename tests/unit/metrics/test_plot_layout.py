"""Plots a paper can use: legends clear of every axis label and tick label, at a readable size; sweep panels
titled with their metric and unit, SLO lines labelled in it; goodput visible where it equals throughput.

The layout is measured as matplotlib lays the saved PNG out: every ``Figure.savefig`` of a test is recorded and
its legends' window extents compared with the extents of each axis (its label and tick labels) and title.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure

from cosim.hub.metrics import plot_breakdown, write_run_folder
from cosim.hub.metrics.comparison_plots import plot_latency_vs_load, plot_overlaid_cdfs
from tests.unit.metrics.test_metrics import make_clients, make_requests, make_summary

MIN_LEGEND_PT = 8.0
SWEEP_KEY = "workload.arrival.rate_per_s"
SLO = {"ttft_s": {"p90": 0.5}, "tpot_s": {"p90": 0.05, "mean": 0.02}, "e2e_s": {"p99": 8.0}}


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Figure, str]]]:
    """Every figure saved while the test runs, laid out and drawn as in its PNG, with the file's name."""
    figures: list[tuple[Figure, str]] = []
    original = Figure.savefig

    def savefig(self: Figure, fname: Any, **kwargs: Any) -> None:
        original(self, fname, **kwargs)
        figures.append((self, Path(str(fname)).name))

    monkeypatch.setattr(Figure, "savefig", savefig)
    yield figures


def layout_problems(fig: Figure) -> list[str]:
    """What is wrong with the legends of a drawn figure: one too small to read, one outside the figure,
    or one over an axis label, a tick label or a title."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    problems = []
    for legend in legends:
        box = legend.get_window_extent(renderer)
        sizes = {text.get_fontsize() for text in legend.get_texts()}
        if min(sizes) < MIN_LEGEND_PT:
            problems.append(f"legend type of {min(sizes):.3g} pt, under {MIN_LEGEND_PT} pt")
        if box.x0 < 0 or box.y0 < 0 or box.x1 > fig.bbox.x1 or box.y1 > fig.bbox.y1:
            problems.append("legend outside the figure")
        for ax in fig.axes:
            for axis, what in ((ax.xaxis, "x"), (ax.yaxis, "y")):
                extent = axis.get_tightbbox(renderer)
                if extent is not None and extent.width and box.overlaps(extent):
                    problems.append(f"legend over the {what} axis labelled {axis.get_label_text()!r}")
            if ax.get_title() and box.overlaps(ax.title.get_window_extent(renderer)):
                problems.append(f"legend over the title {ax.get_title()!r}")
    return problems


def check_layout(figures: list[tuple[Figure, str]], expected: int) -> None:
    assert len(figures) == expected
    for fig, name in figures:
        assert layout_problems(fig) == [], name


def sweep_rows(goodput_share: float = 0.5) -> list[dict[str, Any]]:
    return [{SWEEP_KEY: str(rate), "ttft_s_mean": 0.1 * rate, "ttft_s_p90": 0.2 * rate, "tpot_s_mean": 0.01,
             "tpot_s_p90": 0.02 * rate, "e2e_s_mean": 1.0 * rate, "e2e_s_p90": 2.0 * rate,
             "throughput_requests_per_s": 0.9 * rate, "goodput_requests_per_s": 0.9 * rate * goodput_share}
            for rate in (1, 2, 4, 8)]


def test_a_run_folders_legends_are_readable_and_clear_of_the_axis_labels(
        tmp_path: Path, saved: list[tuple[Figure, str]]) -> None:
    clients, timelines = make_clients()
    write_run_folder(tmp_path, make_summary(), make_requests(), clients, timelines)
    check_layout(saved, 6)
    legends = {name: fig.axes[0].get_legend() or fig.legends for fig, name in saved}
    assert legends["breakdown.png"] and legends["latency_cdf.png"] and legends["queue.png"]


@pytest.mark.parametrize("num_bars", [1, 2, 6])
@pytest.mark.parametrize("components", [
    ["queue", "communication", "prefill", "decode"],
    ["queue", "communication", "rag:embedding", "rag:retrieval", "rag:generation", "prefill", "decode"]])
def test_the_breakdowns_legend_sits_below_its_axis_label(tmp_path: Path, saved: list[tuple[Figure, str]],
                                                         num_bars: int, components: list[str]) -> None:
    """The legend under a one-bar breakdown (a run of one template) used to cover "mean latency (s)"."""
    bars = {f"template-{i}": {c: 0.1 * (j + 1) for j, c in enumerate(components)} for i in range(num_bars)}
    plot_breakdown(tmp_path / "breakdown.png", bars, title="where the time goes (mean per request)")
    check_layout(saved, 1)
    (fig, _), = saved
    legend_box = fig.legends[0].get_window_extent(fig.canvas.get_renderer())  # type: ignore[attr-defined]
    label_box = fig.axes[0].xaxis.label.get_window_extent(fig.canvas.get_renderer())  # type: ignore[attr-defined]
    assert legend_box.y1 <= label_box.y0  # below it (display y grows upwards)
    texts = fig.legends[0].get_texts()
    places = {t.get_text(): t.get_window_extent(fig.canvas.get_renderer()) for t in texts}  # type: ignore[attr-defined]
    reading = sorted(places, key=lambda name: (-round(places[name].y0), places[name].x0))
    assert reading == components  # row by row, left to right: the order the bars stack in


def test_sweep_and_compare_legends_are_readable_and_clear_of_the_axis_labels(
        tmp_path: Path, saved: list[tuple[Figure, str]]) -> None:
    plot_latency_vs_load(tmp_path / "latency_vs_load.png", sweep_rows(), [SWEEP_KEY], SLO)
    rng = np.random.default_rng(3)
    runs = {name: {m: rng.lognormal(-2, 0.5, 200) for m in ("ttft_s", "tpot_s", "e2e_s")}
            for name in ("000-rate_per_s=1", "001-rate_per_s=8")}
    plot_overlaid_cdfs(tmp_path, runs, SLO)
    check_layout(saved, 4)


def test_sweep_panels_are_titled_with_metric_and_unit_and_slo_lines_carry_it() -> None:
    fig = plot_latency_vs_load(Path("/dev/null"), sweep_rows(), [SWEEP_KEY], SLO)
    assert [ax.get_title() for ax in fig.axes] == ["TTFT (ms)", "TPOT (ms)", "E2E (s)",
                                                   "throughput and goodput (requests/s)"]
    ttft, tpot, e2e, _ = fig.axes
    assert ttft.lines[-1].get_label() == "SLO p90 <= 500 ms"
    assert [line.get_label() for line in tpot.lines][-2:] == ["SLO mean <= 20 ms", "SLO p90 <= 50 ms"]
    assert e2e.lines[-1].get_label() == "SLO p99 <= 8 s" and list(e2e.lines[-1].get_ydata()) == [8.0, 8.0]


def test_compare_slo_lines_carry_the_unit(tmp_path: Path, saved: list[tuple[Figure, str]]) -> None:
    runs = {"a": {m: np.array([0.01, 0.02, np.nan]) for m in ("ttft_s", "tpot_s", "e2e_s")}}
    plot_overlaid_cdfs(tmp_path, runs, SLO)
    labels = {name: [line.get_label() for line in fig.axes[0].lines] for fig, name in saved}
    assert labels["ttft_cdf.png"] == ["a", "SLO p90 <= 500 ms", "_child2"]  # the percentile's level: no entry
    assert labels["e2e_cdf.png"][1] == "SLO p99 <= 8 s"


def _panel_pixels(fig: Figure, ax: Any) -> np.ndarray:
    """The RGB pixels inside ``ax`` as the figure draws now."""
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float) / 255  # type: ignore[attr-defined]
    box, height = ax.get_window_extent(), image.shape[0]
    return image[int(height - box.y1):int(height - box.y0), int(box.x0):int(box.x1)]


def _changed_pixels(fig: Figure, ax: Any, line: Any) -> int:
    """How many pixels of the panel change clearly (a channel by over a quarter) when ``line`` is hidden."""
    shown = _panel_pixels(fig, ax)
    line.set_visible(False)
    hidden = _panel_pixels(fig, ax)
    line.set_visible(True)
    return int((np.abs(shown - hidden).max(axis=2) > 0.25).sum())


def test_goodput_equal_to_throughput_is_drawn_visibly_over_it() -> None:
    """Where every request meets its SLOs, goodput equals throughput: both lines must still show. Hiding either
    changes hundreds of pixels (a dotted goodput of throughput's colour and marker changed none)."""
    fig = plot_latency_vs_load(Path("/dev/null"), sweep_rows(goodput_share=1.0), [SWEEP_KEY], {})
    ax = fig.axes[3]
    throughput, goodput = ax.lines[:2]
    assert (throughput.get_label(), goodput.get_label()) == ("throughput", "goodput")
    assert list(goodput.get_ydata()) == list(throughput.get_ydata())
    assert goodput.get_zorder() > throughput.get_zorder()
    assert goodput.get_linestyle() != throughput.get_linestyle() and goodput.get_marker() != throughput.get_marker()
    ax.get_legend().remove()  # the legend's own samples of both lines would count as visible
    assert _changed_pixels(fig, ax, goodput) > 300
    assert _changed_pixels(fig, ax, throughput) > 300
