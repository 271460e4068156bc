"""The code-predictor ("sub-talker") graph: one call per frame fills codebooks 1..15 (docs/MODEL.md §4).

The official loop runs 15 `forward` calls per frame over a fresh KV cache of ≤16
positions; here the 15 steps are unrolled into one graph whose per-layer keys/values are
plain in-graph Concats, with every weight a single shared Constant, and sampling is done
in-graph so the host makes one inference call per frame for a whole batch:

    step 1:    x = proj([h ; E0[c0]])                 positions 0,1 (causal) → lm_head[0] → c1
    step g≥2:  x = proj(codec_embedding[g-2][c_{g-1}]) position g (sees all) → lm_head[g-1] → c_g
    frame_embedding = E0[c0] + Σ_g codec_embedding[g-1][c_g]   (talker input sans trailing text, docs/MODEL.md §4.3)

Sampling per row, in HF order (temperature → top-k → top-p → softmax), then inverse CDF
with a host-supplied uniform number so a seed reproduces the codes; temperature ≤ 0 means
greedy argmax of the raw logits (lowest index on ties).
"""
from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as op

from ..model.checkpoint import Checkpoint
from .ops import Weights, f32, i64, linear, out, rms_norm, rope_constants
from .transformer import LayerWeights, decoder_layer

log = logging.getLogger(__name__)

INPUTS = ("hidden", "code0", "temperature", "top_k", "top_p", "uniform")
OUTPUTS = ("codes", "frame_embedding")


class _FrameCache:
    """Per-layer keys/values of the current frame as plain tensors (no state: the cache
    lives and dies inside one inference call)."""

    def __init__(self) -> None:
        self.k: dict[int, ov.Output] = {}
        self.v: dict[int, ov.Output] = {}

    def __call__(self, layer: int, k: ov.Output, v: ov.Output) -> tuple[ov.Output, ov.Output]:
        if layer in self.k:
            k = out(op.concat([self.k[layer], k], axis=2))
            v = out(op.concat([self.v[layer], v], axis=2))
        self.k[layer], self.v[layer] = k, v
        return k, v


def _column(x: ov.Output, index: ov.Output) -> ov.Output:
    """x[b, index[b]] for x [B, N] and index [B] (any int type) -> [B]."""
    picked = op.gather(x, op.unsqueeze(index, i64([1])), i64(1), batch_dims=1)
    return out(op.squeeze(picked, i64([1])))


TOP_K_MAX = 64  # sampled rows choose among at most this many candidates (official default 50)


def sample_codes(logits: ov.Output, temperature: ov.Output, top_k: ov.Output, top_p: ov.Output,
                 uniform: ov.Output, vocab: int) -> ov.Output:
    """Codes [B] i64 from logits [B, V] with per-row parameters [B] and uniforms [B] in [0, 1).

    Greedy rows (temperature ≤ 0) take the argmax. Sampled rows, in HF order: scores /
    temperature → top-k (k ≤ TOP_K_MAX; 0 or more means TOP_K_MAX) → top-p (ranks whose
    exclusive cumulative probability is < top_p, rank 0 always) → inverse CDF with the
    row's uniform. Every shape is static: one TopK of TOP_K_MAX per step. (A version with
    data-dependent TopK widths computed right in memory but wrong after an IR round trip on
    the CPU plugin, OpenVINO 2026.4.1.)
    """
    width = min(TOP_K_MAX, vocab)
    sampled_row = op.greater(temperature, f32(0.0))
    greedy = op.squeeze(op.topk(logits, i64(1), axis=-1, mode="max", sort="none",
                                index_element_type="i64").output(1), i64([1]))
    scaled = op.divide(logits, op.unsqueeze(op.select(sampled_row, temperature, f32(1.0)), i64([1])))
    top = op.topk(scaled, i64(width), axis=-1, mode="max", sort="value", index_element_type="i64")
    limit = op.select(op.logical_or(op.less_equal(top_k, i64(0)), op.greater(top_k, i64(width))), i64(width), top_k)
    rank = i64(np.arange(width, dtype=np.int64)[None, :])  # [1, K]
    keep_k = op.less(rank, op.unsqueeze(limit, i64([1])))
    probs = op.softmax(op.select(keep_k, top.output(0), f32(np.finfo(np.float32).min)), axis=1)
    probs = op.multiply(probs, op.convert(keep_k, ov.Type.f32))
    before = op.cumsum(probs, i64(1), exclusive=True)
    keep_p = op.logical_or(op.less(before, op.unsqueeze(top_p, i64([1]))),
                           op.unsqueeze(op.greater_equal(top_p, f32(1.0)), i64([1])))
    keep = op.logical_and(keep_k, op.logical_or(keep_p, op.equal(rank, i64(0))))
    cdf = op.cumsum(op.multiply(probs, op.convert(keep, ov.Type.f32)), i64(1))
    target = op.multiply(op.unsqueeze(uniform, i64([1])), op.reduce_max(cdf, i64([1]), keep_dims=True))
    pick = op.reduce_sum(op.convert(op.less_equal(cdf, target), ov.Type.i64), i64([1]), keep_dims=False)
    last = op.subtract(op.reduce_sum(op.convert(keep, ov.Type.i64), i64([1]), keep_dims=False), i64(1))
    sampled = _column(top.output(1), out(op.minimum(pick, last)))
    return out(op.select(sampled_row, sampled, greedy))


def _named(node: ov.Node | ov.Output, name: str) -> None:
    out(node).get_tensor().set_names({name})


def build_subcode(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    """The 15-step code predictor with in-graph sampling as one model (API in module doc)."""
    spec, store = ckpt.spec, ckpt.main
    s, cp = spec.code_predictor.stack, spec.code_predictor
    steps, vocab, h_talker = cp.num_code_groups - 1, cp.vocab_size, spec.talker.stack.hidden_size
    prefix = "talker.code_predictor."

    hidden = op.parameter([-1, h_talker], ov.Type.f32, name="hidden")
    code0 = op.parameter([-1], ov.Type.i64, name="code0")
    temperature = op.parameter([-1], ov.Type.f32, name="temperature")
    top_k = op.parameter([-1], ov.Type.i64, name="top_k")
    top_p = op.parameter([-1], ov.Type.f32, name="top_p")
    uniform = op.parameter([-1, steps], ov.Type.f32, name="uniform")
    params = [hidden, code0, temperature, top_k, top_p, uniform]
    for p, name in zip(params, INPUTS):
        _named(p, name)

    # one Constant per weight, shared by all unrolled steps
    layers = [LayerWeights.load(store, f"{prefix}model.layers.{i}.", weights) for i in range(s.num_layers)]
    final_norm = op.constant(store.get(f"{prefix}model.norm.weight")).output(0)
    heads = [weights(store.get(f"{prefix}lm_head.{g}.weight")) for g in range(steps)]
    tables = [weights(store.get(f"{prefix}model.codec_embedding.{g}.weight")) for g in range(steps)]
    talker_table = weights(store.get("talker.model.codec_embedding.weight"))
    if cp.has_projection:
        proj_w = weights(store.get(f"{prefix}small_to_mtp_projection.weight"))
        proj_b = weights(store.get(f"{prefix}small_to_mtp_projection.bias"))

    def proj(x: ov.Output) -> ov.Output:
        return linear(x, proj_w, proj_b) if cp.has_projection else x

    cache = _FrameCache()
    embedded = out(op.gather(talker_table, code0, i64(0)))  # [B, H_talker]
    frame = embedded
    x = out(op.concat([op.unsqueeze(hidden, i64([1])), op.unsqueeze(embedded, i64([1]))], axis=1))
    codes: list[ov.Output] = []
    for g in range(1, steps + 1):
        positions = [[0, 1]] if g == 1 else [[g]]
        cos, sin = rope_constants(positions[0], s.head_dim, s.rope_theta)
        x = proj(x)
        for i, lw in enumerate(layers):
            # the 2-position first step is causal; later single queries see every cached key
            x = decoder_layer(x, lw, s, cos, sin, i, cache, causal=(g == 1), fused=False)
        last = op.gather(x, i64(len(positions[0]) - 1), i64(1))  # [B, H]
        logits = linear(rms_norm(last, final_norm, s.rms_norm_eps), heads[g - 1])
        u = out(op.gather(uniform, i64(g - 1), i64(1)))
        code = sample_codes(logits, out(temperature), out(top_k), out(top_p), u, vocab)
        codes.append(out(op.unsqueeze(code, i64([1]))))
        embedded = out(op.gather(tables[g - 1], code, i64(0)))  # [B, H_talker]
        frame = out(op.add(frame, embedded))
        x = out(op.unsqueeze(embedded, i64([1])))  # the 15th code's embedding is never fed back

    results = []
    for node, name in ((op.concat(codes, axis=1), "codes"), (frame, "frame_embedding")):
        r = op.result(node, name=name)
        _named(r, name)
        results.append(r)
    model = ov.Model(results, params, "subcode")
    log.info("subcode graph: %d steps, %d layers, %d ops", steps, s.num_layers, len(model.get_ordered_ops()))
    return model
