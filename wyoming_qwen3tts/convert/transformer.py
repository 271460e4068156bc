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

from ..model.spec import LayerStackSpec
from .expr import T, op
from .ops import Params, apply_rope, explicit_attention, linear, merge_heads, repeat_kv, rms_norm, split_heads, swiglu

# (layer index, new keys [B,Hkv,T,D], new values) -> (all keys, all values) incl. the past
KVCache = Callable[[int, T, T], tuple[T, T]]


@dataclass
class LayerWeights:
    """One layer's weights; q/k/v and gate/up are stored as one matrix each, so a step makes
    3 matrix products per layer instead of 7 (each output row is the same dot product as
    with separate matrices). Norms stay f32: tiny and precision-sensitive."""

    input_norm: T
    qkv: T  # [q; k; v] rows
    o: T
    q_norm: T
    k_norm: T
    post_norm: T
    gate_up: T  # [gate; up] rows
    down: T

    @classmethod
    def load(cls, p: Params) -> LayerWeights:
        def stacked(*names: str) -> T:
            return p.weights(np.concatenate([p.array(f"{name}.weight") for name in names]))

        attn = p.self_attn
        return cls(p.input_layernorm.const(), stacked("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                   attn.o_proj.matrix(), attn.q_norm.const(), attn.k_norm.const(), p.post_attention_layernorm.const(),
                   stacked("mlp.gate_proj", "mlp.up_proj"), p.mlp.down_proj.matrix())


def decoder_layer(x: T, lw: LayerWeights, s: LayerStackSpec, cos: T, sin: T, layer: int, cache: KVCache,
                  causal: bool, fused: bool = True) -> T:
    """One pre-norm layer on x [B, T, H].

    fused=True writes attention and RoPE in the forms the plugins fuse (the paged-attention
    pass needs the ScaledDotProductAttention). fused=False spells both out as plain ops
    (MatMul/Softmax, Gather-based rotate_half): the code predictor needs that, because the
    CPU plugin's fused RoPE gave wrong codes with its constant positions (OpenVINO
    2026.4.1, seen only after an IR round trip), and over ≤16 positions it costs nothing."""
    d, eps = s.head_dim, s.rms_norm_eps

    def heads(t: T, n: int, norm: T) -> T:  # [B, T, n·D] -> normed per head, rotated [B, n, T, D]
        return apply_rope(rms_norm(split_heads(t, n, d), norm, eps).transpose(0, 2, 1, 3), cos, sin, d, fused)

    q, k, v = linear(rms_norm(x, lw.input_norm, eps), lw.qkv).split(
        [s.num_heads * d, s.num_kv_heads * d, s.num_kv_heads * d], -1)
    q, k = heads(q, s.num_heads, lw.q_norm), heads(k, s.num_kv_heads, lw.k_norm)
    k, v = cache(layer, k, split_heads(v, s.num_kv_heads, d).transpose(0, 2, 1, 3))
    groups = s.num_heads // s.num_kv_heads
    k, v = repeat_kv(k, groups, s.num_heads, d), repeat_kv(v, groups, s.num_heads, d)
    scale = op.constant(np.float32(1.0 / np.sqrt(d)))
    if fused:
        attn = op.scaled_dot_product_attention(q, k, v, scale=scale, causal=causal)
    else:
        attn = explicit_attention(q, k, v, scale, causal)
    x = x + linear(merge_heads(attn, s.num_heads * d), lw.o)
    return x + swiglu(rms_norm(x, lw.post_norm, eps), lw.gate_up, lw.down)
