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
from openvino import opset13 as op

from ..model.checkpoint import Checkpoint, TensorStore
from ..model.spec import SpeakerEncoderSpec
from .codec import named
from .ops import Weights, f32, i64, linear, out

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


class Builder:
    """The graph's blocks, reading weights by name from one TensorStore."""

    def __init__(self, spec: SpeakerEncoderSpec, store: TensorStore, weights: Weights) -> None:
        self.spec, self.store, self.w = spec, store, weights

    # ----------------------------------------------------------------------- primitives

    def conv(self, x: ov.Output, prefix: str, dilation: int = 1) -> ov.Output:
        """Conv1d(padding="same", padding_mode="reflect") + bias on x [B, T, C_in] -> [B, T, C_out]:
        y[t] = Σ_j W[:, :, j] · xpad[t + j·dilation] + b, as one MatMul over the k taps
        concatenated on the channels."""
        weight = self.store.get(prefix + "weight")  # torch [out, in, k]
        k = weight.shape[-1]
        if k > 1:
            left, right = same_padding(k, dilation)
            x = out(op.pad(x, i64([0, left, 0]), i64([0, right, 0]), "reflect"))
            x = out(op.concat([shifted(x, j * dilation, left + right) for j in range(k)], axis=2))
        w2d = weight.transpose(0, 2, 1).reshape(weight.shape[0], -1)  # [out, k·in], tap-major like x
        return linear(x, self.w(w2d), f32(self.store.get(prefix + "bias")))

    def tdnn(self, x: ov.Output, prefix: str, dilation: int = 1) -> ov.Output:
        """TimeDelayNetBlock: conv + ReLU."""
        return out(op.relu(self.conv(x, prefix + "conv.", dilation)))

    def pointwise(self, x: ov.Output, prefix: str) -> ov.Output:
        """A 1×1 conv on a single frame, as a MatMul: x [B, C_in] -> [B, C_out]."""
        weight = self.store.get(prefix + "weight")
        return linear(x, self.w(weight[:, :, 0]), f32(self.store.get(prefix + "bias")))

    # ----------------------------------------------------------------------- blocks

    def res2net(self, x: ov.Output, prefix: str, dilation: int) -> ov.Output:
        """Res2NetBlock: part 0 passes through, part 1 gets a TDNN, part i ≥ 2 a TDNN of
        (part i + output of part i-1); the outputs are concatenated back."""
        scale = self.spec.res2net_scale
        parts = op.split(x, i64(2), scale).outputs()
        outputs = [parts[0]]
        for i in range(1, scale):
            inp = parts[i] if i == 1 else out(op.add(parts[i], outputs[-1]))
            outputs.append(self.tdnn(inp, f"{prefix}blocks.{i - 1}.", dilation))
        return out(op.concat(outputs, axis=2))

    def squeeze_excitation(self, x: ov.Output, prefix: str) -> ov.Output:
        """x · sigmoid(conv2(relu(conv1(mean over time of x)))), per channel."""
        s = op.reduce_mean(x, i64([1]), keep_dims=False)  # [B, C]
        s = op.relu(self.pointwise(s, prefix + "conv1."))
        s = op.sigmoid(self.pointwise(s, prefix + "conv2."))
        return out(op.multiply(x, op.unsqueeze(s, i64([1]))))

    def se_res2net(self, x: ov.Output, prefix: str, dilation: int) -> ov.Output:
        """SqueezeExcitationRes2NetBlock: TDNN k1 → Res2Net → TDNN k1 → SE, plus the input."""
        h = self.tdnn(x, prefix + "tdnn1.")
        h = self.res2net(h, prefix + "res2net_block.", dilation)
        h = self.tdnn(h, prefix + "tdnn2.")
        h = self.squeeze_excitation(h, prefix + "se_block.")
        return out(op.add(h, x))

    def attentive_pooling(self, x: ov.Output, prefix: str) -> ov.Output:
        """AttentiveStatisticsPooling without padding masks (the official forward builds an
        all-ones mask: every row is one full-length clip): x [B, T, C] -> [B, 2C] = [mean, std].

        The attention sees x next to its global mean and std (uniform weights 1/T); the
        statistics are then recomputed with the softmax weights over time. Both std's are
        sqrt(max(Σ w·(x - mean)², eps))."""
        mean, std = statistics(x, None)
        context = [out(op.broadcast(op.unsqueeze(s, i64([1])), op.shape_of(x))) for s in (mean, std)]
        attention = self.tdnn(out(op.concat([x, *context], axis=2)), prefix + "tdnn.")
        attention = self.conv(out(op.tanh(attention)), prefix + "conv.")
        attention = out(op.softmax(attention, 1))
        mean, std = statistics(x, attention)
        return out(op.concat([mean, std], axis=1))

    def encode(self, mels: ov.Output) -> ov.Output:
        """mels [B, T, mel_dim] -> x-vector [B, enc_dim]."""
        spec = self.spec
        x = self.tdnn(mels, P + "blocks.0.", spec.dilations[0])  # channels stay last throughout
        hidden = []
        for i in range(1, len(spec.channels) - 1):
            x = self.se_res2net(x, f"{P}blocks.{i}.", spec.dilations[i])
            hidden.append(x)
        x = self.tdnn(out(op.concat(hidden, axis=2)), P + "mfa.", spec.dilations[-1])
        pooled = self.attentive_pooling(x, P + "asp.")
        return self.pointwise(pooled, P + "fc.")


def shifted(x: ov.Output, start: int, total: int) -> ov.Output:
    """Frames start .. start + T - 1 of x [B, T + total, C] padded by `total` frames."""
    stop = start - total if start < total else np.iinfo(np.int64).max
    return out(op.slice(x, i64([start]), i64([stop]), i64([1]), i64([1])))


def statistics(x: ov.Output, weights: ov.Output | None) -> tuple[ov.Output, ov.Output]:
    """Weighted mean and std over time of x [B, T, C] -> two [B, C]; weights [B, T, C] sum
    to one over time, None means uniform (1/T) as in the official global context."""
    if weights is None:
        mean = op.reduce_mean(x, i64([1]), keep_dims=True)
        var = op.reduce_mean(op.power(op.subtract(x, mean), f32(2.0)), i64([1]), keep_dims=False)
    else:
        mean = op.reduce_sum(op.multiply(weights, x), i64([1]), keep_dims=True)
        var = op.reduce_sum(op.multiply(weights, op.power(op.subtract(x, mean), f32(2.0))), i64([1]),
                            keep_dims=False)
    std = op.sqrt(op.maximum(var, f32(STATS_EPS)))
    return out(op.squeeze(mean, i64([1]))), out(std)


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
    mels = op.parameter([-1, -1, spec.mel_dim], ov.Type.f32, name="mels")
    named(mels, "mels")
    xvector = Builder(spec, ckpt.main, weights).encode(out(mels))
    result = op.result(xvector, name="xvector")
    named(result, "xvector")
    model = ov.Model([result], [mels], "speaker_encoder")
    log.info("speaker encoder graph: %d -> %d, channels %s, %s weights", spec.mel_dim, spec.enc_dim,
             list(spec.channels), weights.fmt)
    return model
