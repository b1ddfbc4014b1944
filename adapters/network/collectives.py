"""Collective algorithms as rounds of messages, as ASTRA-sim's system layer runs them.

A collective over a :class:`Group` of NPUs is planned for one chunk as a list
of :class:`Phase` (one per dimension it crosses, in ASTRA-sim's dimension
order). A phase is a list of :class:`Round` kinds, each repeated: every round
sends one message per (src, dst) pair, waits for all of them, then waits
``delay_ns`` (endpoint delay plus reduction). A phase ends with one more
endpoint delay. Both modes share this plan:

- congestion-unaware (:func:`phase_ns`): a round takes the slowest pair's
  cut-through send; this reproduces the closed forms of the reference, e.g.
  ring all-reduce = 2(n-1)·st(D/n) + (n-1)·red(D/n) + ep;
- congestion-aware (:mod:`.congestion`): every message crosses its links.

Algorithms per dimension: ring, direct (all peers at once), halving-doubling
(recursive halving then doubling; power-of-two groups) and double binary tree
(all-reduce only; two mirrored trees each carrying half the data).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from cosim.v1 import network_service_pb2 as net_pb

from .topology import Topology

ALL_REDUCE = net_pb.COLLECTIVE_KIND_ALL_REDUCE
ALL_GATHER = net_pb.COLLECTIVE_KIND_ALL_GATHER
REDUCE_SCATTER = net_pb.COLLECTIVE_KIND_REDUCE_SCATTER
ALL_TO_ALL = net_pb.COLLECTIVE_KIND_ALL_TO_ALL

RING_ALG = net_pb.COLLECTIVE_ALGORITHM_RING
DIRECT_ALG = net_pb.COLLECTIVE_ALGORITHM_DIRECT
HD_ALG = net_pb.COLLECTIVE_ALGORITHM_HALVING_DOUBLING
DBT_ALG = net_pb.COLLECTIVE_ALGORITHM_DOUBLE_BINARY_TREE

Pair = tuple[int, int]


class UnsupportedCollective(ValueError):
    """The algorithm cannot run this collective on this group."""


@dataclasses.dataclass(frozen=True)
class Round:
    """``repeat`` identical rounds: one message of ``size_bytes`` per pair."""

    pairs: tuple[Pair, ...]
    size_bytes: int
    delay_ns: int
    repeat: int = 1


@dataclasses.dataclass(frozen=True)
class Phase:
    """One algorithm run in one dimension (-1: a flat ring over the group)."""

    dim: int
    rounds: tuple[Round, ...]


@dataclasses.dataclass(frozen=True)
class Group:
    """NPUs taking part in a collective, as lines along each dimension.

    ``dims`` lists the dimensions where the group has more than one
    coordinate; ``lines[d]`` the NPUs along ``d`` that share every other
    coordinate, ordered by coordinate. A group that is not a sub-grid of the
    topology is ``flat``: one line over all its NPUs (a logical ring, as
    ASTRA-sim's ``oneRing``).
    """

    npus: tuple[int, ...]
    dims: tuple[int, ...]
    lines: dict[int, tuple[tuple[int, ...], ...]]
    is_flat: bool

    @property
    def size(self) -> int:
        return len(self.npus)


def make_group(topology: Topology, npus: Sequence[int]) -> Group:
    """Splits ``npus`` into lines along the dimensions they span."""
    members = tuple(sorted(set(npus)))
    addresses = {npu: topology.address(npu) for npu in members}
    coords = [sorted({a[d] for a in addresses.values()}) for d in range(len(topology.dims))]
    dims = tuple(d for d, c in enumerate(coords) if len(c) > 1)
    if math.prod(len(c) for c in coords) != len(members):
        return Group(members, (-1,), {-1: (members,)}, is_flat=True)
    lines: dict[int, tuple[tuple[int, ...], ...]] = {}
    for d in dims:
        by_rest: dict[tuple[int, ...], list[int]] = {}
        for npu in members:
            a = addresses[npu]
            by_rest.setdefault(a[:d] + a[d + 1:], []).append(npu)
        lines[d] = tuple(tuple(sorted(line, key=lambda n: addresses[n][d])) for line in by_rest.values())
    return Group(members, dims, lines, is_flat=False)


def reduction_ns(size_bytes: int, local_mem_gbps: float) -> int:
    """3·⌊m / local-mem-bw⌋ (one write, two reads); 0 when the bandwidth is 0."""
    if local_mem_gbps <= 0:
        return 0
    return 3 * int(size_bytes / (local_mem_gbps * 1e9) * 1e9)


@dataclasses.dataclass(frozen=True)
class StepCosts:
    """Per-round delays: endpoint delay, local memory bandwidth for reductions."""

    endpoint_delay_ns: int
    local_mem_gbps: float

    def after(self, size_bytes: int, *, reduces: bool, num_reductions: int = 1) -> int:
        red = num_reductions * reduction_ns(size_bytes, self.local_mem_gbps) if reduces else 0
        return self.endpoint_delay_ns + red


def _ring_pairs(lines: Sequence[Sequence[int]]) -> tuple[Pair, ...]:
    return tuple((line[i], line[(i + 1) % len(line)]) for line in lines for i in range(len(line)))


def _xor_pairs(lines: Sequence[Sequence[int]], distance: int) -> tuple[Pair, ...]:
    return tuple((line[i], line[i ^ distance]) for line in lines for i in range(len(line)))


def _all_pairs(lines: Sequence[Sequence[int]]) -> tuple[Pair, ...]:
    return tuple((a, b) for line in lines for a in line for b in line if a != b)


def _tree_pairs(lines: Sequence[Sequence[int]], level: int, up: bool) -> tuple[Pair, ...]:
    """Child→parent (or parent→child) pairs of level ``level`` of two mirrored heaps."""
    pairs: list[Pair] = []
    for line in lines:
        n = len(line)
        for order in (line, line[::-1]):
            for i in range(2 ** level - 1, min(2 ** (level + 1) - 1, n)):
                child, parent = order[i], order[(i - 1) // 2]
                pairs.append((child, parent) if up else (parent, child))
    return tuple(pairs)


def phase_rounds(op: int, algorithm: int, lines: Sequence[Sequence[int]], data_bytes: int,
                 costs: StepCosts) -> tuple[Round, ...]:
    """Rounds of one ``op`` over ``lines`` of n NPUs with ``data_bytes`` entering.

    Message sizes follow ASTRA-sim: D/n (integer division) for all-reduce,
    reduce-scatter and all-to-all; the whole shard D for all-gather.

    Raises:
        UnsupportedCollective: halving-doubling on a group that is not a power
            of two, or double binary tree for anything but all-reduce.
    """
    n = len(lines[0])
    msg = data_bytes // n
    reduce_, plain = costs.after(msg, reduces=True), costs.after(msg, reduces=False)
    if algorithm == DIRECT_ALG:
        pairs = _all_pairs(lines)
        if op == ALL_REDUCE:
            return (Round(pairs, msg, costs.after(msg, reduces=True, num_reductions=n - 1)), Round(pairs, msg, plain))
        if op == REDUCE_SCATTER:
            return (Round(pairs, msg, costs.after(msg, reduces=True, num_reductions=n - 1)),)
        return (Round(pairs, data_bytes if op == ALL_GATHER else msg, costs.endpoint_delay_ns),)
    if algorithm == HD_ALG:
        return _halving_doubling(op, lines, data_bytes, costs)
    if algorithm == DBT_ALG:
        if op != ALL_REDUCE:
            raise UnsupportedCollective("double binary tree only runs all-reduce")
        half = data_bytes // 2
        depth = max(1, math.ceil(math.log2(n)))
        up = tuple(Round(_tree_pairs(lines, lvl, True), half, costs.after(half, reduces=True))
                   for lvl in range(depth - 1, -1, -1))
        down = tuple(Round(_tree_pairs(lines, lvl, False), half, costs.endpoint_delay_ns) for lvl in range(depth))
        return up + down
    pairs = _ring_pairs(lines)
    if op == ALL_REDUCE:
        return (Round(pairs, msg, reduce_, n - 1), Round(pairs, msg, plain, n - 1))
    if op == REDUCE_SCATTER:
        return (Round(pairs, msg, reduce_, n - 1),)
    if op == ALL_GATHER:
        return (Round(pairs, data_bytes, costs.endpoint_delay_ns, n - 1),)
    return (Round(pairs, msg, plain, n * (n - 1) // 2),)


def _halving_doubling(op: int, lines: Sequence[Sequence[int]], data_bytes: int,
                      costs: StepCosts) -> tuple[Round, ...]:
    """Recursive halving (RS: far peer first, half the data each step), then
    recursive doubling (AG: near peer first, twice the data each step)."""
    n = len(lines[0])
    if n & (n - 1):
        raise UnsupportedCollective(f"halving-doubling needs a power-of-two group, got {n} NPUs")
    steps = n.bit_length() - 1
    if op == ALL_TO_ALL:
        half = data_bytes // 2
        return tuple(Round(_xor_pairs(lines, 1 << k), half, costs.endpoint_delay_ns) for k in range(steps))
    rs: list[Round] = []
    size = data_bytes
    for k in range(steps - 1, -1, -1):
        size //= 2
        rs.append(Round(_xor_pairs(lines, 1 << k), size, costs.after(size, reduces=True)))
    shard = data_bytes if op == ALL_GATHER else size
    ag = [Round(_xor_pairs(lines, 1 << k), shard << k, costs.endpoint_delay_ns) for k in range(steps)]
    if op == REDUCE_SCATTER:
        return tuple(rs)
    if op == ALL_GATHER:
        return tuple(ag)
    return tuple(rs + ag)


def _algorithm(per_dim: Sequence[int], dim: int) -> int:
    if dim < 0 or not per_dim:
        return RING_ALG
    return per_dim[dim]


def plan_chunk(group: Group, kind: int, chunk_bytes: int, *, algorithms: dict[int, Sequence[int]],
               is_local_bw_aware: bool, costs: StepCosts) -> list[Phase]:
    """Phases of one chunk of a collective, in ASTRA-sim's dimension order.

    RS and A2A go up the dimensions, AG down; AR is AR in every dimension
    (baseline) or, with localBWAware, RS up to the second-to-last dimension,
    AR in the last, AG back down. A flat group runs one ring.
    """
    if group.size < 2:
        return []
    dims = list(group.dims)
    steps: list[tuple[int, int]]  # (dim, op)
    if kind in (REDUCE_SCATTER, ALL_TO_ALL):
        steps = [(d, kind) for d in dims]
    elif kind == ALL_GATHER:
        steps = [(d, kind) for d in reversed(dims)]
    elif is_local_bw_aware and len(dims) > 1:
        steps = ([(d, REDUCE_SCATTER) for d in dims[:-1]] + [(dims[-1], ALL_REDUCE)]
                 + [(d, ALL_GATHER) for d in reversed(dims[:-1])])
    else:
        steps = [(d, ALL_REDUCE) for d in dims]
    phases: list[Phase] = []
    data = chunk_bytes
    for dim, op in steps:
        lines = group.lines[dim]
        per_dim = algorithms.get(op, ())
        algorithm = RING_ALG if group.is_flat else _algorithm(per_dim, dim)
        phases.append(Phase(dim, phase_rounds(op, algorithm, lines, data, costs)))
        n = len(lines[0])
        data = data // n if op == REDUCE_SCATTER else data * n if op == ALL_GATHER else data
    return phases


def phase_ns(topology: Topology, phase: Phase, endpoint_delay_ns: int) -> int:
    """Congestion-unaware time of a phase: each round waits for its slowest
    cut-through send; one endpoint delay closes the phase."""
    total = endpoint_delay_ns
    for r in phase.rounds:
        wire = max(topology.send_ns(src, dst, r.size_bytes) for src, dst in r.pairs)
        total += r.repeat * (wire + r.delay_ns)  # delay_ns holds the endpoint delay and reduction
    return total
