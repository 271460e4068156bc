"""The Qwen3 decoder layer shared by the talker and the code predictor (docs/MODEL.md §3.2).

    x += o_proj(attn(RoPE(q_norm(q_proj(rms(x)))), RoPE(k_norm(k_proj(rms(x)))), v_proj(rms(x))))
    x += down(silu(gate(rms(x))) * up(rms(x)))

How past keys/values are kept differs by graph (stateful → paged for the talker, plain
in-graph tensors for the code predictor's 15 steps), so it is a callback. The talker's
positions come at runtime and its RoPE and attention take the forms the plugins fuse
(`decoder_layer`); the code predictor's are known when the graph is built
(`decoder_layer_at`: RoPE as a matrix product, attention in plain ops).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import openvino as ov

from ..model.spec import LayerStackSpec
from .expr import T, op
from .ops import Params, apply_rope, explicit_attention, linear, merge_heads, repeat_kv, rms_norm, split_heads, swiglu

# (layer index, new keys [B,Hkv,T,D], new values) -> (all keys, all values) incl. the past
KVCache = Callable[[int, T, T], tuple[T, T]]
LAYER_FIELDS = ("input_norm", "qkv", "o", "q_norm", "k_norm", "post_norm", "gate_up", "down")
# Where the native runner's own layer stacks (native/include/qwen3tts/layer_stack.hpp: the
# code predictor, the talker) find what they need in a graph: each weight's Constant by a stable
# name `<graph>.<name>` (nncf keeps a compressed Constant's name), the stack's numbers in the
# model's rt_info under qwen3tts/.
WEIGHT_NAMES_VERSION = "1"


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


def name_weights(graph: str, layers: list[LayerWeights], named: dict[str, T]) -> None:
    """Gives each weight's Constant (under fp16's Convert, if any) its stable name: the
    layers' as layer<i>.<field>, then `named`'s."""
    named = {**{f"layer{i}.{field}": getattr(lw, field) for i, lw in enumerate(layers) for field in LAYER_FIELDS},
             **named}
    for name, t in named.items():
        node = t.node
        if node.get_type_name() == "Convert":
            node = node.input_value(0).get_node()
        node.set_friendly_name(f"{graph}.{name}")


def mark_stack(model: ov.Model, s: LayerStackSpec) -> None:
    """The layer stack's numbers in the model's rt_info, next to the weight names' version."""
    for key, value in (("weight_names", WEIGHT_NAMES_VERSION), ("layers", s.num_layers), ("heads", s.num_heads),
                       ("kv_heads", s.num_kv_heads), ("head_dim", s.head_dim), ("rms_norm_eps", s.rms_norm_eps),
                       ("rope_theta", s.rope_theta)):
        model.set_rt_info(str(value), ["qwen3tts", key])


Rotate = Callable[[T], T]  # per-head normed q or k [B, T, heads, D] -> RoPE-rotated [B, heads, T, D]


def _attention_inputs(x: T, lw: LayerWeights, s: LayerStackSpec, rotate_q: Rotate, rotate_k: Rotate
                      ) -> tuple[T, T, T]:
    """q, k, v [B, heads, T, D] from x [B, T, H]."""
    d, eps = s.head_dim, s.rms_norm_eps
    q, k, v = linear(rms_norm(x, lw.input_norm, eps), lw.qkv).split(
        [s.num_heads * d, s.num_kv_heads * d, s.num_kv_heads * d], -1)
    q = rotate_q(rms_norm(split_heads(q, s.num_heads, d), lw.q_norm, eps))
    k = rotate_k(rms_norm(split_heads(k, s.num_kv_heads, d), lw.k_norm, eps))
    return q, k, split_heads(v, s.num_kv_heads, d).transpose(0, 2, 1, 3)


def _output_and_mlp(x: T, attn: T, lw: LayerWeights, s: LayerStackSpec) -> T:
    """x + o_proj(attn [B, heads, T, D]), then the MLP with its residual."""
    x = x + linear(merge_heads(attn, s.num_heads * s.head_dim), lw.o)
    return x + swiglu(rms_norm(x, lw.post_norm, s.rms_norm_eps), lw.gate_up, lw.down)


def decoder_layer(x: T, lw: LayerWeights, s: LayerStackSpec, cos: T, sin: T, layer: int, cache: KVCache,
                  causal: bool) -> T:
    """One pre-norm layer on x [B, T, H] at runtime positions (cos, sin [B, 1, T, D]), with
    RoPE and attention in the forms the plugins fuse: the paged-attention pass needs the
    ScaledDotProductAttention, and GQA as repeat_kv."""
    d = s.head_dim

    def rotate(t: T) -> T:
        return apply_rope(t.transpose(0, 2, 1, 3), cos, sin, d)

    q, k, v = _attention_inputs(x, lw, s, rotate, rotate)
    k, v = cache(layer, k, v)
    groups = s.num_heads // s.num_kv_heads
    k, v = repeat_kv(k, groups, s.num_heads, d), repeat_kv(v, groups, s.num_heads, d)
    scale = op.constant(np.float32(1.0 / np.sqrt(d)))
    return _output_and_mlp(x, op.scaled_dot_product_attention(q, k, v, scale=scale, causal=causal), lw, s)


def decoder_layer_at(x: T, lw: LayerWeights, s: LayerStackSpec, rotations: tuple[T, T], layer: int,
                     cache: KVCache, causal: bool) -> T:
    """One pre-norm layer on x [B, T, H] at positions fixed when the graph is built (the code
    predictor's), in plain ops, for the fewest small nodes per step over ≤16 positions:

    - RoPE as one MatMul by rotations = (R_q, R_k) [T, D, D] (ops.ConstantRope); R_q also
      carries the attention's 1/√D. (The CPU plugin's fused RoPE gave wrong codes with
      constant positions, OpenVINO 2026.4.1, seen only after an IR round trip.)
    - attention as MatMul/Softmax/MatMul, each kv head with its query heads in one product
      (no repeat_kv: ops.explicit_attention)."""
    r_q, r_k = rotations

    def rotate_by(r: T) -> Rotate:
        return lambda t: (t @ r).transpose(0, 2, 1, 3)

    q, k, v = _attention_inputs(x, lw, s, rotate_by(r_q), rotate_by(r_k))
    k, v = cache(layer, k, v)
    return _output_and_mlp(x, explicit_attention(q, k, v, None, causal), lw, s)
