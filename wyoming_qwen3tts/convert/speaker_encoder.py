"""The Base models' speaker encoder (ECAPA-TDNN) as an OpenVINO graph: mels [B, T, 128] -> xvector [B, D].

Mirrors `Qwen3TTSSpeakerEncoder.forward` (the features come from `model.mel.log_mel`):

    TDNN (conv k5 + ReLU)
    → 3 × SE-Res2Net [TDNN k1 → Res2Net (8 parts, k3, dilation 2/3/4, each part fed the
      previous part's output) → TDNN k1 → squeeze-excitation (time mean → 1×1 → ReLU →
      1×1 → sigmoid, × channels)] + residual
    → MFA: TDNN k1 over the concatenated SE-Res2Net outputs
    → attentive statistics pooling (attention over [x, global mean, global std], then the
      attention-weighted mean and std)
    → 1×1 fc → [B, D]

Every conv of the official module uses padding="same" with padding_mode="reflect", so the
k>1 convs see reflected frames at both ends, not zeros (torch splits the padding
(k-1)·dilation as left = total // 2, right = the rest). Reflection needs more frames than
the padding: T ≥ 5 for the released architecture (`min_frames`; 1280 samples of audio).

The official module works on [B, C, T]; this graph keeps the input's [B, T, C] throughout and
writes every conv as a MatMul (a k>1 conv over its k shifted copies concatenated on the
channels). Same math; on the CPU plugin it avoids the layout reorders around Pad, Split and
Concat that blocked-layout Convolutions need, ≈20% faster at full size.
"""
from __future__ import annotations

import logging

import numpy as np
import openvino as ov

from ..model.checkpoint import Checkpoint, TensorStore
from ..model.spec import SpeakerEncoderSpec
from .expr import T, cat, f32, i64, op, param, result
from .ops import Params, Weights, linear

log = logging.getLogger(__name__)

P = "speaker_encoder."  # tensor-name prefix inside model.safetensors
STATS_EPS = 1e-12  # AttentiveStatisticsPooling.eps: the variance is clamped to it before the sqrt


def same_padding(kernel: int, dilation: int) -> tuple[int, int]:
    """(left, right) padding of torch's padding="same" for a stride-1 Conv1d."""
    total = dilation * (kernel - 1)
    return total // 2, total - total // 2


def min_frames(spec: SpeakerEncoderSpec) -> int:
    """Fewest mel frames the reflect padding allows (torch: padding < input length)."""
    return max(same_padding(k, d)[1] for k, d in zip(spec.kernel_sizes, spec.dilations)) + 1


# ------------------------------------------------------------------------------- primitives

def conv(x: T, p: Params, dilation: int = 1) -> T:
    """Conv1d(padding="same", padding_mode="reflect") + bias on x [B, T, C_in] -> [B, T, C_out]:
    y[t] = Σ_j W[:, :, j] · xpad[t + j·dilation] + b, as one MatMul over the k taps
    concatenated on the channels."""
    weight = p.array("weight")  # torch [out, in, k]
    k = weight.shape[-1]
    if k > 1:
        left, right = same_padding(k, dilation)
        x = op.pad(x, i64([0, left, 0]), i64([0, right, 0]), "reflect")
        x = cat([shifted(x, j * dilation, left + right) for j in range(k)], 2)
    w2d = weight.transpose(0, 2, 1).reshape(weight.shape[0], -1)  # [out, k·in], tap-major like x
    return linear(x, p.weights(w2d), p.const("bias"))


def tdnn(x: T, p: Params, dilation: int = 1) -> T:
    """TimeDelayNetBlock: conv + ReLU."""
    return op.relu(conv(x, p.conv, dilation))


def pointwise(x: T, p: Params) -> T:
    """A 1×1 conv on a single frame, as a MatMul: x [B, C_in] -> [B, C_out]."""
    return linear(x, p.weights(p.array("weight")[:, :, 0]), p.const("bias"))


def shifted(x: T, start: int, total: int) -> T:
    """Frames start .. start + T - 1 of x [B, T + total, C] padded by `total` frames."""
    return x.slice(start, start - total if start < total else np.iinfo(np.int64).max, 1)


def statistics(x: T, weights: T | None) -> tuple[T, T]:
    """Weighted mean and std over time of x [B, T, C] -> two [B, C]; weights [B, T, C] sum
    to one over time, None means uniform (1/T) as in the official global context."""
    if weights is None:
        mean = x.mean(1, keepdim=True)
        var = ((x - mean) ** 2.0).mean(1)
    else:
        mean = (weights * x).sum(1, keepdim=True)
        var = (weights * (x - mean) ** 2.0).sum(1)
    std = op.sqrt(op.maximum(var, f32(STATS_EPS)))
    return mean.squeeze(1), std


# ------------------------------------------------------------------------------- blocks

def res2net(x: T, p: Params, scale: int, dilation: int) -> T:
    """Res2NetBlock: part 0 passes through, part 1 gets a TDNN, part i ≥ 2 a TDNN of
    (part i + output of part i-1); the outputs are concatenated back."""
    parts = x.chunk(scale, 2)
    outputs = [parts[0]]
    for i in range(1, scale):
        outputs.append(tdnn(parts[i] if i == 1 else parts[i] + outputs[-1], p.blocks[i - 1], dilation))
    return cat(outputs, 2)


def squeeze_excitation(x: T, p: Params) -> T:
    """x · sigmoid(conv2(relu(conv1(mean over time of x)))), per channel."""
    s = op.sigmoid(pointwise(op.relu(pointwise(x.mean(1), p.conv1)), p.conv2))  # [B, C]
    return x * s.unsqueeze(1)


def se_res2net(x: T, p: Params, scale: int, dilation: int) -> T:
    """SqueezeExcitationRes2NetBlock: TDNN k1 → Res2Net → TDNN k1 → SE, plus the input."""
    h = tdnn(res2net(tdnn(x, p.tdnn1), p.res2net_block, scale, dilation), p.tdnn2)
    return squeeze_excitation(h, p.se_block) + x


def attentive_pooling(x: T, p: Params) -> T:
    """AttentiveStatisticsPooling without padding masks (the official forward builds an
    all-ones mask: every row is one full-length clip): x [B, T, C] -> [B, 2C] = [mean, std].

    The attention sees x next to its global mean and std (uniform weights 1/T); the
    statistics are then recomputed with the softmax weights over time. Both std's are
    sqrt(max(Σ w·(x - mean)², eps))."""
    context = [op.broadcast(s.unsqueeze(1), op.shape_of(x)) for s in statistics(x, None)]
    attention = conv(op.tanh(tdnn(cat([x, *context], 2), p.tdnn)), p.conv).softmax(1)
    return cat(statistics(x, attention), 1)


def encode(mels: T, spec: SpeakerEncoderSpec, p: Params) -> T:
    """mels [B, T, mel_dim] -> x-vector [B, enc_dim]; channels stay last throughout."""
    x = tdnn(mels, p.blocks[0], spec.dilations[0])
    hidden = []
    for i in range(1, len(spec.channels) - 1):
        x = se_res2net(x, p.blocks[i], spec.res2net_scale, spec.dilations[i])
        hidden.append(x)
    x = tdnn(cat(hidden, 2), p.mfa, spec.dilations[-1])
    return pointwise(attentive_pooling(x, p.asp), p.fc)


def check_spec(spec: SpeakerEncoderSpec, store: TensorStore) -> None:
    """Fail early, naming the mismatch, on configs the official module could not run either."""
    n = len(spec.channels)
    if not n == len(spec.kernel_sizes) == len(spec.dilations) or n < 3:
        raise ValueError(f"speaker encoder: channels/kernel_sizes/dilations lengths {n}, "
                         f"{len(spec.kernel_sizes)}, {len(spec.dilations)} (need equal, ≥ 3)")
    for i in range(1, n - 1):
        if spec.channels[i] % spec.res2net_scale or spec.channels[i] != spec.channels[i - 1]:
            raise ValueError(f"speaker encoder block {i}: {spec.channels[i - 1]} -> {spec.channels[i]} channels "
                             f"with res2net scale {spec.res2net_scale} (need equal widths divisible by the scale)")
    if sum(spec.channels[1:-1]) != spec.channels[-1]:
        raise ValueError(f"speaker encoder: MFA takes {sum(spec.channels[1:-1])} channels, "
                         f"config says {spec.channels[-1]}")
    expected = {
        P + "blocks.0.conv.weight": (spec.channels[0], spec.mel_dim, spec.kernel_sizes[0]),
        P + "mfa.conv.weight": (spec.channels[-1], spec.channels[-1], spec.kernel_sizes[-1]),
        P + "asp.tdnn.conv.weight": (spec.attention_channels, 3 * spec.channels[-1], 1),
        P + "asp.conv.weight": (spec.channels[-1], spec.attention_channels, 1),
        P + "fc.weight": (spec.enc_dim, 2 * spec.channels[-1], 1),
    }
    for name, shape in expected.items():
        store.check(name, shape)


def build_speaker_encoder(ckpt: Checkpoint, weights: Weights) -> ov.Model:
    """The x-vector of log-mel features: mels [B, T, 128] f32 -> xvector [B, enc_dim] f32.

    B and T are dynamic; T must be at least min_frames(spec) (5 for the released models).
    Every row is pooled over all its T frames: batch only equal-length clips."""
    spec = ckpt.spec.speaker_encoder
    if spec is None:
        raise ValueError(f"{ckpt.root} is a {ckpt.spec.model_type} model: only Base models have a speaker encoder")
    check_spec(spec, ckpt.main)
    mels = param("mels", [-1, -1, spec.mel_dim], ov.Type.f32)
    xvector = encode(mels, spec, Params(ckpt.main, weights, P))
    model = ov.Model([result(xvector, "xvector")], [mels.node], "speaker_encoder")
    log.info("speaker encoder graph: %d -> %d, channels %s, %s weights", spec.mel_dim, spec.enc_dim,
             list(spec.channels), weights.fmt)
    return model
