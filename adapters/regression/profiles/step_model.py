"""Step times composed from an LLMServingSim v2 profile bundle.

One iteration is, as in LLMServingSim's ``trace_generator``::

    embedding + L x (block layers, attention once) + final_layernorm + lm_head + sampler

with dense layers looked up at the batch's total tokens, ``lm_head`` and
``sampler`` at its number of sequences, attention on the merged batch
(prefill chunks summed into one pseudo-chunk, histories summed, decodes at
their mean KV length with the bundle's skew correction toward the max), and
the MoE block at the tokens and distinct experts that reach one EP rank.

On top of the profiled kernel times (which contain no collective and no host
work) this model adds:

- TP all-reduce after ``o_proj`` and ``down_proj``/``moe`` (message
  ``tokens x hidden x 2 B``) and, with EP > 1, the all-gather and
  reduce-scatter of hidden states around each MoE block (vLLM's default
  ``allgather_reducescatter`` all2all backend), both timed by NCCL's ring
  model (:mod:`cosim.adapters.roofline.collectives`) on the device's
  intra-node link: its bandwidth, bus efficiency, latency and hop latency
  come from the session's hardware (the device preset, each figure cited
  there), unless the ``link_*`` options set them. Between GPUs without
  NVLink, the device's path (``intra_node_path``: PCIe peer to peer or
  staged through host memory) times them instead, by NCCL's faster
  protocol on that path (:func:`~cosim.adapters.roofline.collectives.path_all_reduce_ns`).

Main name: :class:`ProfileStepModel`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cosim.adapters.roofline.collectives import (
    HOST_STAGED_BUS_GBPS,
    HOST_STAGED_LATENCY_US,
    PathLink,
    all_reduce_ns,
    all_to_all_ns,
    path_all_reduce_ns,
    path_all_to_all_ns,
    path_link,
)
from cosim.v1 import types_pb2 as pb

from .bundle import ProfileTables

NS_PER_US = 1000.0


@dataclass(frozen=True)
class ProfileOptions:
    """Session knobs of the profile-bundle predictor.

    Attributes:
        link_gbps: per-direction bandwidth of the link collectives cross, GB/s.
        link_bus_efficiency: share of it a collective's bus bandwidth reaches.
        link_latency_us: fixed time of one collective.
        link_hop_latency_us: time of one ring step.
        link_path: ``ring`` (NCCL's ring model on the figures above), or the path between GPUs
            without NVLink (``p2p``, ``switch``, ``host_staged``) whose figures follow.
        link_path_latency_us: fixed time of an LL collective over PCIe peer to peer.
        link_path_bus_efficiency: Simple-protocol bus bandwidth over PCIe peer to peer, as a share
            of ``link_gbps``.
        link_host_staged_gbps: Simple-protocol bus bandwidth through host memory, GB/s.
        link_host_staged_latency_us: fixed time of an LL collective through host memory.
        skew: apply the bundle's skew correction (when the bundle enables it).
    """

    link_gbps: float = 16.0
    link_bus_efficiency: float = 1.0
    link_latency_us: float = 0.0
    link_hop_latency_us: float = 0.0
    link_path: str = "ring"
    link_path_latency_us: float = 0.0
    link_path_bus_efficiency: float = 1.0
    link_host_staged_gbps: float = HOST_STAGED_BUS_GBPS
    link_host_staged_latency_us: float = HOST_STAGED_LATENCY_US
    skew: bool = True

    def path(self) -> PathLink | None:
        """The link's path for NCCL's protocol model; None for the ring model."""
        if self.link_path == "ring":
            return None
        return path_link(self.link_path, self.link_gbps, latency_us=self.link_path_latency_us,
                         bus_efficiency=self.link_path_bus_efficiency, host_staged_gbps=self.link_host_staged_gbps,
                         host_staged_latency_us=self.link_host_staged_latency_us)


@dataclass(frozen=True)
class ModelShape:
    """What the composition needs from the session's ModelSpec and Parallelism."""

    num_layers: int
    hidden_size: int
    num_experts: int
    experts_per_token: int
    tp: int
    ep: int


def activated_experts(picks: float, experts: int) -> float:
    """Expected distinct experts hit by ``picks`` uniform draws among ``experts``."""
    if experts <= 0 or picks <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - 1.0 / experts) ** picks)


class ProfileStepModel:
    """Predicts step times from one bundle at one TP degree (see module docstring)."""

    def __init__(self, tables: ProfileTables, shape: ModelShape, options: ProfileOptions) -> None:
        self.tables, self.shape, self.options = tables, shape, options
        order = tables.order
        cat = order.categories
        self._dense_block = [tables.dense[x] for x in order.block if cat.get(x) == "dense"]
        self._dense_outer = [tables.dense[x] for x in order.prologue + order.head if cat.get(x) == "dense"]
        self._per_seq = [tables.per_sequence[x] for x in order.prologue + order.block + order.head
                         if cat.get(x) == "per_sequence"]
        self._num_attention = sum(1 for x in order.block if cat.get(x) == "attention")
        self._num_moe = sum(1 for x in order.block if cat.get(x) == "moe")
        self._token_bytes = shape.hidden_size * 2  # bf16 activations
        self._path = options.path()

    # -- parts -----------------------------------------------------------------
    def _attention_us(self, new_tokens: Sequence[int], context_tokens: Sequence[int]) -> float:
        pc = kvp = 0
        decode_kvs: list[int] = []
        for new, ctx in zip(new_tokens, context_tokens):
            if new > 1:
                pc += new
                kvp += ctx
            else:
                decode_kvs.append(ctx)
        nd = len(decode_kvs)
        kv_mean = sum(decode_kvs) // nd if nd else 0
        table = self.tables.attention
        t_mean = table(pc, kvp, nd, kv_mean)
        skew = self.tables.skew
        if skew is None or not self.options.skew or nd < 2:
            return t_mean
        kv_min, kv_max = min(decode_kvs), max(decode_kvs)
        if kv_max == kv_min:
            return t_mean
        alpha = skew.alpha(pc, nd, kv_min, kv_mean, kv_max, kvp)
        if alpha == 0.0:
            return t_mean
        return t_mean + alpha * (table(pc, kvp, nd, kv_max) - t_mean)

    def _moe_us(self, tokens: int) -> float:
        shape, moe = self.shape, self.tables.moe
        if moe is None or not self._num_moe:
            return 0.0
        # Balanced EP: after the all-gather each rank routes every rank's tokens to its
        # own experts; with equal DP batches its expert work equals `tokens` tokens on
        # E/ep experts, so the profile is keyed by the local tokens and the distinct
        # local experts they hit.
        per_rank = max(1, shape.num_experts // shape.ep) if shape.num_experts else 128
        picks = tokens * max(1, shape.experts_per_token)
        experts = max(1.0, activated_experts(picks, per_rank))
        return self._num_moe * moe(tokens, experts)

    def _collectives_us(self, tokens: int) -> float:
        shape, opts = self.shape, self.options
        message = tokens * self._token_bytes
        total = 0.0
        if self._path is not None:  # between GPUs without NVLink: NCCL's faster protocol on the path
            if shape.tp > 1:
                total += 2 * path_all_reduce_ns(message, shape.tp, self._path)
            if shape.ep > 1 and self._num_moe:
                total += 2 * path_all_to_all_ns(shape.ep * message, shape.ep, self._path)
            return shape.num_layers * total / NS_PER_US
        bus, latency, hop = (opts.link_gbps * opts.link_bus_efficiency * 1e9, opts.link_latency_us,
                             opts.link_hop_latency_us)
        if shape.tp > 1:  # all-reduce after o_proj and after the MLP
            total += 2 * all_reduce_ns(message, shape.tp, bus, latency_us=latency, hop_latency_us=hop)
        if shape.ep > 1 and self._num_moe:  # all-gather before, reduce-scatter after each MoE block
            total += 2 * all_to_all_ns(shape.ep * message, shape.ep, bus, latency_us=latency, hop_latency_us=hop)
        return shape.num_layers * total / NS_PER_US

    # -- the step -----------------------------------------------------------------
    def predict(self, new_tokens: list[int], context_tokens: list[int], *, padded_tokens: int = 0) -> pb.StepTiming:
        """Timing of one batch: ``new_tokens[i]`` computed after ``context_tokens[i]`` in KV.

        ``padded_tokens``: in data-parallel lock-step, vLLM pads every rank's forward to the most
        tokens of any rank; the padding rows run the token-wise layers, the MoE block and the
        collectives, not attention or the LM head.
        """
        if not new_tokens:
            return pb.StepTiming(duration_ns=0)
        layers = self.shape.num_layers
        tokens, seqs = max(sum(new_tokens), padded_tokens), len(new_tokens)
        dense = layers * sum(c(tokens) for c in self._dense_block) + sum(c(tokens) for c in self._dense_outer)
        attention = layers * self._num_attention * self._attention_us(new_tokens, context_tokens)
        moe = layers * self._moe_us(tokens)
        head = sum(c(seqs) for c in self._per_seq)
        comm = self._collectives_us(tokens)
        compute = dense + attention + moe + head
        total = compute + comm
        out_of_range = tokens > self.tables.max_num_batched_tokens or seqs > self.tables.max_num_seqs
        return pb.StepTiming(
            duration_ns=max(0, int(math.ceil(total * NS_PER_US))), compute_ns=int(compute * NS_PER_US),
            communication_ns=int(comm * NS_PER_US), out_of_range=out_of_range,
            breakdown={"dense": dense * NS_PER_US, "attention": attention * NS_PER_US, "moe": moe * NS_PER_US,
                       "lm_head_sampler": head * NS_PER_US, "collectives": comm * NS_PER_US})
