"""The 12 Hz codec decoder as an OpenVINO graph: codes [B, 16, T] -> pcm [B, T·1920] (docs/MODEL.md §7).

Mirrors `Qwen3TTSTokenizerV2Decoder.forward` block by block:

    RVQ dequantise (rvq_first + rvq_rest, each: Σ codebook rows → 1×1 output_proj)
    → causal pre_conv k3 → transformer (input_proj, 8 × [RMSNorm → sliding-window attention
    with RoPE → ×layer_scale, RMSNorm → SwiGLU → ×layer_scale], norm, output_proj)
    → 2 × [ConvTranspose k=s=2, ConvNeXt] → causal conv k7
    → 4 × [SnakeBeta, ConvTranspose k=2r s=r trimmed r on the right, ResUnits d=1,3,9]
    → SnakeBeta → causal conv k7 → clamp [-1, 1]

Every block reaches into the past only through a `Context`: how much left context it
needs, and the keys of earlier positions. `OfflineContext` supplies zeros and a whole
sequence (the decoder of one call); `codec_stream.StreamContext` supplies the state
carried over from the previous chunk, so both graphs share this one statement of the math.

Two blocks are written differently from the official code, for the CPU plugin's sake, with
the same math: sin² in SnakeBeta is range reduction plus a polynomial (the plugin's Sin is
a slow reference kernel), and the transposed convs are plain convs whose output phases are
interleaved (its ConvolutionBackpropData mostly takes a slow gemm path). Together they about
halve the full-size decoder's time on a 2-core AVX-512 CPU in f32.
"""
from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as op

from ..model.checkpoint import Checkpoint, TensorStore
from ..model.spec import CodecDecoderSpec
from .ops import (
    Weights,
    apply_rope,
    explicit_attention,
    f32,
    i64,
    linear,
    merge_heads,
    out,
    rms_norm,
    rope_tables,
    split_heads,
    to_bhtd,
)

log = logging.getLogger(__name__)

P = "decoder."  # tensor-name prefix of the decoder inside speech_tokenizer/model.safetensors
MASKED = 1e30  # subtracted from the scores of keys outside the window (arithmetic, no Select: see ops)
CONVNEXT_EPS = 1e-6  # nn.LayerNorm(dim, eps=1e-6) in the official ConvNeXt block
SNAKE_EPS = 1e-9


class Context:
    """Where a block's past comes from. Subclasses decide; blocks only ask."""

    def left(self, x: ov.Output, name: str, size: int) -> ov.Output:
        """x [B, C, L] with the `size` samples before it prepended -> [B, C, size + L]."""
        raise NotImplementedError

    def rope(self, x: ov.Output, head_dim: int, theta: float) -> tuple[ov.Output, ov.Output]:
        """cos, sin [B|1, 1, T, D] for the positions of x [B, T, ·]."""
        raise NotImplementedError

    def keys(self, name: str, k: ov.Output, v: ov.Output) -> tuple[ov.Output, ov.Output, ov.Output]:
        """(all keys, all values, additive score bias [B|1, 1, T, Tk]) for the new k, v [B, H, T, D]."""
        raise NotImplementedError


class OfflineContext(Context):
    """A whole sequence in one call: zeros before the start, every position's keys at hand."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._positions: ov.Output | None = None
        self._bias: ov.Output | None = None

    def left(self, x: ov.Output, name: str, size: int) -> ov.Output:
        """Zeros, as a Concat like the streaming state (the same kernels keep streaming
        bit-identical; and a Pad folded into a following ConvolutionBackpropData gave a
        wrong output length on the CPU plugin, OpenVINO 2026.4.1)."""
        batch = op.gather(op.shape_of(x), i64([0]), i64(0))
        channels = x.get_partial_shape()[1].get_length()
        zeros = op.broadcast(f32(0.0), op.concat([batch, i64([channels, size])], 0))
        return out(op.concat([zeros, x], 2))

    def positions(self, x: ov.Output) -> ov.Output:
        """0..T-1 as f32 [B, T], by a cumulative sum of ones shaped like x [B, T, C]: only
        shapes propagate (no Range with an in-graph computed length)."""
        if self._positions is None:
            ones = op.add(op.multiply(op.gather(x, i64(0), i64(2)), f32(0.0)), f32(1.0))
            self._positions = out(op.cumsum(ones, i64(1), exclusive=True))
        return self._positions

    def rope(self, x: ov.Output, head_dim: int, theta: float) -> tuple[ov.Output, ov.Output]:
        return rope_tables(self.positions(x), head_dim, theta)

    def keys(self, name: str, k: ov.Output, v: ov.Output) -> tuple[ov.Output, ov.Output, ov.Output]:
        if self._bias is None:  # same for every layer: key j is seen by query i iff i - window < j <= i
            assert self._positions is not None, "rope() before keys()"
            q_pos = op.unsqueeze(self._positions, i64([2]))  # [B, T, 1]
            k_pos = op.unsqueeze(self._positions, i64([1]))  # [B, 1, T]
            seen = op.logical_and(op.less_equal(k_pos, q_pos),
                                  op.greater(k_pos, op.subtract(q_pos, f32(float(self.window)))))
            self._bias = out(op.unsqueeze(seen_to_bias(seen), i64([1])))
        return k, v, self._bias


def seen_to_bias(seen: ov.Output | ov.Node) -> ov.Output:
    """Boolean visibility -> additive bias 0 / -MASKED, written as arithmetic."""
    return out(op.multiply(op.subtract(op.convert(seen, ov.Type.f32), f32(1.0)), f32(MASKED)))


# ------------------------------------------------------------------------------- blocks

def _const(store: TensorStore, name: str) -> ov.Output:
    """A small tensor (bias, norm, scale) kept in f32 whatever the weight format."""
    return f32(store.get(name))


def per_channel(a: np.ndarray) -> ov.Output:
    """A per-channel vector as f32 [1, C, 1] for [B, C, L] tensors."""
    return f32(np.asarray(a, np.float32)[None, :, None])


def conv(x: ov.Output, store: TensorStore, w: Weights, prefix: str, dilation: int = 1) -> ov.Output:
    """Plain (valid) Conv1d + bias of torch weight [out, in, k] on x [B, in, L]."""
    y = op.convolution(x, w(store.get(prefix + "weight")), [1], [0], [0], [dilation])
    return out(op.add(y, per_channel(store.get(prefix + "bias"))))


def causal_conv(x: ov.Output, ctx: Context, store: TensorStore, w: Weights, prefix: str,
                dilation: int = 1) -> ov.Output:
    """CausalConvNet (stride 1): left context of (k-1)·dilation samples, no right padding."""
    k = store.shape(prefix + "conv.weight")[-1]
    if k > 1:
        x = ctx.left(x, prefix + "conv", (k - 1) * dilation)
    return conv(x, store, w, prefix + "conv.", dilation)


PI_PARTS = (3.140625, 9.67502593994140625e-4, 1.509957990978376432e-7)  # Σ = π, k·part exact in f32
SIN_TAYLOR = tuple(np.float32((-1) ** i / float(np.prod(np.arange(1, 2 * i + 2)))) for i in range(6, -1, -1))


def sin_squared(z: ov.Output) -> ov.Output:
    """sin²(z) from plain arithmetic. The CPU plugin runs Sin with its reference kernel
    (a quarter of the decoder's time); sin² has period π, so z is reduced to r in
    [-π/2, π/2] (π split in three parts, Cody–Waite) and sin r is a degree-13 odd Taylor
    polynomial: |error| < 4e-7 for |z| ≤ 5000 in f32, against 1.2e-7 for f32 sin."""
    k = op.floor(op.add(op.multiply(z, f32(np.float32(1 / np.pi))), f32(0.5)))
    r = z
    for part in PI_PARTS:
        r = op.subtract(r, op.multiply(k, f32(part)))
    r2 = op.multiply(r, r)
    p = f32(SIN_TAYLOR[0])
    for c in SIN_TAYLOR[1:]:
        p = op.add(op.multiply(p, r2), f32(c))
    s = op.multiply(p, r)
    return out(op.multiply(s, s))



def snake(x: ov.Output, store: TensorStore, prefix: str) -> ov.Output:
    """SnakeBeta: x + 1/(exp(β)+1e-9) · sin²(x·exp(α)); α, β are stored in log space."""
    alpha = np.exp(store.get(prefix + "alpha"))
    inv_beta = np.float32(1.0) / (np.exp(store.get(prefix + "beta")) + np.float32(SNAKE_EPS))
    return out(op.add(x, op.multiply(per_channel(inv_beta), sin_squared(out(op.multiply(x, per_channel(alpha)))))))


def polyphase(x: ov.Output, store: TensorStore, w: Weights, prefix: str, rate: int) -> ov.Output:
    """ConvTranspose1d with stride r and kernel r·taps (taps = 1 or 2) on x [B, C_in, L'],
    computed as a plain conv to r·C_out channels whose r phases are then interleaved:
    output sample l·r + j = Σ_s x[l - s] · w[:, :, s·r + j], the taps s ≥ 1 reading the
    taps-1 samples of left context that x must start with. Output [B, C_out, (L'-taps+1)·r],
    i.e. exactly the transposed conv's samples that depend on no sample outside x. (The
    CPU plugin's ConvolutionBackpropData takes a slow gemm path for most of these shapes.)"""
    wt = store.get(prefix + "weight")  # torch layout [C_in, C_out, taps·r]
    c_in, c_out, k = wt.shape
    taps = k // rate
    # conv weight [C_out·r, C_in, taps]: channel c·r + j, conv tap t reads x[l - (taps-1-t)]
    kernel = wt.reshape(c_in, c_out, taps, rate)[:, :, ::-1, :].transpose(1, 3, 0, 2).reshape(c_out * rate, c_in, taps)
    y = op.convolution(x, w(np.ascontiguousarray(kernel)), [1], [0], [0], [1])
    y = op.add(y, per_channel(np.repeat(store.get(prefix + "bias"), rate)))
    y = op.transpose(op.reshape(y, i64([0, c_out, rate, -1]), True), i64([0, 1, 3, 2]))  # [B, C_out, L, r]
    return out(op.reshape(y, i64([0, c_out, -1]), True))


def trans_conv(x: ov.Output, store: TensorStore, w: Weights, prefix: str, stride: int) -> ov.Output:
    """ConvTranspose1d with kernel == stride (upsample stage): no overlap, nothing trimmed."""
    return polyphase(x, store, w, prefix, stride)


def causal_trans_conv(x: ov.Output, ctx: Context, store: TensorStore, w: Weights, prefix: str,
                      rate: int) -> ov.Output:
    """CausalTransConvNet k=2r, s=r, r trimmed on the right: output block l (r samples) is
    input l through taps 0..r-1 plus input l-1 through taps r..2r-1, so one input sample
    of left context (the r samples trimmed on the right are the ones never computed)."""
    return polyphase(ctx.left(x, prefix + "conv", 1), store, w, prefix + "conv.", rate)


def convnext(x: ov.Output, ctx: Context, store: TensorStore, w: Weights, prefix: str) -> ov.Output:
    """x + γ·pw2(GELU(pw1(LayerNorm(causal depthwise conv k7 (x))))), on x [B, C, L]."""
    dw = store.get(prefix + "dwconv.conv.weight")  # [C, 1, k]
    h = ctx.left(x, prefix + "dwconv.conv", dw.shape[-1] - 1)
    h = op.group_convolution(h, f32(dw[:, None]), [1], [0], [0], [1])
    h = op.transpose(op.add(h, per_channel(store.get(prefix + "dwconv.conv.bias"))), i64([0, 2, 1]))
    h = op.mvn(h, i64([-1]), True, CONVNEXT_EPS, "inside_sqrt")
    h = op.add(op.multiply(h, _const(store, prefix + "norm.weight")), _const(store, prefix + "norm.bias"))
    h = op.gelu(linear(h, w(store.get(prefix + "pwconv1.weight")), _const(store, prefix + "pwconv1.bias")), "erf")
    h = linear(h, w(store.get(prefix + "pwconv2.weight")), _const(store, prefix + "pwconv2.bias"))
    h = op.multiply(h, _const(store, prefix + "gamma"))
    return out(op.add(x, op.transpose(h, i64([0, 2, 1]))))


def residual_unit(x: ov.Output, ctx: Context, store: TensorStore, w: Weights, prefix: str,
                  dilation: int) -> ov.Output:
    """x + conv_k1(snake(causal conv_k7_dilated(snake(x))))."""
    h = causal_conv(snake(x, store, prefix + "act1."), ctx, store, w, prefix + "conv1.", dilation)
    h = causal_conv(snake(h, store, prefix + "act2."), ctx, store, w, prefix + "conv2.")
    return out(op.add(x, h))


def dequantize(codes: ov.Output, spec: CodecDecoderSpec, store: TensorStore, w: Weights) -> ov.Output:
    """codes [B, Q, T] -> [B, codebook_dim, T]: per branch (first = semantic quantizers, rest)
    Σ codebook rows, then that branch's 1×1 output_proj; the branches added. Codebooks are
    embedding_sum / max(cluster_usage, 1e-5), computed here once; one table, offset per q."""
    q_first, size = spec.num_semantic_quantizers, spec.codebook_size
    tables = []
    for q in range(spec.num_quantizers):
        branch, layer = ("rvq_first", q) if q < q_first else ("rvq_rest", q - q_first)
        book = f"{P}quantizer.{branch}.vq.layers.{layer}._codebook."
        usage = np.maximum(store.get(book + "cluster_usage"), np.float32(1e-5))
        tables.append(store.get(book + "embedding_sum") / usage[:, None])
    table = w(np.concatenate(tables, axis=0))  # [Q·size, dim]
    offsets = i64((np.arange(spec.num_quantizers) * size)[None, :, None])
    index = op.add(op.clamp(codes, 0, size - 1), offsets)
    rows = op.gather(table, index, i64(0))  # [B, Q, T, dim]
    result = None
    for branch, lo, hi in (("rvq_first", 0, q_first), ("rvq_rest", q_first, spec.num_quantizers)):
        part = op.reduce_sum(op.slice(rows, i64([lo]), i64([hi]), i64([1]), i64([1])), i64([1]), False)  # [B, T, dim]
        proj = store.get(f"{P}quantizer.{branch}.output_proj.weight")[:, :, 0]  # [out, dim]
        y = linear(part, w(proj))
        result = y if result is None else out(op.add(result, y))
    return out(op.transpose(result, i64([0, 2, 1])))


def attention_layer(x: ov.Output, ctx: Context, spec: CodecDecoderSpec, store: TensorStore, w: Weights,
                    prefix: str, cos: ov.Output, sin: ov.Output) -> ov.Output:
    """One pre-norm layer on x [B, T, H]: sliding-window attention and SwiGLU, each × layer scale."""
    heads, d = spec.num_heads, spec.head_dim
    h = rms_norm(x, _const(store, prefix + "input_layernorm.weight"), spec.rms_norm_eps)

    def project(name: str) -> ov.Output:
        return to_bhtd(split_heads(linear(h, w(store.get(f"{prefix}self_attn.{name}_proj.weight"))), heads, d))

    q = apply_rope(project("q"), cos, sin, d, fusable=False)
    k = apply_rope(project("k"), cos, sin, d, fusable=False)
    k_all, v_all, bias = ctx.keys(prefix + "self_attn", k, project("v"))
    attn = merge_heads(explicit_attention(q, k_all, v_all, f32(np.float32(d ** -0.5)), bias=bias), heads * d)
    attn = linear(attn, w(store.get(prefix + "self_attn.o_proj.weight")))
    x = out(op.add(x, op.multiply(attn, _const(store, prefix + "self_attn_layer_scale.scale"))))
    h = rms_norm(x, _const(store, prefix + "post_attention_layernorm.weight"), spec.rms_norm_eps)
    gate = linear(h, w(store.get(prefix + "mlp.gate_proj.weight")))
    mlp = linear(op.multiply(op.swish(gate), linear(h, w(store.get(prefix + "mlp.up_proj.weight")))),
                 w(store.get(prefix + "mlp.down_proj.weight")))
    return out(op.add(x, op.multiply(mlp, _const(store, prefix + "mlp_layer_scale.scale"))))


def transformer(x: ov.Output, ctx: Context, spec: CodecDecoderSpec, store: TensorStore, w: Weights) -> ov.Output:
    """pre_transformer on x [B, latent, T] -> [B, latent, T]."""
    prefix = P + "pre_transformer."
    h = linear(op.transpose(x, i64([0, 2, 1])), w(store.get(prefix + "input_proj.weight")),
               _const(store, prefix + "input_proj.bias"))
    cos, sin = ctx.rope(h, spec.head_dim, spec.rope_theta)
    for i in range(spec.num_layers):
        h = attention_layer(h, ctx, spec, store, w, f"{prefix}layers.{i}.", cos, sin)
    h = rms_norm(h, _const(store, prefix + "norm.weight"), spec.rms_norm_eps)
    h = linear(h, w(store.get(prefix + "output_proj.weight")), _const(store, prefix + "output_proj.bias"))
    return out(op.transpose(h, i64([0, 2, 1])))


def decode(codes: ov.Output, ctx: Context, spec: CodecDecoderSpec, store: TensorStore, w: Weights) -> ov.Output:
    """The whole decoder: codes [B, Q, T] i64 -> pcm [B, T·samples_per_frame] in [-1, 1]."""
    x = causal_conv(dequantize(codes, spec, store, w), ctx, store, w, P + "pre_conv.")
    x = transformer(x, ctx, spec, store, w)
    for i, factor in enumerate(spec.upsampling_ratios):
        x = trans_conv(x, store, w, f"{P}upsample.{i}.0.conv.", factor)
        x = convnext(x, ctx, store, w, f"{P}upsample.{i}.1.")
    x = causal_conv(x, ctx, store, w, P + "decoder.0.")
    for b, rate in enumerate(spec.upsample_rates):
        prefix = f"{P}decoder.{b + 1}.block."
        x = snake(x, store, prefix + "0.")
        x = causal_trans_conv(x, ctx, store, w, prefix + "1.", rate)
        for j, dilation in enumerate((1, 3, 9)):
            x = residual_unit(x, ctx, store, w, f"{prefix}{j + 2}.", dilation)
    last = len(spec.upsample_rates) + 1
    x = snake(x, store, f"{P}decoder.{last}.")
    x = causal_conv(x, ctx, store, w, f"{P}decoder.{last + 1}.")
    return out(op.squeeze(op.clamp(x, -1.0, 1.0), i64([1])))


def named(node: ov.Node | ov.Output, name: str) -> ov.Output:
    """Give a graph input or output its public tensor name."""
    o = out(node)
    o.get_tensor().set_names({name})
    return o


def build_codec_decoder(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    """The offline decoder for any batch and length: codes [B, Q, T] i64 -> pcm [B, T·1920] f32.

    Attention is explicit over all T×T scores with a window bias, so memory grows with T²
    (≈ 16·T²·4 bytes per layer: 10 MB at 400 frames, 0.6 GB at 3000); long streams belong
    to the streaming graphs."""
    spec = ckpt.spec.codec_decoder
    codes = op.parameter([-1, spec.num_quantizers, -1], ov.Type.i64, name="codes")
    named(codes, "codes")
    pcm = op.result(decode(codes.output(0), OfflineContext(spec.sliding_window), spec, ckpt.codec, weights), name="pcm")
    named(pcm, "pcm")
    model = ov.Model([pcm], [codes], "codec")
    log.info("codec decoder graph: %d transformer layers, %d ops", spec.num_layers, len(model.get_ordered_ops()))
    return model
