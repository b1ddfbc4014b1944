"""Roofline runtime backend: fitted kernel efficiencies per GPU family, or BestServe's roofline.

A step's time is the sum over decoder layers of RMSNorm, attention (GQA
projections, RoPE, KV write, FlashAttention, O) and gated-MLP (or MoE)
operators, plus embedding, LM head and sampler, TP all-reduces, MoE
all-to-alls and pipeline-stage sends. By default (``profile: auto``) each
kernel is timed by the fitted model of :mod:`.kernels` with its family's
parameters (:mod:`.fitted`, fitted by :mod:`.fit`), and the host follows
the execution mode (vLLM V1's CUDA graphs). ``profile: bestserve`` times
each operator by BestServe's adapted roofline ``max(W/(e_c S_c), Q/(e_m
S_m))`` at its phase's efficiencies, with CPU dispatch overlapped as in
BestServe Algorithm 1 (seeds/003 §3.3). ``docs/roofline.md`` gives both
models, ``operators`` the W/Q tables.

Parameters (``params`` module; each from, later winning: defaults (BestServe's)
< the device's link (below) < profile < ``HardwareSpec.extra[key]`` <
``SessionSpec.options[key]``):

=======================================  ==========================================
key                                       meaning (default, source)
=======================================  ==========================================
``mfu[_prefill|_decode]``                 e_c, MFU (0.65; BestServe §4.1)
``mbu[_prefill|_decode]``                 e_m, MBU (0.6 / 0.3; BestServe §4.1)
``comm_eff[_prefill|_decode]``            e_+, formula-8 efficiency (0.6 / 0.3; §4.1)
``dispatch_norm_us[_phase]``              CPU dispatch per RMSNorm (24 µs; Table 3)
``dispatch_attention_us[_phase]``         CPU dispatch per attention (190 µs; Table 3)
``dispatch_mlp_us[_phase]``               CPU dispatch per MLP/MoE (41 µs; Table 3)
``dispatch_head_us[_phase]``              CPU dispatch of embedding + LM head (0)
``step_overhead_us[_phase]``              host time per step, e.g. scheduling (0)
``kernels``                               ``fused`` (vLLM-style; default) or ``eager`` (BestServe tables)
``allreduce_formula``                     ``bestserve`` (formula 8) or ``ring``
``allreduce_latency_us``                  latency per all-reduce (0)
``alltoall_latency_us``                   latency per MoE all-to-all (0)
``hop_latency_us``                        latency per collective step (0): 2(t-1) per ring
                                          all-reduce, t-1 per all-to-all
``p2p_latency_us``                        latency per pipeline-stage send (0)
``act_bytes``                             bytes per activation element (2)
``tdp_w`` (options only)                  report energy = tdp_w x devices x duration (0: none; the
                                          hub's power model applies, docs/energy.md)
``op_model``                              ``phase`` (BestServe) or ``fitted`` (the kernel model)
``execution``                             ``eager`` (Algorithm 1 dispatch), ``graphs`` or ``piecewise``
``graph_step_us``, ``piecewise_layer_us`` host time under graphs (0)
``eager_comm_eff``                        all-reduce bus efficiency under eager (0: ``comm_eff``)
``eager_comm_knee_mib``,                  under eager, all-reduce bytes beyond this many MiB per rank
``eager_comm_eff_large``                  move at this efficiency (0: no knee)
``eager_seq_us``                          host time per sequence of a step under eager (0)
``eager_overlap``                         share of the eager dispatch the device hides (1: Algorithm 1;
                                          0: host and device take turns)
``graph_allreduce_*``                     vLLM's custom all-reduce under graphs (0: off)
``gemm_*``, ``attn_*``, ``elem_*``,       fitted kernel parameters (:mod:`.kernels`)
``sampler_us``
``profile`` (options only)                ``auto`` / ``fitted`` (default: the device's family in
                                          ``profiles/fitted.yaml``), ``bestserve`` / ``none``
                                          (the defaults above), a shipped name, or a YAML path
``family`` (options only)                 the fitted family to use (default: the device's)
=======================================  ==========================================

Device figures come from the ``HardwareSpec``: ``peak_tflops`` (S_c),
``mem_bandwidth_gbps`` (S_m), ``intra_node_gbps`` (S_+), ``inter_node_gbps``
and ``devices_per_node``. A zero peak or bandwidth is an unknown device and
is rejected with INVALID_ARGUMENT. When ``HardwareSpec.extra`` also describes
the intra-node link (``intra_node_bus_efficiency``, ``intra_node_latency_us``,
``intra_node_hop_latency_us``; the hub's device presets fill them) and the
profile is the fitted one or BestServe's, collectives follow NCCL's ring model
on that link: formula ``ring``, ``comm_eff`` = the bus efficiency, the
latencies as given (:mod:`.collectives`).
"""

from .backend import RooflineBackend, open_model
from .estimator import SessionModel, estimate
from .operators import batch_stats
from .params import Params, PhaseParams, load_profile, resolve_params

__all__ = [
    "Params", "PhaseParams", "RooflineBackend", "SessionModel", "batch_stats", "estimate", "load_profile",
    "open_model", "resolve_params",
]

