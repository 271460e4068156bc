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
from openvino import opset13 as op
from openvino.op.util import Variable, VariableInfo

from ..model.checkpoint import Checkpoint
from .ops import Weights, i64, linear, rms_norm, rope_tables
from .transformer import LayerWeights, decoder_layer

log = logging.getLogger(__name__)


class _StatefulCache:
    """Per-layer KV variables in the HF stateful export form."""

    def __init__(self, batch: ov.Output, beam_idx: ov.Output, kv_heads: int, head_dim: int) -> None:
        self.beam_idx = beam_idx
        self.kv_heads, self.head_dim = kv_heads, head_dim
        shape = op.concat([batch, i64([kv_heads, 0, head_dim])], axis=0)
        self.init = op.broadcast(op.constant(np.float32(0)), shape)
        self.sinks: list[ov.Node] = []

    def _state(self, name: str, new: ov.Output) -> ov.Output:
        info = VariableInfo()
        info.variable_id = name
        info.data_type = ov.Type.f32
        info.data_shape = ov.PartialShape([-1, self.kv_heads, -1, self.head_dim])
        variable = Variable(info)
        past = op.gather(op.read_value(self.init, variable), self.beam_idx, i64(0))
        full = op.concat([past, new], axis=2)
        self.sinks.append(op.assign(full, variable))
        return full.output(0)

    def __call__(self, layer: int, k: ov.Output, v: ov.Output) -> tuple[ov.Output, ov.Output]:
        return self._state(f"past_key_values.{layer}.key", k), self._state(f"past_key_values.{layer}.value", v)


def build_talker_stateful(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    """The talker transformer, final norm and codec head as a stateful model."""
    s, store = ckpt.spec.talker.stack, ckpt.main
    embeds = op.parameter([-1, -1, s.hidden_size], ov.Type.f32, name="inputs_embeds")
    positions = op.parameter([-1, -1], ov.Type.i64, name="position_ids")
    beam_idx = op.parameter([-1], ov.Type.i32, name="beam_idx")
    sample_rows = op.parameter([-1], ov.Type.i64, name="sample_rows")
    cos, sin = rope_tables(positions, s.head_dim, s.rope_theta)
    batch = op.gather(op.shape_of(embeds), i64([0]), i64(0))
    cache = _StatefulCache(batch.output(0), beam_idx.output(0), s.num_kv_heads, s.head_dim)
    x = embeds.output(0)
    for i in range(s.num_layers):
        lw = LayerWeights.load(store, f"talker.model.layers.{i}.", weights)
        x = decoder_layer(x, lw, s, cos, sin, i, cache, causal=True)
    x = rms_norm(x, op.constant(store.get("talker.model.norm.weight")).output(0), s.rms_norm_eps)
    rows = op.gather(op.reshape(x, i64([-1, s.hidden_size]), special_zero=False), sample_rows, i64(0))
    logits = linear(rows, weights(store.get("talker.codec_head.weight")))
    hidden = op.result(rows, name="hidden")
    hidden.output(0).get_tensor().set_names({"hidden"})
    result = op.result(logits, name="logits")
    result.output(0).get_tensor().set_names({"logits"})
    for p, name in ((embeds, "inputs_embeds"), (positions, "position_ids"), (beam_idx, "beam_idx"),
                    (sample_rows, "sample_rows")):
        p.output(0).get_tensor().set_names({name})
    return ov.Model([result, hidden], cache.sinks, [embeds, positions, beam_idx, sample_rows], "talker")


def build_talker(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    """The graph saved to disk (stateful; see the module docstring)."""
    return build_talker_stateful(ckpt, weights)
