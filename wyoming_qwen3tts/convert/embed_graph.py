"""The prompt-embedding graph: both input tracks of the talker (docs/MODEL.md §5, §4.3).

    embeds[i] = (text_ids[i] ≥ 0 ? text_projection(text_embedding[text_ids[i]]) : 0)
              + (codec_ids[i] ≥ 0 ? codec_embedding[codec_ids[i]] : 0)
    frame_embeds[r] = codec_embedding[codes[r,0]] + Σ_g code_predictor.codec_embedding[g-1][codes[r,g]]

Negative ids mark an empty track (see model/prompt.py); speaker vectors are added by the
host. `frame_embeds` serves voice-clone reference frames.
"""
from __future__ import annotations

import openvino as ov
from openvino import opset13 as op

from ..model.checkpoint import Checkpoint
from .ops import Weights, i64, linear, silu


def _lookup(table: ov.Output, ids: ov.Output) -> ov.Output:
    """Rows of `table` where ids ≥ 0, zeros elsewhere."""
    valid = op.greater_equal(ids, i64(0))
    rows = op.gather(table, op.maximum(ids, i64(0)), i64(0))
    return op.multiply(rows, op.unsqueeze(op.convert(valid, ov.Type.f32), i64([1]))).output(0)


def build_embed(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    store, spec = ckpt.main, ckpt.spec
    text_ids = op.parameter([-1], ov.Type.i64, name="text_ids")
    codec_ids = op.parameter([-1], ov.Type.i64, name="codec_ids")
    frame_codes = op.parameter([-1, spec.talker.num_code_groups], ov.Type.i64, name="frame_codes")
    text = _lookup(weights(store.get("talker.model.text_embedding.weight")), text_ids)
    text = linear(silu(linear(text, weights(store.get("talker.text_projection.linear_fc1.weight")),
                              weights(store.get("talker.text_projection.linear_fc1.bias")))),
                  weights(store.get("talker.text_projection.linear_fc2.weight")),
                  weights(store.get("talker.text_projection.linear_fc2.bias")))
    # a projected empty text track is not zero (biases): mask after the projection
    has_text = op.unsqueeze(op.convert(op.greater_equal(text_ids, i64(0)), ov.Type.f32), i64([1]))
    codec_table = weights(store.get("talker.model.codec_embedding.weight"))
    embeds = op.add(op.multiply(text, has_text), _lookup(codec_table, codec_ids))
    frames = op.gather(codec_table, op.gather(frame_codes, i64(0), i64(1)), i64(0))
    for g in range(1, spec.talker.num_code_groups):
        table = weights(store.get(f"talker.code_predictor.model.codec_embedding.{g - 1}.weight"))
        frames = op.add(frames, op.gather(table, op.gather(frame_codes, i64(g), i64(1)), i64(0)))
    outputs = []
    for node, name in ((embeds, "embeds"), (frames, "frame_embeds")):
        r = op.result(node, name=name)
        r.output(0).get_tensor().set_names({name})
        outputs.append(r)
    for p in (text_ids, codec_ids, frame_codes):
        p.output(0).get_tensor().set_names({p.get_friendly_name()})
    return ov.Model(outputs, [text_ids, codec_ids, frame_codes], "embed")
