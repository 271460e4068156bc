"""Exact streaming codec decoder graphs: static chunks of n frames, explicit state in and out.

The decoder is strictly causal (docs/MODEL.md §8.1), so a stream decoded chunk by chunk equals
one offline decode if every block gets its real past instead of zeros. That past is the state:

    state.position                               [B] i64   frames decoded so far (RoPE continues)
    state.<layer>.self_attn.key / .value         [B, H, window-1, D]   RoPE'd keys, values of the
                                                  last window-1 positions (zeros + masked at start)
    state.<conv>                                  [B, C, (k-1)·dilation]  left tail of each causal
                                                  conv's input
    state.<trans conv>                            [B, C, 1]  last input sample of each k=2r, s=r
                                                  transposed conv (its overlap with the next block)

`build_codec_steady` takes `codes` [B, Q, n], `frames` [B] (how many of the n frames are real)
and every `state.*`, returns `pcm` [B, n·1920] and every `next.*` (same names, same shapes): the
state after the real frames, so a chunk of any m ≤ n frames is decoded exactly by padding its
codes to n, keeping the first m·1920 samples and carrying the state on — by causality padding
frames only change samples after them, and the state is taken where the real frames end. One
compiled steady graph therefore decodes every chunk size up to n, a stream's first chunk
included (zeros at position 0 are exactly the first-chunk graph's computation).
`build_codec_first` is the steady graph of a fresh stream with every chunk full: no inputs but
its codes. All shapes are static except B, so a batch of streams at different positions runs in
one call.
"""
from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as op

from ..model.checkpoint import Checkpoint
from ..model.stream_io import FRAMES, NEXT, STATE
from .codec import Context, decode, named, seen_to_bias
from .ops import Weights, i64, out, rope_tables

log = logging.getLogger(__name__)

POSITION = "position"


class StreamContext(Context):
    """Every block's past comes from a state input (steady) or zeros (first), and every
    block leaves its new past as an output."""

    def __init__(self, codes: ov.Output, frames: int, window: int, first: bool) -> None:
        self.frames, self.cache, self.first = frames, window - 1, first
        self.batch = out(op.gather(op.shape_of(codes), i64([0]), i64(0)))
        self.params: list[ov.Node] = []
        self.results: list[ov.Node] = []
        self._bias: ov.Output | None = None
        self.real = i64(frames) if first else self.input(FRAMES, [], ov.Type.i64)  # [B] in a steady graph
        self.position = self.past(POSITION, [], ov.Type.i64)
        self.emit(POSITION, out(op.add(self.position, self.real)))

    def input(self, name: str, shape: list[int], dtype: ov.Type) -> ov.Output:
        """A graph input `name` [B, *shape]."""
        p = op.parameter([-1, *shape], dtype, name=name)
        named(p, name)
        self.params.append(p)
        return out(p)

    def past(self, name: str, shape: list[int], dtype: ov.Type = ov.Type.f32) -> ov.Output:
        """State input `name` [B, *shape]: a parameter, or zeros in the first graph."""
        if self.first:
            zero = op.constant(np.zeros((), dtype=dtype.to_dtype()))
            return out(op.broadcast(zero, op.concat([self.batch, i64(shape)], 0) if shape else self.batch))
        return self.input(STATE + name, shape, dtype)

    def emit(self, name: str, value: ov.Output) -> None:
        r = op.result(value, name=NEXT + name)
        named(r, NEXT + name)
        self.results.append(r)

    def tail(self, full: ov.Output, per_frame: int, size: int) -> ov.Output:
        """The `size` positions of full [B, ·, size + n·per_frame, ...] (axis 2) that end where
        the real frames end: the state the next chunk starts from (a Gather copies, exactly)."""
        if self.first:
            return out(op.slice(full, i64([-size]), i64([np.iinfo(np.int64).max]), i64([1]), i64([2])))
        start = op.multiply(self.real, i64(per_frame))  # [B]
        index = op.add(op.unsqueeze(start, i64([1])), i64(np.arange(size)[None, :]))  # [B, size]
        return out(op.gather(full, index, i64(2), 1))

    def left(self, x: ov.Output, name: str, size: int) -> ov.Output:
        length = x.get_partial_shape()[2].get_length()  # n frames of length // n samples each
        full = out(op.concat([self.past(name, [x.get_partial_shape()[1].get_length(), size]), x], 2))
        self.emit(name, self.tail(full, length // self.frames, size))
        return full

    def rope(self, x: ov.Output, head_dim: int, theta: float) -> tuple[ov.Output, ov.Output]:
        """In-graph in every graph (the first one too, rather than numpy constants): the
        same cos/sin kernel as the offline graph keeps streaming bit-identical to it."""
        positions = op.add(op.unsqueeze(self.position, i64([1])), i64(np.arange(self.frames)[None, :]))
        return rope_tables(positions, head_dim, theta)

    def keys(self, name: str, k: ov.Output, v: ov.Output) -> tuple[ov.Output, ov.Output, ov.Output]:
        """Keys m = 0..cache+n-1 (the cache, then the chunk): query i sees i ≤ m ≤ i+cache,
        and of the cache only the entries that hold a real position (m ≥ cache - position)."""
        heads, dim = (k.get_partial_shape()[a].get_length() for a in (1, 3))
        k_all, v_all = (out(op.concat([self.past(f"{name}.{kind}", [heads, self.cache, dim]), new], 2))
                        for kind, new in (("key", k), ("value", v)))
        for kind, full in (("key", k_all), ("value", v_all)):
            self.emit(f"{name}.{kind}", self.tail(full, 1, self.cache))
        if self._bias is None:
            n, total = self.frames, self.cache + self.frames
            query, key = np.arange(n)[:, None], np.arange(total)[None, :]
            band = (key >= query) & (key <= query + self.cache)  # [n, total]
            if self.first:  # position 0: no cache entry is real
                self._bias = seen_to_bias(op.constant(band[None, None] & (key >= self.cache)[None, None]))
            else:
                real = op.greater_equal(i64(key), op.subtract(i64(self.cache), op.unsqueeze(self.position, i64([1]))))
                seen = op.logical_and(op.constant(band[None]), op.unsqueeze(real, i64([1])))  # [B, n, total]
                self._bias = out(op.unsqueeze(seen_to_bias(seen), i64([1])))
        return k_all, v_all, self._bias


def _build(ckpt: Checkpoint, weights: Weights, frames: int, first: bool) -> ov.Model:
    if frames < 1:
        raise ValueError(f"a codec chunk needs at least one frame, got {frames}")
    spec = ckpt.spec.codec_decoder
    codes = op.parameter([-1, spec.num_quantizers, frames], ov.Type.i64, name="codes")
    named(codes, "codes")
    ctx = StreamContext(codes.output(0), frames, spec.sliding_window, first)
    pcm = op.result(decode(codes.output(0), ctx, spec, ckpt.codec, weights), name="pcm")
    named(pcm, "pcm")
    kind = "first" if first else "steady"
    model = ov.Model([pcm, *ctx.results], [codes, *ctx.params], f"codec_{kind}_{frames}")
    log.info("codec %s graph: %d frames, %d state tensors, %d ops", kind, frames, len(ctx.results),
             len(model.get_ordered_ops()))
    return model


def build_codec_first(ckpt: Checkpoint, weights: Weights, frames: int) -> ov.Model:
    """The first chunk of a stream: codes [B, Q, frames] -> pcm and the state after it."""
    return _build(ckpt, weights, frames, first=True)


def build_codec_steady(ckpt: Checkpoint, weights: Weights, frames: int) -> ov.Model:
    """Any chunk of up to `frames` frames: codes [B, Q, frames], the real frames [B] and the
    state -> pcm and the state after the real frames."""
    return _build(ckpt, weights, frames, first=False)
