"""Names and shapes of the main checkpoint's talker tensors, derived from a ModelSpec.

One source of truth for the loader (which checks a checkpoint against it) and for the
synthetic checkpoint writer of the tools distribution (which produces exactly these tensors).
"""
from __future__ import annotations

from .spec import LayerStackSpec, ModelSpec

Shape = tuple[int, ...]


def _stack_shapes(prefix: str, s: LayerStackSpec) -> dict[str, Shape]:
    h, q, kv, d = s.hidden_size, s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim, s.head_dim
    out: dict[str, Shape] = {}
    for i in range(s.num_layers):
        p = f"{prefix}layers.{i}."
        out.update({
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (d,),
            p + "self_attn.k_norm.weight": (d,),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (s.intermediate_size, h),
            p + "mlp.up_proj.weight": (s.intermediate_size, h),
            p + "mlp.down_proj.weight": (h, s.intermediate_size),
        })
    out[prefix + "norm.weight"] = (h,)
    return out


def talker_shapes(spec: ModelSpec) -> dict[str, Shape]:
    """Every `talker.*` tensor of model.safetensors with its shape, in module order."""
    t, cp = spec.talker, spec.code_predictor
    h, th = t.stack.hidden_size, t.text_hidden_size
    out: dict[str, Shape] = {
        "talker.model.codec_embedding.weight": (t.vocab_size, h),
        "talker.model.text_embedding.weight": (t.text_vocab_size, th),
    }
    out.update(_stack_shapes("talker.model.", t.stack))
    out.update({
        "talker.text_projection.linear_fc1.weight": (th, th),
        "talker.text_projection.linear_fc1.bias": (th,),
        "talker.text_projection.linear_fc2.weight": (h, th),
        "talker.text_projection.linear_fc2.bias": (h,),
        "talker.codec_head.weight": (t.vocab_size, h),
    })
    groups = cp.num_code_groups - 1
    out.update({f"talker.code_predictor.model.codec_embedding.{g}.weight": (cp.vocab_size, h) for g in range(groups)})
    out.update(_stack_shapes("talker.code_predictor.model.", cp.stack))
    out.update({f"talker.code_predictor.lm_head.{g}.weight": (cp.vocab_size, cp.stack.hidden_size)
                for g in range(groups)})
    if cp.has_projection:
        out["talker.code_predictor.small_to_mtp_projection.weight"] = (cp.stack.hidden_size, h)
        out["talker.code_predictor.small_to_mtp_projection.bias"] = (cp.stack.hidden_size,)
    return out
