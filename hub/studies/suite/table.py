"""The validation table: per run, scope and metric, cosim's error beside the published ones.

A :class:`Row` holds one measured figure, cosim's prediction and the predictions (or error bounds)
other simulators published for it. :func:`format_text` and :func:`format_markdown` lay the rows
out; :func:`medians` gives the median absolute error per metric and simulator over the runs'
whole-run figures (the benchmark's headline numbers). Errors are signed:
``(predicted - measured) / measured``; medians are of their absolute values.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Row:
    """One measured figure of one run.

    Attributes:
        run: the run's id (the index's).
        scope: ``summary`` (the whole run), ``stage_<i>`` (one inference-perf stage), or ``run``.
        metric: e.g. ``ttft_mean``, ``e2e_p90``, ``itl_mean``, ``tpot_mean``.
        unit: of ``measured`` and ``cosim`` (``ms``).
        measured: the real run's figure; None for a run whose outcomes are held out.
        cosim: cosim's figure; None where the run did not produce it.
        published: other simulators' predictions of it (same unit), by simulator.
        bounds: other simulators' published errors where only a bound is published (text, e.g. ``<=1.7%``).
        shortened: cosim ran shortened stages (--fast): its figure is not comparable to the measured one.
    """

    run: str
    scope: str
    metric: str
    unit: str
    measured: float | None
    cosim: float | None
    published: dict[str, float] = field(default_factory=dict)
    bounds: dict[str, str] = field(default_factory=dict)
    shortened: bool = False

    @property
    def family(self) -> str:
        """The runs it is pooled with in the medians: its id's prefix (``blis``, ``llmss``)."""
        return self.run.split("-", 1)[0]

    @property
    def error(self) -> float | None:
        """cosim's signed relative error, or None."""
        return relative_error(self.cosim, self.measured)

    def published_error(self, name: str) -> float | None:
        """Simulator ``name``'s signed relative error, or None."""
        return relative_error(self.published.get(name), self.measured)


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    """``(predicted - measured) / measured``, None where either is missing or not finite."""
    if predicted is None or measured is None or not measured or not math.isfinite(predicted):
        return None
    return (predicted - measured) / measured


def simulators(rows: Sequence[Row]) -> list[str]:
    """Every other simulator the rows name, in first-seen order."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row.published))
        names.update(dict.fromkeys(row.bounds))
    return list(names)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f}%"


def _num(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "" if value is None else "nan"
    return f"{value:.4g}"


def _cells(row: Row, names: Sequence[str]) -> list[str]:
    cosim_err = "(shortened)" if row.shortened else _pct(row.error)
    others = [row.bounds.get(n) or _pct(row.published_error(n)) for n in names]
    return [row.run, row.scope, f"{row.metric} ({row.unit})", _num(row.measured), _num(row.cosim), cosim_err, *others]


def medians(rows: Sequence[Row]) -> dict[str, dict[str, tuple[float, int]]]:
    """Per family and metric (``blis ttft_mean``), per simulator (``cosim`` first): (median |error|,
    runs) over whole-run rows; families apart, as their runs measure different things (client-side
    H100 runs, engine-side LLMServingSim replays)."""
    errors: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.scope not in ("summary", "run") or row.shortened:
            continue
        key = f"{row.family} {row.metric}"
        if (err := row.error) is not None:
            errors[key]["cosim"].append(abs(err))
        for name in row.published:
            if (other := row.published_error(name)) is not None:
                errors[key][name].append(abs(other))
    return {key: {name: (float(np.median(values)), len(values)) for name, values in by_sim.items()}
            for key, by_sim in errors.items()}


def format_text(rows: Sequence[Row], *, backend: str) -> str:
    """A fixed-width table of every row, then the medians."""
    names = simulators(rows)
    header = ["run", "scope", "metric", "measured", "cosim", "cosim err", *names]
    body = [_cells(row, names) for row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [f"cosim ({backend} backend) against measured serving runs; error = (predicted - measured) / measured",
             "  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in body]
    lines += ["", *_median_lines(rows)]
    return "\n".join(lines)


def _median_lines(rows: Sequence[Row]) -> list[str]:
    lines = ["median |error| over whole runs, per family of runs (runs counted):"]
    for metric, by_sim in medians(rows).items():
        parts = [f"{name} {value * 100:.1f}% ({n})" for name, (value, n) in by_sim.items()]
        lines.append(f"  {metric}: " + ", ".join(parts))
    return lines


def format_markdown(rows: Sequence[Row], *, backend: str) -> str:
    """The same table as GitHub markdown, medians first."""
    names = simulators(rows)
    what = " (each run's own: an LLMServingSim run's profile bundle, an H100 run's bare roofline)" \
        if backend == "auto" else ""
    out = [f"Backend: `{backend}`{what}. Error = (predicted − measured) / measured.", "",
           "| runs, metric | " + " | ".join(["cosim", *names]) + " |", "| --- |" + " --- |" * (len(names) + 1)]
    for metric, by_sim in medians(rows).items():
        cells = [f"{by_sim[n][0] * 100:.1f}% ({by_sim[n][1]})" if n in by_sim else "" for n in ["cosim", *names]]
        out.append(f"| median \\|error\\|, {metric} | " + " | ".join(cells) + " |")
    out += ["", "| run | scope | metric | measured | cosim | cosim err | " + " | ".join(names) + " |",
            "| --- | --- | --- | ---: | ---: | ---: |" + " ---: |" * len(names)]
    out += ["| " + " | ".join(_cells(row, names)) + " |" for row in rows]
    return "\n".join(out)


#: Where a document holds the generated table (``cosim validate-runs --markdown docs/validation.md``).
BEGIN, END = "<!-- validate-runs:begin -->", "<!-- validate-runs:end -->"


def splice(document: str, table: str) -> str:
    """``document`` with the text between its :data:`BEGIN` and :data:`END` markers replaced by
    ``table``; the table alone, between markers, where the document has none."""
    block = f"{BEGIN}\n{table}\n{END}"
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        return block + "\n"
    return document[:start] + block + document[end + len(END):]
