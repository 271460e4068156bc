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

from ..model.checkpoint import Checkpoint
from ..model.spec import CodecDecoderSpec
from .expr import T, cat, f32, i64, op, param, result
from .ops import Params, Weights, apply_rope, explicit_attention, linear, merge_heads, rms_norm, rope_tables

log = logging.getLogger(__name__)

MASKED = 1e30  # subtracted from the scores of keys outside the window (arithmetic, no Select: see ops)
CONVNEXT_EPS = 1e-6  # nn.LayerNorm(dim, eps=1e-6) in the official ConvNeXt block
SNAKE_EPS = 1e-9


class Context:
    """Where a block's past comes from. Subclasses decide; blocks only ask.

    `fresh`: the graph starts a stream, one frame of static shapes, and nothing comes out but
    its audio (the codec lead): every past is zeros, so blocks may skip what only ever
    multiplies those zeros (`causal_conv`'s leading taps, attention over a single position)."""

    fresh = False

    def left(self, x: T, name: str, size: int) -> T:
        """x [B, C, L] with the `size` samples before it prepended -> [B, C, size + L]."""
        raise NotImplementedError

    def rope(self, x: T, head_dim: int, theta: float) -> tuple[T, T]:
        """cos, sin [B|1, 1, T, D] for the positions of x [B, T, ·]."""
        raise NotImplementedError

    def keys(self, name: str, k: T, v: T) -> tuple[T, T, T]:
        """(all keys, all values, additive score bias [B|1, 1, T, Tk]) for the new k, v [B, H, T, D]."""
        raise NotImplementedError


class OfflineContext(Context):
    """A whole sequence in one call: zeros before the start, every position's keys at hand."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._positions: T | None = None
        self._bias: T | None = None

    def left(self, x: T, name: str, size: int) -> T:
        """Zeros, as a Concat like the streaming state (the same kernels keep streaming
        bit-identical; and a Pad folded into a following ConvolutionBackpropData gave a
        wrong output length on the CPU plugin, OpenVINO 2026.4.1)."""
        batch = x.batch()
        zeros = op.broadcast(f32(0.0), cat([batch, i64([x.dim(1), size])], 0))
        return cat([zeros, x], 2)

    def positions(self, x: T) -> T:
        """0..T-1 as f32 [B, T], by a cumulative sum of ones shaped like x [B, T, C]: only
        shapes propagate (no Range with an in-graph computed length)."""
        if self._positions is None:
            self._positions = op.cumsum(x.gather(0, 2) * 0.0 + 1.0, i64(1), exclusive=True)
        return self._positions

    def rope(self, x: T, head_dim: int, theta: float) -> tuple[T, T]:
        return rope_tables(self.positions(x), head_dim, theta)

    def keys(self, name: str, k: T, v: T) -> tuple[T, T, T]:
        if self._bias is None:  # same for every layer: key j is seen by query i iff i - window < j <= i
            assert self._positions is not None, "rope() before keys()"
            q_pos, k_pos = self._positions.unsqueeze(2), self._positions.unsqueeze(1)  # [B, T, 1], [B, 1, T]
            seen = (k_pos <= q_pos) & (k_pos > q_pos - float(self.window))
            self._bias = seen_to_bias(seen).unsqueeze(1)
        return k, v, self._bias


def seen_to_bias(seen: T) -> T:
    """Boolean visibility -> additive bias 0 / -MASKED, written as arithmetic."""
    return (seen.float() - 1.0) * MASKED


# ------------------------------------------------------------------------------- blocks

def per_channel(a: np.ndarray) -> T:
    """A per-channel vector as f32 [1, C, 1] for [B, C, L] tensors."""
    return f32(np.asarray(a, np.float32)[None, :, None])


class Convs:
    """How a convolution of the decoder's last blocks multiplies: in f32 (the exact path) here,
    in INT8 with calibrated input ranges in convert/codec_int8.py. The blocks ask for it only
    where an INT8 decoder quantizes (`decode`); every other convolution is plain."""

    def __call__(self, x: T, weight: np.ndarray, p: Params, dilation: int, taps: int) -> T:
        """x [B, in, L] convolved (valid) with the last `taps` of weight [out, in, k]."""
        return op.convolution(x, p.weights(last_taps(weight, taps)), [1], [0], [0], [dilation])


PLAIN = Convs()


def last_taps(weight: np.ndarray, taps: int) -> np.ndarray:
    return weight if taps == weight.shape[-1] else np.ascontiguousarray(weight[:, :, -taps:])


def conv(x: T, p: Params, dilation: int = 1, taps: int | None = None, convs: Convs = PLAIN) -> T:
    """Plain (valid) Conv1d + bias of torch weight [out, in, k] on x [B, in, L]; `taps`: only
    the last ones of the k (a fresh stream's, see causal_conv)."""
    weight = p.array("weight")
    return convs(x, weight, p, dilation, weight.shape[-1] if taps is None else taps) + per_channel(p.array("bias"))


def causal_conv(x: T, ctx: Context, p: Params, dilation: int = 1, convs: Convs = PLAIN) -> T:
    """CausalConvNet (stride 1): left context of (k-1)·dilation samples, no right padding.
    In a fresh stream's graph (Context.fresh) a tap reaching (k-1-j)·dilation ≥ L samples
    back reads only zeros for every output of x [B, C, L]: the conv keeps the last
    ⌊(L-1)/dilation⌋+1 taps and as much left context (the same sums without their zero terms)."""
    k = p.conv.shape("weight")[-1]
    taps = min(k, (x.dim(2) - 1) // dilation + 1) if ctx.fresh else k
    if taps > 1:
        x = ctx.left(x, p.prefix + "conv", (taps - 1) * dilation)
    return conv(x, p.conv, dilation, taps, convs)


PI_PARTS = (3.140625, 9.67502593994140625e-4, 1.509957990978376432e-7)  # Σ = π, k·part exact in f32
SIN_TAYLOR = tuple(np.float32((-1) ** i / float(np.prod(np.arange(1, 2 * i + 2)))) for i in range(6, -1, -1))


def sin_squared(z: T) -> T:
    """sin²(z) from plain arithmetic. The CPU plugin runs Sin with its reference kernel
    (a quarter of the decoder's time); sin² has period π, so z is reduced to r in
    [-π/2, π/2] (π split in three parts, Cody–Waite) and sin r is a degree-13 odd Taylor
    polynomial: |error| < 4e-7 for |z| ≤ 5000 in f32, against 1.2e-7 for f32 sin."""
    k = op.floor(z * np.float32(1 / np.pi) + 0.5)
    r = z
    for part in PI_PARTS:
        r = r - k * part
    r2 = r * r
    poly = f32(SIN_TAYLOR[0])
    for c in SIN_TAYLOR[1:]:
        poly = poly * r2 + c
    s = poly * r
    return s * s


def snake(x: T, p: Params) -> T:
    """SnakeBeta: x + 1/(exp(β)+1e-9) · sin²(x·exp(α)); α, β are stored in log space."""
    alpha = np.exp(p.array("alpha"))
    inv_beta = np.float32(1.0) / (np.exp(p.array("beta")) + np.float32(SNAKE_EPS))
    return x + per_channel(inv_beta) * sin_squared(x * per_channel(alpha))


def polyphase(x: T, p: Params, rate: int, convs: Convs = PLAIN) -> T:
    """ConvTranspose1d with stride r and kernel r·taps (taps = 1 or 2) on x [B, C_in, L'],
    computed as a plain conv to r·C_out channels whose r phases are then interleaved:
    output sample l·r + j = Σ_s x[l - s] · w[:, :, s·r + j], the taps s ≥ 1 reading the
    taps-1 samples of left context that x must start with. Output [B, C_out, (L'-taps+1)·r],
    i.e. exactly the transposed conv's samples that depend on no sample outside x. (The
    CPU plugin's ConvolutionBackpropData takes a slow gemm path for most of these shapes.)"""
    wt = p.array("weight")  # torch layout [C_in, C_out, taps·r]
    c_in, c_out, k = wt.shape
    taps = k // rate
    # conv weight [r·C_out, C_in, taps]: channel j·C_out + c (phase-major), conv tap t reads x[l - (taps-1-t)]
    kernel = wt.reshape(c_in, c_out, taps, rate)[:, :, ::-1, :].transpose(3, 1, 0, 2).reshape(rate * c_out, c_in, taps)
    y = convs(x, np.ascontiguousarray(kernel), p, 1, taps)
    y = y + per_channel(np.tile(p.array("bias"), rate))
    # channel j·C_out + c of sample l -> sample l·r + j of channel c: one DepthToSpace, which the CPU
    # plugin runs in its convolutions' channels-last layout (a reshape-transpose-reshape went
    # through two reorders to the planar layout and back, docs/OPENVINO.md §14)
    return op.depth_to_space(y, "blocks_first", rate)


def trans_conv(x: T, p: Params, stride: int) -> T:
    """ConvTranspose1d with kernel == stride (upsample stage): no overlap, nothing trimmed."""
    return polyphase(x, p, stride)


def causal_trans_conv(x: T, ctx: Context, p: Params, rate: int, convs: Convs = PLAIN) -> T:
    """CausalTransConvNet k=2r, s=r, r trimmed on the right: output block l (r samples) is
    input l through taps 0..r-1 plus input l-1 through taps r..2r-1, so one input sample
    of left context (the r samples trimmed on the right are the ones never computed)."""
    return polyphase(ctx.left(x, p.prefix + "conv", 1), p.conv, rate, convs)


def convnext(x: T, ctx: Context, p: Params) -> T:
    """x + γ·pw2(GELU(pw1(LayerNorm(causal depthwise conv k7 (x))))), on x [B, C, L]."""
    dw = p.dwconv.conv.array("weight")  # [C, 1, k]
    h = ctx.left(x, p.prefix + "dwconv.conv", dw.shape[-1] - 1)
    h = op.group_convolution(h, f32(dw[:, None]), [1], [0], [0], [1])
    h = (h + per_channel(p.dwconv.conv.array("bias"))).transpose(0, 2, 1)
    h = op.mvn(h, i64([-1]), True, CONVNEXT_EPS, "inside_sqrt") * p.norm.const() + p.norm.const("bias")
    h = p.pwconv2(op.gelu(p.pwconv1(h), "erf")) * p.const("gamma")
    return x + h.transpose(0, 2, 1)


def residual_unit(x: T, ctx: Context, p: Params, dilation: int, convs: Convs = PLAIN) -> T:
    """x + conv_k1(snake(causal conv_k7_dilated(snake(x))))."""
    h = causal_conv(snake(x, p.act1), ctx, p.conv1, dilation, convs)
    return x + causal_conv(snake(h, p.act2), ctx, p.conv2, convs=convs)


def dequantize(codes: T, spec: CodecDecoderSpec, p: Params) -> T:
    """codes [B, Q, T] -> [B, codebook_dim, T]: per branch (first = semantic quantizers, rest)
    Σ codebook rows, then that branch's 1×1 output_proj; the branches added. Codebooks are
    embedding_sum / max(cluster_usage, 1e-5), computed here once; one table, offset per q."""
    q_first, size = spec.num_semantic_quantizers, spec.codebook_size
    tables = []
    for q in range(spec.num_quantizers):
        book = (p.rvq_first.vq.layers[q] if q < q_first else p.rvq_rest.vq.layers[q - q_first])._codebook
        usage = np.maximum(book.array("cluster_usage"), np.float32(1e-5))
        tables.append(book.array("embedding_sum") / usage[:, None])
    table = p.weights(np.concatenate(tables, axis=0))  # [Q·size, dim]
    offsets = i64((np.arange(spec.num_quantizers) * size)[None, :, None])
    rows = table.gather(op.clamp(codes, 0, size - 1) + offsets, 0)  # [B, Q, T, dim]
    semantic, acoustic = (linear(rows.slice(lo, hi, 1).sum(1),  # [B, T, dim], then a 1×1 conv as [out, dim]
                                 p.weights(branch.output_proj.array("weight")[:, :, 0]))
                          for branch, lo, hi in ((p.rvq_first, 0, q_first), (p.rvq_rest, q_first, spec.num_quantizers)))
    return (semantic + acoustic).transpose(0, 2, 1)


def attention_layer(x: T, ctx: Context, spec: CodecDecoderSpec, p: Params, cos: T, sin: T) -> T:
    """One pre-norm layer on x [B, T, H]: sliding-window attention and SwiGLU, each × layer scale."""
    heads, d, eps, attn = spec.num_heads, spec.head_dim, spec.rms_norm_eps, p.self_attn
    h = rms_norm(x, p.input_layernorm.const(), eps)

    def project(proj: Params) -> T:
        return proj(h).reshape(0, 0, heads, d).transpose(0, 2, 1, 3)  # [B, heads, T, D]

    if ctx.fresh:  # one position, nothing before it: softmax over one key is 1, the output is v
        o = attn.o_proj(attn.v_proj(h))
    else:
        q = apply_rope(project(attn.q_proj), cos, sin, d, fusable=False)
        k = apply_rope(project(attn.k_proj), cos, sin, d, fusable=False)
        k, v, bias = ctx.keys(p.prefix + "self_attn", k, project(attn.v_proj))
        o = attn.o_proj(merge_heads(explicit_attention(q, k, v, f32(np.float32(d ** -0.5)), bias=bias), heads * d))
    x = x + o * p.self_attn_layer_scale.const("scale")
    h = rms_norm(x, p.post_attention_layernorm.const(), eps)
    mlp = p.mlp.down_proj(op.swish(p.mlp.gate_proj(h)) * p.mlp.up_proj(h))
    return x + mlp * p.mlp_layer_scale.const("scale")


def transformer(x: T, ctx: Context, spec: CodecDecoderSpec, p: Params) -> T:
    """pre_transformer on x [B, latent, T] -> [B, latent, T]."""
    h = p.input_proj(x.transpose(0, 2, 1))
    cos, sin = ctx.rope(h, spec.head_dim, spec.rope_theta)
    for i in range(spec.num_layers):
        h = attention_layer(h, ctx, spec, p.layers[i], cos, sin)
    return p.output_proj(rms_norm(h, p.norm.const(), spec.rms_norm_eps)).transpose(0, 2, 1)


def decode(codes: T, ctx: Context, spec: CodecDecoderSpec, p: Params, lead: int | None = None,
           convs: Convs = PLAIN) -> T:
    """The whole decoder: codes [B, Q, T] i64 -> pcm [B, T·samples_per_frame] in [-1, 1];
    p views the `decoder.` tensors of speech_tokenizer/model.safetensors. lead: decode only
    the first `lead` latent samples (of 4 per frame) through the four upsampling blocks, so
    pcm is the first lead·480 samples: every block is causal, so they are the same samples
    for a fraction of the blocks' work (docs/MODEL.md §8.3). convs: how the convolutions after
    the first decoder block's upsampling one multiply (768 input channels and fewer at full
    size: two thirds of the decoder's multiply-adds, where INT8 costs the least accuracy;
    docs/BENCHMARKS.md "The decoder in INT8")."""
    x = causal_conv(dequantize(codes, spec, p.quantizer), ctx, p.pre_conv)
    x = transformer(x, ctx, spec, p.pre_transformer)
    for i, factor in enumerate(spec.upsampling_ratios):
        x = convnext(trans_conv(x, p.upsample[i][0].conv, factor), ctx, p.upsample[i][1])
    if lead is not None:  # causal: the first `lead` outputs of the next conv need only these inputs
        x = x.slice(0, lead, 2)
    x = causal_conv(x, ctx, p.decoder[0])
    for b, rate in enumerate(spec.upsample_rates):
        block = p.decoder[b + 1].block
        x = causal_trans_conv(snake(x, block[0]), ctx, block[1], rate, convs if b else PLAIN)
        for j, dilation in enumerate((1, 3, 9)):
            x = residual_unit(x, ctx, block[j + 2], dilation, convs)
    last = len(spec.upsample_rates) + 1
    x = causal_conv(snake(x, p.decoder[last]), ctx, p.decoder[last + 1], convs=convs)
    return op.clamp(x, -1.0, 1.0).squeeze(1)


def build_codec_decoder(ckpt: Checkpoint, weights: Weights, convs: Convs = PLAIN) -> ov.Model:
    """The offline decoder for any batch and length: codes [B, Q, T] i64 -> pcm [B, T·1920] f32.

    Attention is explicit over all T×T scores with a window bias, so memory grows with T²
    (≈ 16·T²·4 bytes per layer: 10 MB at 400 frames, 0.6 GB at 3000); long streams belong
    to the streaming graphs."""
    spec = ckpt.spec.codec_decoder
    codes = param("codes", [-1, spec.num_quantizers, -1], ov.Type.i64)
    pcm = decode(codes, OfflineContext(spec.sliding_window), spec, Params(ckpt.codec, weights, "decoder."),
                 convs=convs)
    model = ov.Model([result(pcm, "pcm")], [codes.node], "codec")
    log.info("codec decoder graph: %d transformer layers, %d ops", spec.num_layers, len(model.get_ordered_ops()))
    return model
