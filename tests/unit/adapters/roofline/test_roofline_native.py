"""The compiled roofline (core/src/roofline) against a step timed by hand."""

from __future__ import annotations

import pytest

from cosim.adapters.roofline import batch_stats, estimate, open_model
from cosim.adapters.sdk import InvalidArgument
from tests.unit.adapters.roofline.roofline_helpers import make_spec

# One layer of one 128-wide head, a 256-wide gated MLP, 1000 tokens of vocabulary, on a device of
# 1 TFLOP/s and 1 TB/s at full efficiency: every operator takes max(W, Q) / 1000 ns.
TINY = dict(name="tiny", num_layers=1, hidden_size=128, num_attention_heads=1, num_kv_heads=1, intermediate_size=256,
            vocab_size=1000, bytes_per_param=2, bytes_per_kv_element=2, gated_mlp=True)
DEVICE = dict(device="unit", peak_tflops=1.0, mem_bandwidth_gbps=1000.0, intra_node_gbps=100.0, devices_per_node=8)
OPTIONS = dict(mfu=1.0, mbu=1.0, dispatch_norm_us=0, dispatch_attention_us=0, dispatch_mlp_us=0)

# One decode after 99 cached tokens (L = 100), fused kernels, (W, Q) per operator:
HAND = {
    "norm": [(5 * 128, 4 * 2 * 128 + 2 * 128)] * 3,                            # in, post, final
    "qkv_proj": [(2 * 128 * 384, 2 * (128 + 384) + 2 * 128 * 384)],
    "rope": [(3 * 256, 2 * 2 * 256)],
    "kv_update": [(0, 2 * 2 * 128)],
    "attention": [(4 * 100 * 128, 2 * 2 * 128 + 2 * 2 * 100 * 128)],           # causal pairs 100
    "o_proj": [(2 * 128 * 128, 2 * 256 + 2 * 128 * 128)],
    "mlp_gate_up": [(2 * 128 * 512, 2 * 640 + 2 * 128 * 512)],
    "mlp_act": [(6 * 256, 3 * 2 * 256)],                                       # a tie: compute bound
    "mlp_down": [(2 * 256 * 128, 2 * 384 + 2 * 256 * 128)],
    "embedding": [(0, (2 + 2) * 128)],
    "lm_head": [(2 * 128 * 1000, 2 * 1128 + 2 * 128 * 1000)],
}


def test_a_decode_step_takes_the_hand_computed_time() -> None:
    model = open_model(make_spec(model=TINY, hardware=DEVICE, options=OPTIONS))
    timing = estimate(model, batch_stats([1], [99]))
    per_key = {key: sum(max(w, q) / 1000 for w, q in ops) for key, ops in HAND.items()}
    total = sum(per_key.values())  # 648.656 ns: no dispatch, so Algorithm 1 adds the modules up
    assert total == pytest.approx(648.656)
    assert timing.duration_ns == round(total) == 649
    assert timing.compute_ns == 2 and timing.memory_ns == 647  # mlp_act's 1.536 ns alone is compute bound
    assert timing.communication_ns == 0 and timing.dispatch_ns == 0
    assert set(timing.breakdown) == set(per_key) | {"dispatch"}
    for key, ns in per_key.items():
        assert timing.breakdown[key] == pytest.approx(ns, abs=1e-9), key


def test_batch_fields_of_the_wrong_length_name_the_field() -> None:
    model = open_model(make_spec(model=TINY, hardware=DEVICE, options=OPTIONS))
    with pytest.raises(InvalidArgument, match="batch.draft_tokens") as err:
        model.native.predict_batch([1, 1], [5, 5], [], [0], [], [])
    assert err.value.value == 1
    with pytest.raises(InvalidArgument, match="batch.lora_ids"):
        model.native.predict_batch([1, 1], [5, 5], [], [], [8, 8], [1])
