"""The agreement table of docs/astrasim.md, rerun against a real ASTRA-sim 2.0 build.

Runs when ``$COSIM_ASTRA_SIM`` names ``AstraSim_Analytical_Congestion_Unaware``
(or it is on PATH), with ``AstraSim_Analytical_Congestion_Aware`` beside it;
skipped otherwise, saying so. Every recorded row of
``adapters/astrasim/agreement.csv`` is rerun: the binary must give the recorded
time exactly (ASTRA-sim is deterministic), and cosim's network backend must give
the binary's time exactly, except the rows :data:`TOLERANCES` names (docs/astrasim.md
says why they differ), which must stay within their stated bound.
"""

from __future__ import annotations

import os
import shutil

import pytest

from cosim.adapters.astrasim.agreement import CASES, Case, Row, astra_ns, cosim_ns, read_csv
from cosim.adapters.astrasim.runner import DEFAULT_NAMES, ENV_BINARY


def _binaries() -> tuple[str, str] | None:
    unaware = os.environ.get(ENV_BINARY) or shutil.which(DEFAULT_NAMES[0])
    if not unaware or not os.access(unaware, os.X_OK):
        return None
    aware = os.path.join(os.path.dirname(os.path.abspath(unaware)), DEFAULT_NAMES[1])
    return (unaware, aware) if os.access(aware, os.X_OK) else None


BINARIES = _binaries()
needs_astra_sim = pytest.mark.skipif(
    BINARIES is None, reason=f"no ASTRA-sim build: set {ENV_BINARY} to AstraSim_Analytical_Congestion_Unaware "
    "(with AstraSim_Analytical_Congestion_Aware beside it) or put it on PATH; adapters/astrasim/build.sh builds both")


def tolerance(case: Case) -> float:
    """The largest |cosim - ASTRA-sim| / ASTRA-sim allowed for ``case`` (0: equal to the ns)."""
    if case.algorithm == "doubleBinaryTree" and case.system.splits > 1:
        return 0.20  # ASTRA-sim overlaps chunks on its two trees; cosim runs them one after another
    if case.algorithm == "direct" and case.collective == "all-reduce" and case.topology.startswith("Ring") \
            and case.system.local_mem_gbps > 0:
        return 0.02  # ASTRA-sim overlaps a near peer's reduction with a far peer's message
    return 0.0


ROWS = read_csv()


def test_every_case_is_recorded() -> None:
    """agreement.csv holds every case of CASES at every size (rerun the module after changing CASES)."""
    assert {r.case for r in ROWS} == set(CASES)


def _label(row: Row) -> str:
    case = row.case
    return (f"{case.topology}-{'aware' if case.is_aware else 'unaware'}-{case.algorithm}-{case.collective}-"
            f"{case.system.splits}split-{row.size_bytes}")


@needs_astra_sim
def test_real_astra_sim_agrees_with_the_table() -> None:
    """Every row at once (one test, so that a machine without the binary reports one skip, not 498)."""
    assert BINARIES is not None
    unaware, aware = BINARIES
    problems = []
    for row in ROWS:
        astra = astra_ns(row.case, row.size_bytes, aware if row.case.is_aware else unaware)
        cosim = cosim_ns(row.case, row.size_bytes)
        if astra != row.astra_ns:
            problems.append(f"{_label(row)}: the ASTRA-sim build gives {astra} ns, recorded {row.astra_ns}")
        if cosim != row.cosim_ns:
            problems.append(f"{_label(row)}: cosim gives {cosim} ns, recorded {row.cosim_ns}")
        if abs(cosim - astra) > tolerance(row.case) * astra:
            problems.append(f"{_label(row)}: cosim {cosim} ns against ASTRA-sim {astra} ns, beyond "
                            f"{tolerance(row.case):.0%}")
    assert not problems, "\n".join(problems)
