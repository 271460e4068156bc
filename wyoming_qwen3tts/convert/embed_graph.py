"""The prompt-embedding graph: both input tracks of the talker (docs/MODEL.md §5, §4.3).

    embeds[i] = (text_ids[i] ≥ 0 ? text_projection(text_embedding[text_ids[i]]) : 0)
              + (codec_ids[i] ≥ 0 ? codec_embedding[codec_ids[i]] : 0)
    frame_embeds[r] = codec_embedding[codes[r,0]] + Σ_g code_predictor.codec_embedding[g-1][codes[r,g]]

Negative ids mark an empty track (see model/prompt.py); speaker vectors are added by the
host. `frame_embeds` serves voice-clone reference frames.
"""
from __future__ import annotations

import openvino as ov

from ..model.checkpoint import Checkpoint
from .expr import T, i64, op, param, result
from .ops import Params, Weights, linear


def _lookup(table: T, ids: T) -> T:
    """Rows of `table` where ids ≥ 0, zeros elsewhere."""
    valid = ids >= 0
    return table.gather(op.maximum(ids, i64(0)), 0) * valid.float().unsqueeze(1)


def build_embed(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    p, groups = Params(ckpt.main, weights, "talker."), ckpt.spec.talker.num_code_groups
    inputs = [param("text_ids", [-1], ov.Type.i64), param("codec_ids", [-1], ov.Type.i64),
              param("frame_codes", [-1, groups], ov.Type.i64)]
    text_ids, codec_ids, frame_codes = inputs
    fc1, fc2 = p.text_projection.linear_fc1, p.text_projection.linear_fc2
    text = _lookup(p.model.text_embedding.matrix(), text_ids)
    text = linear(op.swish(linear(text, fc1.matrix(), fc1.matrix("bias"))), fc2.matrix(), fc2.matrix("bias"))
    # a projected empty text track is not zero (biases): mask after the projection
    has_text = (text_ids >= 0).float().unsqueeze(1)
    codec_table = p.model.codec_embedding.matrix()
    embeds = text * has_text + _lookup(codec_table, codec_ids)
    frames = codec_table.gather(frame_codes.gather(0, 1), 0)
    for g in range(1, groups):
        frames = frames + p.code_predictor.model.codec_embedding[g - 1].matrix().gather(frame_codes.gather(g, 1), 0)
    return ov.Model([result(embeds, "embeds"), result(frames, "frame_embeds")], [t.node for t in inputs], "embed")
