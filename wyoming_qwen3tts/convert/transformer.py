"""The Qwen3 decoder layer shared by the talker and the code predictor (docs/MODEL.md §3.2).

    x += o_proj(attn(RoPE(q_norm(q_proj(rms(x)))), RoPE(k_norm(k_proj(rms(x)))), v_proj(rms(x))))
    x += down(silu(gate(rms(x))) * up(rms(x)))

How past keys/values are kept differs by graph (stateful → paged for the talker, plain
in-graph tensors for the code predictor's 15 steps), so it is a callback.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import openvino as ov
from openvino import opset13 as op

from ..model.checkpoint import TensorStore
from ..model.spec import LayerStackSpec
from .ops import (
    Weights,
    apply_rope,
    explicit_attention,
    i64,
    linear,
    merge_heads,
    repeat_kv,
    rms_norm,
    split_heads,
    swiglu,
    to_bhtd,
)

# (layer index, new keys [B,Hkv,T,D], new values) -> (all keys, all values) incl. the past
KVCache = Callable[[int, ov.Output, ov.Output], tuple[ov.Output, ov.Output]]


@dataclass
class LayerWeights:
    """One layer's weights; q/k/v and gate/up are stored as one matrix each, so a step makes
    3 matrix products per layer instead of 7 (each output row is the same dot product as
    with separate matrices)."""

    input_norm: ov.Output
    qkv: ov.Output  # [q; k; v] rows
    o: ov.Output
    q_norm: ov.Output
    k_norm: ov.Output
    post_norm: ov.Output
    gate_up: ov.Output  # [gate; up] rows
    down: ov.Output

    @classmethod
    def load(cls, store: TensorStore, prefix: str, weights: Weights) -> LayerWeights:
        def w(*names: str) -> ov.Output:
            return weights(np.concatenate([store.get(prefix + name) for name in names]))

        def norm(name: str) -> ov.Output:  # norms stay f32: tiny and precision-sensitive
            return op.constant(store.get(prefix + name)).output(0)

        return cls(norm("input_layernorm.weight"),
                   w("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
                   w("self_attn.o_proj.weight"), norm("self_attn.q_norm.weight"), norm("self_attn.k_norm.weight"),
                   norm("post_attention_layernorm.weight"), w("mlp.gate_proj.weight", "mlp.up_proj.weight"),
                   w("mlp.down_proj.weight"))


def decoder_layer(x: ov.Output, lw: LayerWeights, s: LayerStackSpec, cos: ov.Output, sin: ov.Output,
                  layer: int, cache: KVCache, causal: bool, fused: bool = True) -> ov.Output:
    """One pre-norm layer on x [B, T, H].

    fused=True writes attention and RoPE in the forms the plugins fuse (the paged-attention
    pass needs the ScaledDotProductAttention). fused=False spells both out as plain ops
    (MatMul/Softmax, Gather-based rotate_half): the code predictor needs that, because the
    CPU plugin's fused RoPE gave wrong codes with its constant positions (OpenVINO
    2026.4.1, seen only after an IR round trip), and over ≤16 positions it costs nothing."""
    h = rms_norm(x, lw.input_norm, s.rms_norm_eps)
    q_width, kv_width = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
    q, k, v = op.variadic_split(linear(h, lw.qkv), i64(-1), i64([q_width, kv_width, kv_width])).outputs()
    q = apply_rope(to_bhtd(rms_norm(split_heads(q, s.num_heads, s.head_dim), lw.q_norm, s.rms_norm_eps)),
                   cos, sin, s.head_dim, fused)
    k = apply_rope(to_bhtd(rms_norm(split_heads(k, s.num_kv_heads, s.head_dim), lw.k_norm, s.rms_norm_eps)),
                   cos, sin, s.head_dim, fused)
    v = to_bhtd(split_heads(v, s.num_kv_heads, s.head_dim))
    k_all, v_all = cache(layer, k, v)
    groups = s.num_heads // s.num_kv_heads
    k_all = repeat_kv(k_all, groups, s.num_heads, s.head_dim)
    v_all = repeat_kv(v_all, groups, s.num_heads, s.head_dim)
    scale = op.constant(np.float32(1.0 / np.sqrt(s.head_dim)))
    if fused:
        attn = op.scaled_dot_product_attention(q, k_all, v_all, scale=scale, causal=causal)
    else:
        attn = explicit_attention(q, k_all, v_all, scale, causal)
    x = op.add(x, linear(merge_heads(attn, s.num_heads * s.head_dim), lw.o))
    h = rms_norm(x, lw.post_norm, s.rms_norm_eps)
    return op.add(x, swiglu(h, lw.gate_up, lw.down)).output(0)
