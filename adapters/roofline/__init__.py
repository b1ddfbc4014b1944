"""Roofline runtime backend: BestServe's adapted roofline (seeds/003 §3.3).

A step's time is the sum over decoder layers of RMSNorm, attention (GQA
projections, RoPE, QK^T, softmax, .V, O) and gated-MLP (or MoE) operators,
each timed by the adapted roofline ``max(W/(e_c S_c), Q/(e_m S_m))``, with
CPU dispatch overlapped as in BestServe Algorithm 1, TP all-reduces
(formula 8), MoE all-to-alls, pipeline-stage sends, embedding and LM head.
``docs/roofline.md`` gives the model, ``operators`` the W/Q tables.

Parameters (``params`` module; each from, later winning: defaults < the
device's link (below) < profile < ``HardwareSpec.extra[key]`` <
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
``profile`` (options only)                ``auto`` (shipped profile matching the device),
                                          ``none``, a shipped name, or a YAML path
=======================================  ==========================================

Device figures come from the ``HardwareSpec``: ``peak_tflops`` (S_c),
``mem_bandwidth_gbps`` (S_m), ``intra_node_gbps`` (S_+), ``inter_node_gbps``
and ``devices_per_node``. A zero peak or bandwidth is an unknown device and
is rejected with INVALID_ARGUMENT. When ``HardwareSpec.extra`` also describes
the intra-node link (``intra_node_bus_efficiency``, ``intra_node_latency_us``,
``intra_node_hop_latency_us``; the hub's device presets fill them) and no
profile applies, collectives follow NCCL's ring model on that link: formula
``ring``, ``comm_eff`` = the bus efficiency, the latencies as given
(:mod:`.collectives`).
"""

from .backend import RooflineBackend, open_model
from .estimator import SessionModel, estimate
from .operators import batch_stats
from .params import Params, PhaseParams, load_profile, resolve_params

__all__ = [
    "Params", "PhaseParams", "RooflineBackend", "SessionModel", "batch_stats", "estimate", "load_profile",
    "open_model", "resolve_params",
]

