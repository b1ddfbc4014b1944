"""What every plot of cosim shares: the legends' type size, the latency panels' units, and how a figure is saved.

Main names: :data:`LEGEND_PT`, :data:`LATENCY_PANELS`, :func:`panel_label`, :func:`slo_label` and :func:`save`.
Legends are set in :data:`LEGEND_PT` points, matplotlib's ``x-small`` (6.9 pt at its default 10 pt) being too
small to read once a figure is scaled into a paper's column; tests/unit/metrics/test_plot_layout.py holds every legend
to 8 pt and clear of the axes' labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn: importing it takes 0.3 s
    from matplotlib.figure import Figure

LEGEND_PT = 9.0


class LatencyPanel(NamedTuple):
    """A latency metric as the plots show it: summary key, name, unit and the scale from seconds to it."""

    metric: str
    name: str
    unit: str
    scale: float


# In ms as vLLM's benchmark prints them; E2E, seconds long, in s.
LATENCY_PANELS = (LatencyPanel("ttft_s", "TTFT", "ms", 1000.0), LatencyPanel("tpot_s", "TPOT", "ms", 1000.0),
                  LatencyPanel("e2e_s", "E2E", "s", 1.0))
ITL_PANEL = LatencyPanel("itl_s", "ITL per token", "ms", 1000.0)


def panel_label(panel: LatencyPanel) -> str:
    """The axis label (and sweep panel title) of a latency panel: ``TTFT (ms)``."""
    return f"{panel.name} ({panel.unit})"


def slo_label(stat: str, target_s: float, panel: LatencyPanel, *, what: str = "", verdict: str = "") -> str:
    """The legend entry of an SLO bound, its threshold in the panel's unit: ``SLO p90 <= 500 ms (met)``.

    Args:
        stat: the bounded statistic (``p90``, ``mean``).
        target_s: the threshold in seconds.
        panel: the panel the bound is drawn on (its unit and scale).
        what: the SLO's metric, where it is not the panel's (``tbt_max`` on the ITL panel).
        verdict: ``met`` or ``missed``, where the run is known.
    """
    name = f"{what} " if what else ""
    tail = f" ({verdict})" if verdict else ""
    return f"SLO {name}{stat} <= {target_s * panel.scale:.4g} {panel.unit}{tail}"


def save(fig: Figure, path: Path, *, dpi: int = 100) -> None:
    """Writes ``fig`` as a PNG with no timestamp or version in it (the same figure, the same bytes).

    A figure without a layout engine of its own is laid out tightly; one made with
    ``layout="constrained"`` (legends outside the axes) keeps its engine.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi, metadata={"Software": None})
