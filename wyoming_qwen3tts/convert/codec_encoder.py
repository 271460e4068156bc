"""The 12 Hz codec encoder as an OpenVINO graph: pcm [B, S] -> codes [B, Q, ⌈S/1920⌉] (voice cloning).

Mirrors the official `Qwen3TTSTokenizerV2Model.encode`, i.e. transformers' `MimiModel.encode`
(4.57.3) without its decoder half, keeping the first `encoder_valid_num_quantizers` codebooks:

    SEANet: causal conv k7 → per stride r in (4, 5, 6, 8): [residual block (ELU, conv k3,
    ELU, conv k1, + x), ELU, causal conv k=2r stride r] → ELU → causal conv k3
    → transformer (8 × [LayerNorm → causal attention with RoPE → ×layer scale,
    LayerNorm → GELU MLP → ×layer scale], no final norm)
    → downsample: causal conv k4 stride 2, edges replicated (25 → 12.5 Hz)
    → split RVQ: semantic (1 codebook) and acoustic (15 of 31) residual quantisers, each on
    its own 1×1 input_proj of the same embeddings; Euclidean nearest codebook row, residual
    minus that row, next codebook.

Mimi's padding, exactly: a MimiConv1d pads `k_eff - stride` samples on the left and on the
right the `extra` samples that complete the last window, (-L) mod stride, computed from the
length. A fixed right pad of stride - 1 samples (same mode) gives the same ⌈L/stride⌉
outputs: the last window reads exactly the `extra` ones, the surplus lies past it. So every
pad is static whatever the dynamic length.

The attention is causal over the whole sequence, NOT a 250-frame sliding window: the config
carries `sliding_window`, but transformers' Mimi builds its mask with `create_causal_mask`,
which ignores it (checked: zeroing the first second changes codes > 10 s later).

Codebook search is written as torch.cdist computes it for these sizes (one matmul of
[-2x, |x|², 1] with [e, 1, |e|²], clamp at 0, sqrt) and takes the first index among equal
distances, as argmin does, so near-ties resolve as in the official code where possible.
"""
from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as op

from ..model.checkpoint import Checkpoint, CheckpointError, TensorStore
from ..model.spec import CodecEncoderSpec
from .codec import OfflineContext, named, per_channel, seen_to_bias
from .ops import (
    Weights,
    apply_rope,
    explicit_attention,
    f32,
    i64,
    linear,
    merge_heads,
    out,
    repeat_kv,
    split_heads,
    to_bhtd,
)

log = logging.getLogger(__name__)

P = "encoder."  # tensor-name prefix of the Mimi encoder inside speech_tokenizer/model.safetensors
CODEBOOK_EPS = 1e-5  # MimiEuclideanCodebook(epsilon=1e-5): embed = embed_sum / clamp(cluster_usage, eps)
PAD_MODES = {"constant": "constant", "replicate": "edge"}  # torch F.pad mode -> OpenVINO Pad mode


def _tensor(store: TensorStore, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor whose shape the config predicts: a mismatch means config and weights disagree."""
    if store.shape(name) != shape:
        raise CheckpointError(f"speech_tokenizer tensor {name} has shape {store.shape(name)}, "
                              f"the config implies {shape}")
    return store.get(name)


# ------------------------------------------------------------------------------- SEANet

def mimi_conv(x: ov.Output, store: TensorStore, w: Weights, prefix: str, shape: tuple[int, int, int],
              stride: int = 1, dilation: int = 1, pad_mode: str = "constant") -> ov.Output:
    """MimiConv1d (causal) on x [B, C_in, L] -> [B, C_out, ⌈L/stride⌉]: left pad k_eff - stride,
    right pad stride - 1 (standing in for the length-dependent extra padding, see module doc)."""
    kernel = _tensor(store, prefix + "conv.weight", shape)
    left, right = (shape[2] - 1) * dilation + 1 - stride, stride - 1
    if pad_mode == "constant":  # zeros: the convolution's own padding
        y = op.convolution(x, w(kernel), [stride], [left], [right], [dilation])
    else:
        padded = op.pad(x, i64([0, 0, left]), i64([0, 0, right]), PAD_MODES[pad_mode])
        y = op.convolution(padded, w(kernel), [stride], [0], [0], [dilation])
    if prefix + "conv.bias" in store:
        y = op.add(y, per_channel(_tensor(store, prefix + "conv.bias", shape[:1])))
    return out(y)


def elu(x: ov.Output) -> ov.Output:
    return out(op.elu(x, 1.0))


def resnet_block(x: ov.Output, spec: CodecEncoderSpec, store: TensorStore, w: Weights, prefix: str,
                 dim: int, dilation: int) -> ov.Output:
    """MimiResnetBlock: shortcut(x) + conv_k1(ELU(conv_k3_dilated(ELU(x))))."""
    hidden, pad = dim // spec.compress, spec.pad_mode
    h = mimi_conv(elu(x), store, w, prefix + "block.1.", (hidden, dim, spec.residual_kernel_size),
                  dilation=dilation, pad_mode=pad)
    h = mimi_conv(elu(h), store, w, prefix + "block.3.", (dim, hidden, 1), pad_mode=pad)
    if spec.use_conv_shortcut:
        x = mimi_conv(x, store, w, prefix + "shortcut.", (dim, dim, 1), pad_mode=pad)
    return out(op.add(x, h))


def seanet(pcm: ov.Output, spec: CodecEncoderSpec, store: TensorStore, w: Weights) -> ov.Output:
    """MimiEncoder: pcm [B, S] -> [B, hidden, ⌈S/hop⌉]. Layer indices count the ELUs too."""
    layers, nf, pad = P + "encoder.layers.", spec.num_filters, spec.pad_mode
    x = mimi_conv(out(op.unsqueeze(pcm, i64([1]))), store, w, layers + "0.", (nf, 1, spec.kernel_size), pad_mode=pad)
    idx, dim = 1, nf
    for ratio in reversed(spec.upsampling_ratios):
        for j in range(spec.num_residual_layers):
            x = resnet_block(x, spec, store, w, f"{layers}{idx}.", dim, spec.dilation_growth_rate ** j)
            idx += 1
        x = mimi_conv(elu(x), store, w, f"{layers}{idx + 1}.", (2 * dim, dim, 2 * ratio), stride=ratio, pad_mode=pad)
        idx, dim = idx + 2, 2 * dim
    return mimi_conv(elu(x), store, w, f"{layers}{idx + 1}.", (spec.hidden_size, dim, spec.last_kernel_size),
                     pad_mode=pad)


# ------------------------------------------------------------------------------- transformer

def layer_norm(x: ov.Output, store: TensorStore, prefix: str, eps: float) -> ov.Output:
    """nn.LayerNorm over the last axis, with weight and bias."""
    h = op.mvn(x, i64([-1]), True, eps, "inside_sqrt")
    return out(op.add(op.multiply(h, f32(store.get(prefix + "weight"))), f32(store.get(prefix + "bias"))))


def _proj(h: ov.Output, store: TensorStore, w: Weights, prefix: str, shape: tuple[int, int]) -> ov.Output:
    """nn.Linear; a bias only if the checkpoint has one (attention_bias)."""
    bias = prefix + "bias"
    return linear(h, w(_tensor(store, prefix + "weight", shape)),
                  f32(store.get(bias)) if bias in store else None)


def transformer_layer(x: ov.Output, spec: CodecEncoderSpec, store: TensorStore, w: Weights, prefix: str,
                      cos: ov.Output, sin: ov.Output, causal: ov.Output) -> ov.Output:
    """MimiTransformerLayer on x [B, T, H]: x += s₁·attn(LN(x)); x += s₂·fc2(GELU(fc1(LN(x))))."""
    heads, kv_heads, d, width = spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.hidden_size
    h = layer_norm(x, store, prefix + "input_layernorm.", spec.norm_eps)

    def project(name: str, n: int) -> ov.Output:
        return to_bhtd(split_heads(_proj(h, store, w, f"{prefix}self_attn.{name}_proj.", (n * d, width)), n, d))

    q = apply_rope(project("q", heads), cos, sin, d, fusable=False)
    k = repeat_kv(apply_rope(project("k", kv_heads), cos, sin, d, fusable=False), heads // kv_heads, heads, d)
    v = repeat_kv(project("v", kv_heads), heads // kv_heads, heads, d)
    attn = merge_heads(explicit_attention(q, k, v, f32(np.float32(1.0 / np.sqrt(d))), bias=causal), heads * d)
    attn = _proj(attn, store, w, prefix + "self_attn.o_proj.", (width, heads * d))
    x = out(op.add(x, op.multiply(attn, f32(store.get(prefix + "self_attn_layer_scale.scale")))))

    h = layer_norm(x, store, prefix + "post_attention_layernorm.", spec.norm_eps)
    h = op.gelu(_proj(h, store, w, prefix + "mlp.fc1.", (spec.intermediate_size, width)), "erf")
    h = _proj(out(h), store, w, prefix + "mlp.fc2.", (width, spec.intermediate_size))
    return out(op.add(x, op.multiply(h, f32(store.get(prefix + "mlp_layer_scale.scale")))))


def transformer(x: ov.Output, spec: CodecEncoderSpec, store: TensorStore, w: Weights) -> ov.Output:
    """MimiTransformerModel on x [B, T, H], positions 0..T-1, causal over all T (see module doc)."""
    ctx = OfflineContext(window=0)  # only its positions and RoPE tables: no window here
    cos, sin = ctx.rope(x, spec.head_dim, spec.rope_theta)
    pos = ctx.positions(x)  # [B, T] f32
    seen = op.less_equal(op.unsqueeze(pos, i64([1])), op.unsqueeze(pos, i64([2])))  # key j <= query i
    causal = out(op.unsqueeze(seen_to_bias(seen), i64([1])))  # [B, 1, T, T]
    for i in range(spec.num_layers):
        x = transformer_layer(x, spec, store, w, f"{P}encoder_transformer.layers.{i}.", cos, sin, causal)
    return x


# ------------------------------------------------------------------------------- quantizer

def codebook(store: TensorStore, prefix: str, spec: CodecEncoderSpec) -> np.ndarray:
    """The codebook rows [K, D] as MimiEuclideanCodebook.embed computes them, in float32."""
    usage = _tensor(store, prefix + "cluster_usage", (spec.codebook_size,))
    total = _tensor(store, prefix + "embed_sum", (spec.codebook_size, spec.codebook_dim))
    return total / np.maximum(usage, np.float32(CODEBOOK_EPS))[:, None]


def nearest(x: ov.Output, embed: np.ndarray) -> tuple[ov.Output, ov.Output]:
    """(index [B, T] i64, row [B, T, D]) of the row of `embed` nearest to each x [B, T, D], as
    torch.cdist + argmin: one matmul of [-2x, |x|², 1]·[e, 1, |e|²]ᵀ, clamp ≥ 0, sqrt, first
    minimum. The rows are gathered from the same table (one copy of the codebook)."""
    dim = embed.shape[1]
    sq = np.sum(embed * embed, axis=-1, dtype=np.float32, keepdims=True)
    table = f32(np.concatenate([embed, np.ones_like(sq), sq], axis=-1))  # [K, D + 2]
    x_sq = op.reduce_sum(op.multiply(x, x), i64([-1]), True)  # [B, T, 1]
    ones = op.add(op.multiply(x_sq, f32(0.0)), f32(1.0))  # shaped like x_sq: only shapes propagate
    x_aug = op.concat([op.multiply(x, f32(-2.0)), x_sq, ones], -1)
    dist = op.sqrt(op.maximum(op.matmul(x_aug, table, False, True), f32(0.0)))  # [B, T, K]
    best = op.topk(dist, i64(1), -1, "min", "value", "i64", stable=True)  # stable: lowest index of equals
    index = out(op.squeeze(best.output(1), i64([-1])))
    row = op.slice(op.gather(table, index, i64(0)), i64([0]), i64([dim]), i64([1]), i64([-1]))
    return index, out(row)


def residual_quantize(x: ov.Output, spec: CodecEncoderSpec, store: TensorStore, w: Weights, prefix: str,
                      count: int) -> list[ov.Output]:
    """MimiResidualVectorQuantizer.encode on x [B, T, H] for its first `count` codebooks:
    project (1×1 input_proj), then per codebook: nearest row, subtract it from the residual."""
    proj = prefix + "input_proj.weight"
    if proj in store:
        x = linear(x, w(_tensor(store, proj, (spec.vq_hidden_dim, spec.hidden_size, 1))[:, :, 0]))
    codes = []
    for j in range(count):
        index, row = nearest(x, codebook(store, f"{prefix}layers.{j}.codebook.", spec))
        codes.append(index)
        if j + 1 < count:  # the last residual is never read
            x = out(op.subtract(x, row))
    return codes


def quantize(x: ov.Output, spec: CodecEncoderSpec, store: TensorStore, w: Weights) -> ov.Output:
    """MimiSplitResidualVectorQuantizer.encode on x [B, T, H] -> codes [B, Q, T] for the first
    Q = valid_num_quantizers: the semantic RVQ, then the acoustic RVQ on the same input.
    Later quantizers never influence earlier ones, so the rest are not computed."""
    n_sem, n = spec.num_semantic_quantizers, spec.valid_num_quantizers
    codes = residual_quantize(x, spec, store, w, P + "quantizer.semantic_residual_vector_quantizer.", n_sem)
    if n > n_sem:
        codes += residual_quantize(x, spec, store, w, P + "quantizer.acoustic_residual_vector_quantizer.", n - n_sem)
    return out(op.concat([op.unsqueeze(c, i64([1])) for c in codes], 1))


# ------------------------------------------------------------------------------- model

def encode(pcm: ov.Output, spec: CodecEncoderSpec, store: TensorStore, w: Weights) -> ov.Output:
    """The whole encoder: pcm [B, S] f32 at 24 kHz -> codes [B, Q, ⌈S/samples_per_frame⌉] i64."""
    x = seanet(pcm, spec, store, w)  # [B, H, ⌈S/960⌉]
    x = transformer(out(op.transpose(x, i64([0, 2, 1]))), spec, store, w)
    x = out(op.transpose(x, i64([0, 2, 1])))
    if spec.downsample_kernel:
        shape = (spec.hidden_size, spec.hidden_size, spec.downsample_kernel)
        x = mimi_conv(x, store, w, P + "downsample.", shape, stride=spec.downsample_stride, pad_mode="replicate")
    return quantize(out(op.transpose(x, i64([0, 2, 1]))), spec, store, w)


def build_codec_encoder(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    """Reference audio to codes for any batch and length: pcm [B, S] f32 -> codes [B, Q, T] i64,
    T = ⌈S/1920⌉ (what the official encode keeps for an unpadded item). Rows are encoded as
    given: a shorter row zero-padded to the batch length gets, cut to its own ⌈valid/1920⌉
    frames, the codes the official batched encode (which pads the same way) gives it.

    Attention is explicit over all T×T scores at 25 Hz, so memory grows with T² (heads·T²·4
    bytes per layer: 2 MB for 10 s, 72 MB for 60 s at full size), fine for reference clips.
    Codebooks stay f32 whatever the weight format: the nearest-row search is where small
    weight errors would change codes."""
    spec = ckpt.spec.codec_encoder
    pcm = op.parameter([-1, -1], ov.Type.f32, name="pcm")
    named(pcm, "pcm")
    codes = op.result(encode(pcm.output(0), spec, ckpt.codec, weights), name="codes")
    named(codes, "codes")
    model = ov.Model([codes], [pcm], "codec_encoder")
    log.info("codec encoder graph: %d transformer layers, %d codebooks, %d ops", spec.num_layers,
             spec.valid_num_quantizers, len(model.get_ordered_ops()))
    return model
