"""The codec decoder's last blocks in INT8: calibrated post-training quantization, no PyTorch.

On a CPU without BF16 (the N100 / Core Ultra class) the decoder runs in f32 and is compute
bound: ~2.4 G multiply-adds a frame at full size, a third of a 1.7B frame's time there. Its
convolutions after the first decoder block's upsampling one (768 input channels and fewer) are
two thirds of those multiply-adds; in INT8 they run on the CPU's VNNI dot products at about
twice the speed, for the least noise of any such selection (docs/BENCHMARKS.md, "The decoder
in INT8"). Only those convolutions change: their inputs pass a FakeQuantize (one symmetric
range per tensor, calibrated) and their weights are int8 with one scale per output channel,
dequantized in the graph, the pattern OpenVINO's low-precision transformations turn into an
int8 convolution (docs/OPENVINO.md §17). Everything else — the transformer, SnakeBeta, the
state — stays as in the float graphs.

The ranges come from the float graph itself: `calibrate` decodes streams of random codes chunk
by chunk with the state carried, as the runtime does, and takes each convolution input's
largest magnitude per stream and chunk; a range is the median of those (a loud chunk's peak
does not coarsen every other chunk's steps; what lies beyond is clamped)."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import openvino as ov

from ..model.checkpoint import Checkpoint
from ..model.stream_io import FRAMES, NEXT, STATE
from .codec import Convs, last_taps
from .codec_stream import build_codec_steady
from .expr import T, f32, op, result
from .ops import Params, Weights

log = logging.getLogger(__name__)

LEVELS = 256  # int8
CALIBRATION_FRAMES = 8  # the steady chunk the runtime decodes most
CALIBRATION_STREAMS = 4
CALIBRATION_CHUNKS = 6


@dataclass
class ProbedConvs(Convs):
    """Float convolutions that also output each input's largest magnitude per stream ([B]),
    named by the convolution's checkpoint prefix: what `calibrate` reads."""

    probes: dict[str, T] = field(default_factory=dict)

    def __call__(self, x: T, weight: np.ndarray, p: Params, dilation: int, taps: int) -> T:
        self.probes[p.prefix] = op.reduce_max(op.abs(x), [1, 2], False)
        return super().__call__(x, weight, p, dilation, taps)


@dataclass(frozen=True)
class Int8Convs(Convs):
    """INT8 convolutions: ranges[prefix] is the largest input magnitude kept of each one."""

    ranges: dict[str, float]

    def __call__(self, x: T, weight: np.ndarray, p: Params, dilation: int, taps: int) -> T:
        if p.prefix not in self.ranges:
            raise KeyError(f"no calibrated range for the convolution {p.prefix}")
        step = np.float32(self.ranges[p.prefix] / 127.0)
        lo, hi = f32(np.float32(-128.0) * step), f32(np.float32(127.0) * step)
        quantized = op.fake_quantize(x, lo, hi, lo, hi, LEVELS)
        q, scale = int8_weight(weight)  # scales from all k taps: a fresh graph's fewer taps round alike
        w = op.convert(op.constant(last_taps(q, taps)), ov.Type.f32) * f32(scale[:, None, None])
        return op.convolution(quantized, w, [1], [0], [0], [dilation])


def int8_weight(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """weight [out, in, k] -> (int8 values, f32 scale per output channel), symmetric in ±127."""
    w = np.asarray(weight, np.float32)
    peak = np.abs(w).reshape(w.shape[0], -1).max(axis=1)
    scale = np.where(peak > 0, peak / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None, None]), -127, 127).astype(np.int8)
    return q, scale


def calibrate(src: Path, frames: int = CALIBRATION_FRAMES, streams: int = CALIBRATION_STREAMS,
              chunks: int = CALIBRATION_CHUNKS, seed: int = 0) -> dict[str, float]:
    """Each quantized convolution's input range, from the f32 steady graph of `frames` frames
    decoding `streams` streams of uniformly random codes for `chunks` chunks (module docstring)."""
    start = time.perf_counter()
    ckpt = Checkpoint(src)
    probed = ProbedConvs()
    model = build_codec_steady(ckpt, Weights("fp32"), frames, probed)
    names = list(probed.probes)
    model.add_results([result(t, f"probe.{i}") for i, t in enumerate(probed.probes.values())])
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    del model
    request = compiled.create_infer_request()
    spec = ckpt.spec.codec_decoder
    rng = np.random.default_rng(seed)
    state = {}
    for port in compiled.inputs:
        name = port.get_any_name()
        if name.startswith(STATE):
            shape = [streams, *(d.get_length() for d in list(port.get_partial_shape())[1:])]
            state[name] = np.zeros(shape, port.get_element_type().to_dtype())
    peaks = np.zeros((chunks, streams, len(names)), np.float32)
    for c in range(chunks):
        codes = rng.integers(0, spec.codebook_size, (streams, spec.num_quantizers, frames), dtype=np.int64)
        out = request.infer({"codes": codes, FRAMES: np.full(streams, frames, np.int64), **state})
        by_name = {port.get_any_name(): value for port, value in out.items()}
        state = {STATE + n[len(NEXT):]: v for n, v in by_name.items() if n.startswith(NEXT)}
        for i in range(len(names)):
            peaks[c, :, i] = by_name[f"probe.{i}"]
    ranges = {name: float(np.median(peaks[:, :, i])) for i, name in enumerate(names)}
    unusable = [name for name, r in ranges.items() if not (np.isfinite(r) and r > 0)]
    if unusable:  # a zero-width FakeQuantize would fail at load, or give NaN: refuse it here
        raise ValueError(f"codec INT8: the float decoder gave no usable input range for {', '.join(unusable)}")
    log.info("codec INT8: %d convolutions calibrated on %d random chunks of %d frames in %.1f s", len(names),
             chunks * streams, frames, time.perf_counter() - start)
    return ranges
