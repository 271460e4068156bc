"""The code-predictor ("sub-talker") graph: one call per frame fills codebooks 1..15 (docs/MODEL.md §4).

The official loop runs 15 `forward` calls per frame over a fresh KV cache of ≤16
positions; here the 15 steps are unrolled into one graph whose per-layer keys/values are
plain in-graph Concats, with every weight a single shared Constant, and sampling is done
in-graph so the host makes one inference call per frame for a whole batch. Every
position is known when the graph is built, so each layer (`decoder_layer_at`) rotates q
and k by constant RoPE matrices and attends without repeating the shared kv heads: fewer
small nodes, which take about a quarter of the time (the weight products the rest).

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

from ..model.checkpoint import Checkpoint
from .expr import T, cat, i64, op, param, result, where
from .ops import ConstantRope, Params, Weights, linear, rms_norm
from .transformer import LayerWeights, decoder_layer_at, mark_stack, name_weights

log = logging.getLogger(__name__)

INPUTS = ("hidden", "code0", "temperature", "top_k", "top_p", "uniform")
OUTPUTS = ("codes", "frame_embedding")


class _FrameCache:
    """Per-layer keys/values of the current frame as plain tensors (no state: the cache
    lives and dies inside one inference call)."""

    def __init__(self) -> None:
        self.k: dict[int, T] = {}
        self.v: dict[int, T] = {}

    def __call__(self, layer: int, k: T, v: T) -> tuple[T, T]:
        if layer in self.k:
            k, v = cat([self.k[layer], k], 2), cat([self.v[layer], v], 2)
        self.k[layer], self.v[layer] = k, v
        return k, v


TOP_K_MAX = 64  # sampled rows choose among at most this many candidates (official default 50)


def sample_codes(logits: T | ov.Output, temperature: T | ov.Output, top_k: T | ov.Output, top_p: T | ov.Output,
                 uniform: T | ov.Output, vocab: int) -> ov.Output:
    """Codes [B] i64 from logits [B, V] with per-row parameters [B] and uniforms [B] in [0, 1).

    Greedy rows (temperature ≤ 0) take the argmax. Sampled rows, in HF order: scores /
    temperature → top-k (k ≤ TOP_K_MAX; 0 or more means TOP_K_MAX) → top-p (ranks whose
    exclusive cumulative probability is < top_p, rank 0 always) → inverse CDF with the
    row's uniform. Every shape is static: one TopK of TOP_K_MAX per step. (A version with
    data-dependent TopK widths computed right in memory but wrong after an IR round trip on
    the CPU plugin, OpenVINO 2026.4.1.)
    """
    logits, temperature, top_k, top_p, uniform = map(T, (logits, temperature, top_k, top_p, uniform))
    width = min(TOP_K_MAX, vocab)
    sampled_row = temperature > 0.0
    greedy = op.topk(logits, i64(1), axis=-1, mode="max", sort="none", index_element_type="i64")[1].squeeze(1)
    scaled = logits / where(sampled_row, temperature, 1.0).unsqueeze(1)
    top, top_index = op.topk(scaled, i64(width), axis=-1, mode="max", sort="value", index_element_type="i64")
    limit = where((top_k <= 0) | (top_k > width), width, top_k)
    rank = i64(np.arange(width, dtype=np.int64)[None, :])  # [1, K]
    keep_k = rank < limit.unsqueeze(1)
    probs = where(keep_k, top, np.finfo(np.float32).min).softmax(1) * keep_k.float()
    before = op.cumsum(probs, i64(1), exclusive=True)
    keep_p = (before < top_p.unsqueeze(1)) | (top_p >= 1.0).unsqueeze(1)
    keep = keep_k & (keep_p | rank.eq(0))
    cdf = op.cumsum(probs * keep.float(), i64(1))
    pick = (cdf <= uniform.unsqueeze(1) * cdf.max(1, keepdim=True)).long().sum(1)
    last = keep.long().sum(1) - 1
    sampled = top_index.gather(op.minimum(pick, last).unsqueeze(1), 1, batch_dims=1).squeeze(1)  # top_index[b, ·]
    return where(sampled_row, sampled, greedy).o


def build_subcode(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    """The 15-step code predictor with in-graph sampling as one model (API in module doc)."""
    spec = ckpt.spec
    s, cp = spec.code_predictor.stack, spec.code_predictor
    steps, vocab, h_talker = cp.num_code_groups - 1, cp.vocab_size, spec.talker.stack.hidden_size
    talker = Params(ckpt.main, weights, "talker.")
    p = talker.code_predictor
    shapes = ([-1, h_talker], [-1], [-1], [-1], [-1], [-1, steps])
    dtypes = (ov.Type.f32, ov.Type.i64, ov.Type.f32, ov.Type.i64, ov.Type.f32, ov.Type.f32)
    inputs = [param(name, shape, dtype) for name, shape, dtype in zip(INPUTS, shapes, dtypes)]
    hidden, code0, temperature, top_k, top_p, uniform = inputs

    # one Constant per weight, shared by all unrolled steps
    layers = [LayerWeights.load(p.model.layers[i]) for i in range(s.num_layers)]
    final_norm = p.model.norm.const()
    heads = [p.lm_head[g].matrix() for g in range(steps)]
    tables = [p.model.codec_embedding[g].matrix() for g in range(steps)]
    talker_table = talker.model.codec_embedding.matrix()
    if cp.has_projection:
        proj_w, proj_b = p.small_to_mtp_projection.matrix(), p.small_to_mtp_projection.matrix("bias")

    # the native runner's own code predictor (native/include/qwen3tts/subcode_cpu.hpp) reads these
    named = {"norm": final_norm, "talker_embedding": talker_table}
    named.update({f"head{g}": w for g, w in enumerate(heads)})
    named.update({f"embedding{g}": w for g, w in enumerate(tables)})
    if cp.has_projection:
        named.update({"projection": proj_w, "projection_bias": proj_b})
    name_weights("subcode", layers, named)

    cache, rope = _FrameCache(), ConstantRope(s.head_dim, s.rope_theta)
    embedded = talker_table.gather(code0, 0)  # [B, H_talker]
    frame = embedded
    x = cat([hidden.unsqueeze(1), embedded.unsqueeze(1)], 1)
    codes: list[T] = []
    for g in range(1, steps + 1):
        positions = [0, 1] if g == 1 else [g]
        rotations = rope(positions, 1.0 / np.sqrt(s.head_dim)), rope(positions)  # q's with attention's 1/√D
        x = linear(x, proj_w, proj_b) if cp.has_projection else x
        for i, lw in enumerate(layers):
            # the 2-position first step is causal; later single queries see every cached key
            x = decoder_layer_at(x, lw, s, rotations, i, cache, causal=(g == 1))
        logits = linear(rms_norm(x.gather(len(positions) - 1, 1), final_norm, s.rms_norm_eps), heads[g - 1])
        code = T(sample_codes(logits, temperature, top_k, top_p, uniform.gather(g - 1, 1), vocab))
        codes.append(code.unsqueeze(1))
        embedded = tables[g - 1].gather(code, 0)  # [B, H_talker]
        frame = frame + embedded
        x = embedded.unsqueeze(1)  # the 15th code's embedding is never fed back

    model = ov.Model([result(cat(codes, 1), "codes"), result(frame, "frame_embedding")], [t.node for t in inputs],
                     "subcode")
    mark_stack(model, s)
    log.info("subcode graph: %d steps, %d layers, %d ops", steps, s.num_layers, len(model.get_ordered_ops()))
    return model
