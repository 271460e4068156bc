"""The talker transformer graph, stateful in the form the paged-attention pass needs.

Built as an HF-style stateful decoder — ReadValue(init) → Gather(beam_idx) → Concat →
SDPA, GQA as Unsqueeze/Broadcast(constant)/Reshape — then converted with
`paged_attention_transformation` into a graph that runs any mix of prefills, prefill
chunks and decode steps of many sequences in one call over a block-paged KV cache.

The IR on disk is the stateful form: an IR cannot hold `PagedAttentionExtension` (the
reader rejects its opset), so the runtime applies `to_paged` (engine/graphs.py) after `read_model`, as
openvino-genai does. Inputs after that: inputs_embeds [tokens, H], position_ids [tokens], the paged
inputs (past_lens, subsequence_begins, block_indices, block_indices_begins,
max_context_len, key_cache.N, value_cache.N) and `sample_rows` [S]: the token rows whose
outputs are wanted (the last token of each sequence), so the head runs on S rows only.
Outputs: `logits` [S, codec vocab] and `hidden` [S, H] (final-norm hidden state, the
code predictor's input). The recipe and its traps: docs/OPENVINO.md §1–§3.
"""
from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13
from openvino.op.util import Variable, VariableInfo

from ..model.checkpoint import Checkpoint
from .expr import T, cat, i64, op, param, result
from .ops import Params, Weights, linear, rms_norm, rope_tables
from .transformer import LayerWeights, decoder_layer, mark_stack, name_weights

log = logging.getLogger(__name__)


class _StatefulCache:
    """Per-layer KV variables in the HF stateful export form."""

    def __init__(self, batch: T, beam_idx: T, kv_heads: int, head_dim: int) -> None:
        self.beam_idx = beam_idx
        self.kv_heads, self.head_dim = kv_heads, head_dim
        shape = cat([batch, i64([kv_heads, 0, head_dim])], 0)
        self.init = op.broadcast(op.constant(np.float32(0)), shape)
        self.sinks: list[ov.Node] = []

    def _state(self, name: str, new: T) -> T:
        info = VariableInfo()
        info.variable_id = name
        info.data_type = ov.Type.f32
        info.data_shape = ov.PartialShape([-1, self.kv_heads, -1, self.head_dim])
        variable = Variable(info)
        full = cat([op.read_value(self.init, variable).gather(self.beam_idx, 0), new], 2)
        self.sinks.append(opset13.assign(full.node, variable))
        return full

    def __call__(self, layer: int, k: T, v: T) -> tuple[T, T]:
        return self._state(f"past_key_values.{layer}.key", k), self._state(f"past_key_values.{layer}.value", v)


def build_talker_stateful(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    """The talker transformer, final norm and codec head as a stateful model."""
    s, p = ckpt.spec.talker.stack, Params(ckpt.main, weights, "talker.")
    inputs = [param("inputs_embeds", [-1, -1, s.hidden_size], ov.Type.f32),
              param("position_ids", [-1, -1], ov.Type.i64), param("beam_idx", [-1], ov.Type.i32),
              param("sample_rows", [-1], ov.Type.i64)]
    x, positions, beam_idx, sample_rows = inputs
    cos, sin = rope_tables(positions, s.head_dim, s.rope_theta)
    cache = _StatefulCache(x.batch(), beam_idx, s.num_kv_heads, s.head_dim)
    layers = [LayerWeights.load(p.model.layers[i]) for i in range(s.num_layers)]
    for i, lw in enumerate(layers):
        x = decoder_layer(x, lw, s, cos, sin, i, cache, causal=True)
    norm, head = p.model.norm.const(), p.codec_head.matrix()
    x = rms_norm(x, norm, s.rms_norm_eps)
    rows = x.reshape(-1, s.hidden_size, special_zero=False).gather(sample_rows, 0)
    logits = linear(rows, head)
    name_weights("talker", layers, {"norm": norm, "head": head})  # the native runner's talker_cpu.hpp reads these
    model = ov.Model([result(logits, "logits"), result(rows, "hidden")], cache.sinks, [t.node for t in inputs],
                     "talker")
    mark_stack(model, s)
    return model


def build_talker(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    """The graph saved to disk (stateful; see the module docstring)."""
    return build_talker_stateful(ckpt, weights)
