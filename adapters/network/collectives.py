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
(recursive halving then doubling; power-of-two groups; not all-to-all) and double binary tree
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
    """Every ordered pair; each NPU sends to the next peer along the line first, then the one after
    (ASTRA-sim's direct order), so in the congestion-aware mode no two NPUs send to one peer at once."""
    return tuple((line[i], line[(i + k) % len(line)]) for line in lines for i in range(len(line))
                 for k in range(1, len(line)))


def _tree_edges(n: int) -> list[tuple[int, int, int]]:
    """(parent, child, child's depth) of ASTRA-sim's ``BinaryTree`` (RootMax) over positions 0..n-1.

    The root (position n-1) has one child, the root of a complete binary tree
    over positions 0..n-2 numbered in order (``BinaryTree::build_tree``): a
    node at height h has its children h/2 positions either side.
    """
    edges = [(n - 1, n // 2 - 1, 1)]
    stack = [(n // 2 - 1, n // 4, 1)]  # (position, distance to its children, depth)
    while stack:
        position, step, depth = stack.pop()
        if step:
            for child in (position - step, position + step):
                edges.append((position, child, depth + 1))
                stack.append((child, step // 2, depth + 1))
    return edges


def _tree_pairs(lines: Sequence[Sequence[int]], depth: int, up: bool) -> tuple[Pair, ...]:
    """Child→parent (or parent→child) pairs of the tree edges whose child is at ``depth``."""
    edges = [(p, c) for p, c, d in _tree_edges(len(lines[0])) if d == depth]
    return tuple((line[c], line[p]) if up else (line[p], line[c]) for line in lines for p, c in edges)


def phase_rounds(op: int, algorithm: int, lines: Sequence[Sequence[int]], data_bytes: int,
                 costs: StepCosts) -> tuple[Round, ...]:
    """Rounds of one ``op`` over ``lines`` of n NPUs with ``data_bytes`` entering.

    Message sizes follow ASTRA-sim: D/n (integer division) for all-reduce,
    reduce-scatter and all-to-all; the whole shard D for all-gather.

    Raises:
        UnsupportedCollective: halving-doubling on a group that is not a power
            of two or for all-to-all, or double binary tree for anything but
            all-reduce.
    """
    n = len(lines[0])
    msg = data_bytes // n
    reduce_, plain = costs.after(msg, reduces=True), costs.after(msg, reduces=False)
    if algorithm == DIRECT_ALG:
        # ASTRA-sim reduces the n-1 incoming messages in parallel: one reduction on the critical path.
        pairs = _all_pairs(lines)
        if op == ALL_REDUCE:
            return (Round(pairs, msg, reduce_), Round(pairs, msg, plain))
        if op == REDUCE_SCATTER:
            return (Round(pairs, msg, reduce_),)
        return (Round(pairs, data_bytes if op == ALL_GATHER else msg, costs.endpoint_delay_ns),)
    if algorithm == HD_ALG:
        return _halving_doubling(op, lines, data_bytes, costs)
    if algorithm == DBT_ALG:
        if op != ALL_REDUCE:
            raise UnsupportedCollective("double binary tree only runs all-reduce")
        if n & (n - 1):
            raise UnsupportedCollective(f"double binary tree needs a power-of-two group, got {n} NPUs")
        # ASTRA-sim's DoubleBinaryTreeAllReduce: the whole chunk goes up one tree (reduced at each
        # parent) and back down; its two trees alternate between chunks, mirror images of each other.
        # A parent reduces what each child sends: two children below depth 1, one at the root.
        depth = n.bit_length() - 1
        up = tuple(Round(_tree_pairs(lines, d, True), data_bytes,
                         costs.after(data_bytes, reduces=True, num_reductions=1 if d == 1 else 2))
                   for d in range(depth, 0, -1))
        down = tuple(Round(_tree_pairs(lines, d, False), data_bytes, costs.endpoint_delay_ns)
                     for d in range(1, depth + 1))
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
    """Recursive halving (RS: near peer first, half the data each step), then
    recursive doubling (AG: far peer first, twice the data each step), in
    ASTRA-sim's order (``HalvingDoubling.cc``: the rank offset starts at 1 and
    doubles for RS, starts at n/2 and halves for AG). The order does not change
    congestion-unaware times; it does the congestion-aware ones, where a far
    peer is several store-and-forward hops away on a ring."""
    n = len(lines[0])
    if n & (n - 1):
        raise UnsupportedCollective(f"halving-doubling needs a power-of-two group, got {n} NPUs")
    if op == ALL_TO_ALL:
        raise UnsupportedCollective("halving-doubling does not run all-to-all (ASTRA-sim exits on it)")
    steps = n.bit_length() - 1
    rs: list[Round] = []
    size = data_bytes
    for k in range(steps):
        size //= 2
        # ASTRA-sim's first packet is a "zero-latency" one, sent unreduced: the first step reduces nothing.
        rs.append(Round(_xor_pairs(lines, 1 << k), size, costs.after(size, reduces=k > 0)))
    shard = data_bytes if op == ALL_GATHER else size
    ag = [Round(_xor_pairs(lines, 1 << k), shard << j, costs.endpoint_delay_ns)
          for j, k in enumerate(range(steps - 1, -1, -1))]
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
    # Every phase takes the collective's own algorithm for its dimension: the RS and AG phases of a
    # localBWAware all-reduce run all-reduce-implementation's, as ASTRA-sim's Sys::generate_collective.
    per_dim = algorithms.get(kind, ())
    for dim, op in steps:
        lines = group.lines[dim]
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
