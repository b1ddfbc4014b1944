"""cosim's network backend against the real ASTRA-sim 2.0 binaries, collective by collective.

``python -m cosim.adapters.astrasim.agreement`` runs every case of :data:`CASES`
through the astrasim adapter (the real binary) and through cosim's own network
backend (predict mode for congestion-unaware, time-synchronized for
congestion-aware), writes ``agreement.csv`` beside this module (``--csv``) and
prints the markdown table of ``docs/astrasim.md`` (``--markdown FILE`` writes it).

    python -m cosim.adapters.astrasim.agreement \\
        --unaware /path/AstraSim_Analytical_Congestion_Unaware \\
        --aware /path/AstraSim_Analytical_Congestion_Aware

Without ``--unaware``, ``$COSIM_ASTRA_SIM`` or PATH names it; without ``--aware``,
the congestion-aware binary beside it. Main names: :data:`CASES`, :func:`measure`,
:func:`read_csv`, :func:`markdown`.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from cosim.adapters.network import AnalyticalNetworkBackend
from cosim.adapters.sdk import Session
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from .backend import AstraSimBackend
from .runner import DEFAULT_NAMES, resolve_binary

CSV_PATH = Path(__file__).with_name("agreement.csv")
SIZES = (65_536, 1 << 20, 64 << 20)  # per-NPU buffer, bytes
TOPOLOGIES = {  # name: (kind, NPUs, decimal GB/s, ns per hop) per dimension, dimension 0 first
    "Ring 8": [(net_pb.TOPOLOGY_KIND_RING, 8, 50.0, 500)],
    "FullyConnected 8": [(net_pb.TOPOLOGY_KIND_FULLY_CONNECTED, 8, 50.0, 500)],
    "Switch 8": [(net_pb.TOPOLOGY_KIND_SWITCH, 8, 50.0, 500)],
    "Ring 4 x Switch 4": [(net_pb.TOPOLOGY_KIND_RING, 4, 100.0, 200), (net_pb.TOPOLOGY_KIND_SWITCH, 4, 25.0, 1000)],
    "Switch 8 x Switch 2": [(net_pb.TOPOLOGY_KIND_SWITCH, 8, 300.0, 500),
                            (net_pb.TOPOLOGY_KIND_SWITCH, 2, 25.0, 2000)],
}
ALGORITHMS = {"ring": net_pb.COLLECTIVE_ALGORITHM_RING, "direct": net_pb.COLLECTIVE_ALGORITHM_DIRECT,
              "halvingDoubling": net_pb.COLLECTIVE_ALGORITHM_HALVING_DOUBLING,
              "doubleBinaryTree": net_pb.COLLECTIVE_ALGORITHM_DOUBLE_BINARY_TREE}
COLLECTIVES = {"all-reduce": net_pb.COLLECTIVE_KIND_ALL_REDUCE, "all-gather": net_pb.COLLECTIVE_KIND_ALL_GATHER,
               "reduce-scatter": net_pb.COLLECTIVE_KIND_REDUCE_SCATTER,
               "all-to-all": net_pb.COLLECTIVE_KIND_ALL_TO_ALL}
_FIELDS = {net_pb.COLLECTIVE_KIND_ALL_REDUCE: "all_reduce", net_pb.COLLECTIVE_KIND_ALL_GATHER: "all_gather",
           net_pb.COLLECTIVE_KIND_REDUCE_SCATTER: "reduce_scatter", net_pb.COLLECTIVE_KIND_ALL_TO_ALL: "all_to_all"}


@dataclasses.dataclass(frozen=True)
class System:
    """The system.json knobs a case sets (``local_mem_gbps`` 0: reductions free)."""

    name: str
    endpoint_delay_ns: int
    local_mem_gbps: float
    splits: int
    is_local_bw_aware: bool = False


FREE = System("ep 10, free reductions, 1 split", 10, 0.0, 1)
REAL = System("ep 10, local-mem-bw 1600, 4 splits", 10, 1600.0, 4)
MULTI = System("ep 7, local-mem-bw 900, 4 splits, localBWAware", 7, 900.0, 4, True)


@dataclasses.dataclass(frozen=True)
class Case:
    """One collective on one network: the row key of the table."""

    topology: str
    is_aware: bool
    algorithm: str
    collective: str
    system: System

    def spec(self) -> net_pb.NetworkSessionSpec:
        """The session spec both backends get (the algorithm on every dimension; ring elsewhere)."""
        system = net_pb.SystemConfig(
            endpoint_delay_ns=self.system.endpoint_delay_ns, local_mem_bandwidth_gbps=self.system.local_mem_gbps,
            preferred_dataset_splits=self.system.splits, active_chunks_per_dimension=1,
            collective_optimization=net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE if self.system.is_local_bw_aware
            else net_pb.COLLECTIVE_OPTIMIZATION_BASELINE)
        spec = net_pb.NetworkSessionSpec(client="agreement", system=system, mode=pb.SYNC_MODE_PREDICT)
        dims = TOPOLOGIES[self.topology]
        for kind, npus, bandwidth, latency in dims:
            spec.dims.add(kind=kind, npus=npus, bandwidth_gbps=bandwidth, latency_ns=latency)
        for kind, field in _FIELDS.items():
            algorithm = ALGORITHMS[self.algorithm] if kind == COLLECTIVES[self.collective] else ALGORITHMS["ring"]
            getattr(spec.system, field).extend([algorithm] * len(dims))
        return spec


def _cases() -> list[Case]:
    pairs = [(a, c) for a in ("ring", "direct", "halvingDoubling") for c in COLLECTIVES
             if not (a == "halvingDoubling" and c == "all-to-all")] + [("doubleBinaryTree", "all-reduce")]
    cases = [Case(t, aware, a, c, FREE) for t in ("Ring 8", "FullyConnected 8", "Switch 8") for aware in (False, True)
             for a, c in pairs]
    cases += [Case(t, aware, a, c, REAL) for t in ("Ring 8", "Switch 8") for aware in (False, True)
              for a, c in pairs]
    cases += [Case(t, False, a, c, s) for t in ("Ring 4 x Switch 4", "Switch 8 x Switch 2") for s in (FREE, MULTI)
              for a, c in pairs if not (s.is_local_bw_aware and a == "doubleBinaryTree")]
    return cases


CASES = _cases()


@dataclasses.dataclass(frozen=True)
class Row:
    """One case at one size: ASTRA-sim's time and cosim's, ns."""

    case: Case
    size_bytes: int
    astra_ns: int
    cosim_ns: int

    @property
    def rel_diff(self) -> float:
        """(cosim - ASTRA-sim) / ASTRA-sim."""
        return (self.cosim_ns - self.astra_ns) / self.astra_ns


def cosim_ns(case: Case, size_bytes: int) -> int:
    """cosim's network backend: predict mode (congestion-unaware) or one collective time-synchronized (aware)."""
    spec = case.spec()
    if case.is_aware:
        spec.mode = pb.SYNC_MODE_TIME_SYNCHRONIZED
    backend = AnalyticalNetworkBackend()
    session = Session(id="cosim", spec=spec, state=backend.open_session(spec))
    op = net_pb.CollectiveOp(id=1, kind=COLLECTIVES[case.collective], size_bytes=size_bytes)
    return int(backend.collective(session, [op])[0].duration_ns)


def astra_ns(case: Case, size_bytes: int, binary: str) -> int:
    """The real binary through the astrasim adapter."""
    spec = case.spec()
    backend = AstraSimBackend(binary=binary)
    session = Session(id="astra", spec=spec, state=backend.open_session(spec))
    op = net_pb.CollectiveOp(id=1, kind=COLLECTIVES[case.collective], size_bytes=size_bytes)
    return int(backend.collective(session, [op])[0].duration_ns)


def measure(cases: Iterable[Case], *, unaware: str, aware: str, sizes: Sequence[int] = SIZES) -> list[Row]:
    """Every case at every size through both backends."""
    return [Row(c, s, astra_ns(c, s, aware if c.is_aware else unaware), cosim_ns(c, s)) for c in cases for s in sizes]


def default_binaries() -> tuple[str, str]:
    """(congestion-unaware, congestion-aware): $COSIM_ASTRA_SIM or PATH, and its sibling."""
    unaware = resolve_binary()
    return unaware, os.path.join(os.path.dirname(unaware), DEFAULT_NAMES[1])


_COLUMNS = ["topology", "congestion", "algorithm", "collective", "system", "size_bytes", "astra_ns", "cosim_ns"]


def write_csv(rows: Iterable[Row], path: Path) -> None:
    """The rows as CSV (the table's source of record)."""
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(_COLUMNS)
        for r in rows:
            writer.writerow([r.case.topology, "aware" if r.case.is_aware else "unaware", r.case.algorithm,
                             r.case.collective, r.case.system.name, r.size_bytes, r.astra_ns, r.cosim_ns])


def read_csv(path: Path = CSV_PATH) -> list[Row]:
    """Rows recorded by :func:`write_csv`, matched back to :data:`CASES`.

    Raises:
        ValueError: a line naming no known case, with its line number.
    """
    systems = {s.name: s for s in (FREE, REAL, MULTI)}
    rows = []
    with open(path, newline="") as stream:
        for line, record in enumerate(csv.DictReader(stream), start=2):
            try:
                case = Case(record["topology"], record["congestion"] == "aware", record["algorithm"],
                            record["collective"], systems[record["system"]])
            except KeyError as err:
                raise ValueError(f"{path}:{line}: system {err} is not one of {sorted(systems)}") from err
            if case not in CASES:
                raise ValueError(f"{path}:{line}: {case} is not a case of CASES")
            rows.append(Row(case, int(record["size_bytes"]), int(record["astra_ns"]), int(record["cosim_ns"])))
    return rows


def _cell(row: Row) -> str:
    if row.cosim_ns == row.astra_ns:
        return f"{row.astra_ns} ="
    return f"{row.astra_ns} / {row.cosim_ns} ({row.rel_diff:+.2%})"


def markdown(rows: Sequence[Row]) -> str:
    """The table: a line per case, a column per size; ``N =`` where both give N ns, else ``ASTRA / cosim``."""
    sizes = sorted({r.size_bytes for r in rows})
    by_case: dict[Case, dict[int, Row]] = {}
    for r in rows:
        by_case.setdefault(r.case, {})[r.size_bytes] = r
    head = ["system", "topology", "congestion", "algorithm", "collective"] + [_size(s) for s in sizes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case, cells in by_case.items():
        lines.append("| " + " | ".join([case.system.name, case.topology, "aware" if case.is_aware else "unaware",
                                        case.algorithm, case.collective]
                                       + [_cell(cells[s]) if s in cells else "" for s in sizes]) + " |")
    exact = sum(r.cosim_ns == r.astra_ns for r in rows)
    worst = max(rows, key=lambda r: abs(r.rel_diff))
    lines.append("")
    lines.append(f"{exact} of {len(rows)} times are equal to the nanosecond; the largest difference is "
                 f"{worst.rel_diff:+.2%} ({worst.case.algorithm} {worst.case.collective} on {worst.case.topology}, "
                 f"{_size(worst.size_bytes)}).")
    return "\n".join(lines) + "\n"


def _size(size_bytes: int) -> str:
    return f"{size_bytes >> 20} MiB" if size_bytes >= 1 << 20 else f"{size_bytes >> 10} KiB"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unaware", help="AstraSim_Analytical_Congestion_Unaware (default: $COSIM_ASTRA_SIM, PATH)")
    parser.add_argument("--aware", help="AstraSim_Analytical_Congestion_Aware (default: beside --unaware)")
    parser.add_argument("--csv", type=Path, default=CSV_PATH, help=f"where the rows go (default: {CSV_PATH.name})")
    parser.add_argument("--markdown", type=Path, help="also write the markdown table to this file")
    args = parser.parse_args(argv)
    unaware = args.unaware or default_binaries()[0]
    aware = args.aware or os.path.join(os.path.dirname(os.path.abspath(unaware)), DEFAULT_NAMES[1])
    rows = measure(CASES, unaware=unaware, aware=aware)
    write_csv(rows, args.csv)
    table = markdown(rows)
    if args.markdown:
        args.markdown.write_text(table)
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
