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
its codes. Conversions before format 3 carry such graphs for their first chunks, and the runtime
still loads them; the converter now exports steady graphs only (convert/pipeline.py). All shapes
are static except B, so a batch of streams at different positions runs in one call.
"""
from __future__ import annotations

import logging

import numpy as np
import openvino as ov

from ..model.checkpoint import Checkpoint
from ..model.stream_io import FRAMES, NEXT, STATE
from .codec import PLAIN, Context, Convs, decode, seen_to_bias
from .expr import T, cat, i64, op, param, result
from .ops import Params, Weights, rope_tables

log = logging.getLogger(__name__)

POSITION = "position"


class StreamContext(Context):
    """Every block's past comes from a state input (steady) or zeros (first), and every
    block leaves its new past as an output."""

    def __init__(self, codes: T, frames: int, window: int, first: bool, fresh: bool = False) -> None:
        """fresh: a first graph of one frame whose state outputs are not kept (codec.Context.fresh)."""
        if fresh and not (first and frames == 1):
            raise ValueError("a fresh context is a first graph of one frame")
        self.frames, self.cache, self.first, self.fresh = frames, window - 1, first, fresh
        self.batch = codes.batch()
        self.params: list[ov.Node] = []
        self.results: list[ov.Node] = []
        self._bias: T | None = None
        self.real = i64(frames) if first else self.input(FRAMES, [], ov.Type.i64)  # [B] in a steady graph
        self.position = self.past(POSITION, [], ov.Type.i64)
        self.emit(POSITION, self.position + self.real)

    def input(self, name: str, shape: list[int], dtype: ov.Type) -> T:
        """A graph input `name` [B, *shape]."""
        p = param(name, [-1, *shape], dtype)
        self.params.append(p.node)
        return p

    def past(self, name: str, shape: list[int], dtype: ov.Type = ov.Type.f32) -> T:
        """State input `name` [B, *shape]: a parameter, or zeros in the first graph."""
        if self.first:
            zero = op.constant(np.zeros((), dtype=dtype.to_dtype()))
            return op.broadcast(zero, cat([self.batch, i64(shape)], 0) if shape else self.batch)
        return self.input(STATE + name, shape, dtype)

    def emit(self, name: str, value: T) -> None:
        self.results.append(result(value, NEXT + name))

    def tail(self, full: T, per_frame: int, size: int) -> T:
        """The `size` positions of full [B, ·, size + n·per_frame, ...] (axis 2) that end where
        the real frames end: the state the next chunk starts from (a Gather copies, exactly).
        Where every frame is real (a first graph, and a 1-frame graph: its one frame is), a
        Slice takes them: 14.7 instead of 15.3 ms per 1-frame call (0.6B, bf16, back to back)."""
        if self.first or self.frames == 1:
            return full.slice(-size, np.iinfo(np.int64).max, 2)
        index = (self.real * per_frame).unsqueeze(1) + np.arange(size)[None, :]  # [B, size]
        return full.gather(index, 2, batch_dims=1)

    def left(self, x: T, name: str, size: int) -> T:
        full = cat([self.past(name, [x.dim(1), size]), x], 2)
        self.emit(name, self.tail(full, x.dim(2) // self.frames, size))  # n frames of x.dim(2) // n samples
        return full

    def rope(self, x: T, head_dim: int, theta: float) -> tuple[T, T]:
        """In-graph in every graph (the first one too, rather than numpy constants): the
        same cos/sin kernel as the offline graph keeps streaming bit-identical to it."""
        return rope_tables(self.position.unsqueeze(1) + np.arange(self.frames)[None, :], head_dim, theta)

    def keys(self, name: str, k: T, v: T) -> tuple[T, T, T]:
        """Keys m = 0..cache+n-1 (the cache, then the chunk): query i sees i ≤ m ≤ i+cache,
        and of the cache only the entries that hold a real position (m ≥ cache - position)."""
        heads, dim = k.dim(1), k.dim(3)
        k_all, v_all = (cat([self.past(f"{name}.{kind}", [heads, self.cache, dim]), new], 2)
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
                real = i64(key) >= i64(self.cache) - self.position.unsqueeze(1)
                seen = op.constant(band[None]) & real.unsqueeze(1)  # [B, n, total]
                self._bias = seen_to_bias(seen).unsqueeze(1)
        return k_all, v_all, self._bias


def _build(ckpt: Checkpoint, weights: Weights, frames: int, first: bool, convs: Convs = PLAIN) -> ov.Model:
    if frames < 1:
        raise ValueError(f"a codec chunk needs at least one frame, got {frames}")
    spec = ckpt.spec.codec_decoder
    codes = param("codes", [-1, spec.num_quantizers, frames], ov.Type.i64)
    ctx = StreamContext(codes, frames, spec.sliding_window, first)
    pcm = result(decode(codes, ctx, spec, Params(ckpt.codec, weights, "decoder."), convs=convs), "pcm")
    kind = "first" if first else "steady"
    model = ov.Model([pcm, *ctx.results], [codes.node, *ctx.params], f"codec_{kind}_{frames}")
    log.info("codec %s graph: %d frames, %d state tensors, %d ops", kind, frames, len(ctx.results),
             len(model.get_ordered_ops()))
    return model


def build_codec_first(ckpt: Checkpoint, weights: Weights, frames: int) -> ov.Model:
    """The first chunk of a stream: codes [B, Q, frames] -> pcm and the state after it (the
    first-chunk graphs of conversions before format 3, which the runtime still loads)."""
    return _build(ckpt, weights, frames, first=True)


def build_codec_lead(ckpt: Checkpoint, weights: Weights, samples: int, convs: Convs = PLAIN) -> ov.Model:
    """The start of a stream's first frame: codes [B, Q, 1] -> pcm [B, samples·480], the
    first `samples` of the frame's 4 latent samples decoded (docs/MODEL.md §8.3). No state
    comes out: the frame is decoded whole again by a chunk graph, which carries the stream on."""
    spec = ckpt.spec.codec_decoder
    per_frame = int(np.prod(spec.upsampling_ratios))
    if not 1 <= samples < per_frame:
        raise ValueError(f"a codec lead takes 1..{per_frame - 1} of the {per_frame} latent samples, got {samples}")
    codes = param("codes", [-1, spec.num_quantizers, 1], ov.Type.i64)
    # only audio comes out: what multiplies the zero past is left out (codec.Context.fresh)
    ctx = StreamContext(codes, 1, spec.sliding_window, first=True, fresh=True)
    pcm = decode(codes, ctx, spec, Params(ckpt.codec, weights, "decoder."), lead=samples, convs=convs)
    return ov.Model([result(pcm, "pcm")], [codes.node], f"codec_lead_{samples}")


def build_codec_steady(ckpt: Checkpoint, weights: Weights, frames: int, convs: Convs = PLAIN) -> ov.Model:
    """Any chunk of up to `frames` frames: codes [B, Q, frames], the real frames [B] and the
    state -> pcm and the state after the real frames. convs: codec.decode's."""
    return _build(ckpt, weights, frames, first=False, convs=convs)
