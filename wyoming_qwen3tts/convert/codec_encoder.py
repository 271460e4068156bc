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

from ..model.checkpoint import Checkpoint, CheckpointError
from ..model.spec import CodecEncoderSpec
from .codec import OfflineContext, per_channel, seen_to_bias
from .expr import T, cat, f32, i64, op, param, result
from .ops import Params, Weights, apply_rope, explicit_attention, linear, merge_heads, repeat_kv, split_heads

log = logging.getLogger(__name__)

CODEBOOK_EPS = 1e-5  # MimiEuclideanCodebook(epsilon=1e-5): embed = embed_sum / clamp(cluster_usage, eps)
PAD_MODES = {"constant": "constant", "replicate": "edge"}  # torch F.pad mode -> OpenVINO Pad mode


def _tensor(p: Params, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor whose shape the config predicts: a mismatch means config and weights disagree."""
    if p.shape(name) != shape:
        raise CheckpointError(f"speech_tokenizer tensor {p.prefix}{name} has shape {p.shape(name)}, "
                              f"the config implies {shape}")
    return p.array(name)


# ------------------------------------------------------------------------------- SEANet

def mimi_conv(x: T, p: Params, shape: tuple[int, int, int], stride: int = 1, dilation: int = 1,
              pad_mode: str = "constant") -> T:
    """MimiConv1d (causal) on x [B, C_in, L] -> [B, C_out, ⌈L/stride⌉]: left pad k_eff - stride,
    right pad stride - 1 (standing in for the length-dependent extra padding, see module doc)."""
    kernel = _tensor(p.conv, "weight", shape)
    left, right = (shape[2] - 1) * dilation + 1 - stride, stride - 1
    if pad_mode == "constant":  # zeros: the convolution's own padding
        y = op.convolution(x, p.weights(kernel), [stride], [left], [right], [dilation])
    else:
        padded = op.pad(x, i64([0, 0, left]), i64([0, 0, right]), PAD_MODES[pad_mode])
        y = op.convolution(padded, p.weights(kernel), [stride], [0], [0], [dilation])
    return y + per_channel(_tensor(p.conv, "bias", shape[:1])) if "bias" in p.conv else y


def elu(x: T) -> T:
    return op.elu(x, 1.0)


def resnet_block(x: T, spec: CodecEncoderSpec, p: Params, dim: int, dilation: int) -> T:
    """MimiResnetBlock: shortcut(x) + conv_k1(ELU(conv_k3_dilated(ELU(x))))."""
    hidden, pad = dim // spec.compress, spec.pad_mode
    h = mimi_conv(elu(x), p.block[1], (hidden, dim, spec.residual_kernel_size), dilation=dilation, pad_mode=pad)
    h = mimi_conv(elu(h), p.block[3], (dim, hidden, 1), pad_mode=pad)
    if spec.use_conv_shortcut:
        x = mimi_conv(x, p.shortcut, (dim, dim, 1), pad_mode=pad)
    return x + h


def seanet(pcm: T, spec: CodecEncoderSpec, layers: Params) -> T:
    """MimiEncoder: pcm [B, S] -> [B, hidden, ⌈S/hop⌉]. Layer indices count the ELUs too."""
    nf, pad = spec.num_filters, spec.pad_mode
    x = mimi_conv(pcm.unsqueeze(1), layers[0], (nf, 1, spec.kernel_size), pad_mode=pad)
    idx, dim = 1, nf
    for ratio in reversed(spec.upsampling_ratios):
        for j in range(spec.num_residual_layers):
            x = resnet_block(x, spec, layers[idx], dim, spec.dilation_growth_rate ** j)
            idx += 1
        x = mimi_conv(elu(x), layers[idx + 1], (2 * dim, dim, 2 * ratio), stride=ratio, pad_mode=pad)
        idx, dim = idx + 2, 2 * dim
    return mimi_conv(elu(x), layers[idx + 1], (spec.hidden_size, dim, spec.last_kernel_size), pad_mode=pad)


# ------------------------------------------------------------------------------- transformer

def layer_norm(x: T, p: Params, eps: float) -> T:
    """nn.LayerNorm over the last axis, with weight and bias."""
    return op.mvn(x, i64([-1]), True, eps, "inside_sqrt") * p.const() + p.const("bias")


def _proj(h: T, p: Params, shape: tuple[int, int]) -> T:
    """nn.Linear of the shape the config implies; a bias only if the checkpoint has one (attention_bias)."""
    return linear(h, p.weights(_tensor(p, "weight", shape)), p.const("bias") if "bias" in p else None)


def transformer_layer(x: T, spec: CodecEncoderSpec, p: Params, cos: T, sin: T, causal: T) -> T:
    """MimiTransformerLayer on x [B, T, H]: x += s₁·attn(LN(x)); x += s₂·fc2(GELU(fc1(LN(x))))."""
    heads, kv_heads, d, width = spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.hidden_size
    h = layer_norm(x, p.input_layernorm, spec.norm_eps)

    def project(proj: Params, n: int) -> T:
        return split_heads(_proj(h, proj, (n * d, width)), n, d).transpose(0, 2, 1, 3)

    attn = p.self_attn
    q = apply_rope(project(attn.q_proj, heads), cos, sin, d, fusable=False)
    k = repeat_kv(apply_rope(project(attn.k_proj, kv_heads), cos, sin, d, fusable=False), heads // kv_heads, heads, d)
    v = repeat_kv(project(attn.v_proj, kv_heads), heads // kv_heads, heads, d)
    o = merge_heads(explicit_attention(q, k, v, f32(np.float32(1.0 / np.sqrt(d))), bias=causal), heads * d)
    x = x + _proj(o, attn.o_proj, (width, heads * d)) * p.self_attn_layer_scale.const("scale")

    h = layer_norm(x, p.post_attention_layernorm, spec.norm_eps)
    h = op.gelu(_proj(h, p.mlp.fc1, (spec.intermediate_size, width)), "erf")
    return x + _proj(h, p.mlp.fc2, (width, spec.intermediate_size)) * p.mlp_layer_scale.const("scale")


def transformer(x: T, spec: CodecEncoderSpec, p: Params) -> T:
    """MimiTransformerModel on x [B, T, H], positions 0..T-1, causal over all T (see module doc)."""
    ctx = OfflineContext(window=0)  # only its positions and RoPE tables: no window here
    cos, sin = ctx.rope(x, spec.head_dim, spec.rope_theta)
    pos = ctx.positions(x)  # [B, T] f32
    causal = seen_to_bias(pos.unsqueeze(1) <= pos.unsqueeze(2)).unsqueeze(1)  # key j <= query i: [B, 1, T, T]
    for i in range(spec.num_layers):
        x = transformer_layer(x, spec, p.layers[i], cos, sin, causal)
    return x


# ------------------------------------------------------------------------------- quantizer

def codebook(p: Params, spec: CodecEncoderSpec) -> np.ndarray:
    """The codebook rows [K, D] as MimiEuclideanCodebook.embed computes them, in float32."""
    usage = _tensor(p, "cluster_usage", (spec.codebook_size,))
    total = _tensor(p, "embed_sum", (spec.codebook_size, spec.codebook_dim))
    return total / np.maximum(usage, np.float32(CODEBOOK_EPS))[:, None]


def nearest(x: T, embed: np.ndarray) -> tuple[T, T]:
    """(index [B, T] i64, row [B, T, D]) of the row of `embed` nearest to each x [B, T, D], as
    torch.cdist + argmin: one matmul of [-2x, |x|², 1]·[e, 1, |e|²]ᵀ, clamp ≥ 0, sqrt, first
    minimum. The rows are gathered from the same table (one copy of the codebook)."""
    dim = embed.shape[1]
    sq = np.sum(embed * embed, axis=-1, dtype=np.float32, keepdims=True)
    table = f32(np.concatenate([embed, np.ones_like(sq), sq], axis=-1))  # [K, D + 2]
    x_sq = (x * x).sum(-1, keepdim=True)  # [B, T, 1]
    ones = x_sq * 0.0 + 1.0  # shaped like x_sq: only shapes propagate
    dist = op.sqrt(op.maximum(cat([x * -2.0, x_sq, ones], -1).matmul_t(table), f32(0.0)))  # [B, T, K]
    index = op.topk(dist, i64(1), -1, "min", "value", "i64", stable=True)[1].squeeze(-1)  # stable: first of equals
    return index, table.gather(index, 0).slice(0, dim, -1)


def residual_quantize(x: T, spec: CodecEncoderSpec, p: Params, count: int) -> list[T]:
    """MimiResidualVectorQuantizer.encode on x [B, T, H] for its first `count` codebooks:
    project (1×1 input_proj), then per codebook: nearest row, subtract it from the residual."""
    if "input_proj.weight" in p:
        x = linear(x, p.weights(_tensor(p.input_proj, "weight", (spec.vq_hidden_dim, spec.hidden_size, 1))[:, :, 0]))
    codes = []
    for j in range(count):
        index, row = nearest(x, codebook(p.layers[j].codebook, spec))
        codes.append(index)
        if j + 1 < count:  # the last residual is never read
            x = x - row
    return codes


def quantize(x: T, spec: CodecEncoderSpec, p: Params) -> T:
    """MimiSplitResidualVectorQuantizer.encode on x [B, T, H] -> codes [B, Q, T] for the first
    Q = valid_num_quantizers: the semantic RVQ, then the acoustic RVQ on the same input.
    Later quantizers never influence earlier ones, so the rest are not computed."""
    n_sem, n = spec.num_semantic_quantizers, spec.valid_num_quantizers
    codes = residual_quantize(x, spec, p.semantic_residual_vector_quantizer, n_sem)
    if n > n_sem:
        codes += residual_quantize(x, spec, p.acoustic_residual_vector_quantizer, n - n_sem)
    return cat([c.unsqueeze(1) for c in codes], 1)


# ------------------------------------------------------------------------------- model

def encode(pcm: T, spec: CodecEncoderSpec, p: Params) -> T:
    """The whole encoder: pcm [B, S] f32 at 24 kHz -> codes [B, Q, ⌈S/samples_per_frame⌉] i64;
    p views the `encoder.` tensors of speech_tokenizer/model.safetensors."""
    x = seanet(pcm, spec, p.encoder.layers)  # [B, H, ⌈S/960⌉]
    x = transformer(x.transpose(0, 2, 1), spec, p.encoder_transformer).transpose(0, 2, 1)
    if spec.downsample_kernel:
        shape = (spec.hidden_size, spec.hidden_size, spec.downsample_kernel)
        x = mimi_conv(x, p.downsample, shape, stride=spec.downsample_stride, pad_mode="replicate")
    return quantize(x.transpose(0, 2, 1), spec, p.quantizer)


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
    pcm = param("pcm", [-1, -1], ov.Type.f32)
    codes = encode(pcm, spec, Params(ckpt.codec, weights, "encoder."))
    model = ov.Model([result(codes, "codes")], [pcm.node], "codec_encoder")
    log.info("codec encoder graph: %d transformer layers, %d codebooks, %d ops", spec.num_layers,
             spec.valid_num_quantizers, len(model.get_ordered_ops()))
    return model
