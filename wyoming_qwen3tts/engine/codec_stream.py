"""Drives the streaming codec graphs (convert/codec_stream.py) for many streams.

Each stream keeps its decoder state on the host between calls (≈5 MB at full size, mostly
the transformer's key/value window). A call decodes one chunk for a batch of streams with
the same chunk size: their states are stacked into the batch, and split again afterwards.

- A fresh stream has no state: a first-chunk graph needs none, and a steady graph is fed
  zeros at position 0, which is exactly what the first-chunk graph computes. So fresh and
  running streams can share one steady call.
- A steady graph of n frames decodes any chunk of m ≤ n frames (its `frames` input says how
  many are real): the codes are padded with code 0, the output cut to the m frames, and the
  state it returns is the one after them. So one compiled steady graph serves a whole
  schedule (first chunk, steady chunks, a stream's end, a reference's priming), and every
  compiled full-size decoder graph costs 0.3–0.5 GB. Older conversions' steady graphs have
  no `frames` input: a chunk shorter than such a graph ends its stream (its state has seen
  the padding).
- Graphs compiled with a static batch (reshaped before compiling, which lets the CPU
  plugin fuse SnakeBeta's elementwise chain) are filled up with idle rows, or called
  several times for more streams than their batch. On a CPU the decoder is compute-bound
  (batching saves little), so a static batch of 1 is the fast choice there.
"""
from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import openvino as ov

from ..model.stream_io import FRAMES, NEXT, STATE

log = logging.getLogger(__name__)


@dataclass
class CodecStream:
    """One stream's decoder state between calls."""

    state: dict[str, np.ndarray] | None = None  # state name -> [1, ...]; None before the first chunk
    frames: int = 0  # frames decoded so far
    closed: bool = False  # a partial chunk was decoded by a graph that cannot carry the state on

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.state.values()) if self.state else 0


@dataclass
class _Graph:
    compiled: ov.CompiledModel
    request: ov.InferRequest = field(init=False)
    batch: int | None = field(init=False)  # a static batch (compiled after reshape) or None
    frames: int = field(init=False)  # the chunk length it is built for
    any_length: bool = field(init=False)  # takes the real frame count: decodes any chunk up to `frames`
    stateful: bool = field(init=False)  # takes the state (a steady graph; a first graph starts from zeros)

    def __post_init__(self) -> None:
        self.request = self.compiled.create_infer_request()
        codes = self.compiled.input("codes").get_partial_shape()
        self.batch = codes[0].get_length() if codes[0].is_static else None
        self.frames = codes[2].get_length()
        names = {name for port in self.compiled.inputs for name in port.get_names()}
        self.any_length = FRAMES in names
        self.stateful = any(name.startswith(STATE) for name in names)


class StreamingCodec:
    """Compiled first/steady graphs by chunk size, and the stacking of per-stream state."""

    def __init__(self, first: Mapping[int, ov.CompiledModel], steady: Mapping[int, ov.CompiledModel],
                 sizes: Collection[int] = ()) -> None:
        """first/steady: compiled graphs by the chunk length they are built for. sizes:
        further chunk sizes to decode (a schedule's), each with the shortest steady graph
        that takes the real frame count and is at least as long."""
        if not first and not steady:
            raise ValueError("no codec graphs")
        self.first = {n: _Graph(m) for n, m in first.items()}
        self.steady = {n: _Graph(m) for n, m in steady.items()}
        self._graphs = sorted(self.steady.values(), key=lambda g: -g.frames)  # each steady graph once, longest first
        for size in set(sizes) - set(self.steady):
            longer = [g for g in reversed(self._graphs) if g.any_length and g.frames >= size]
            if longer:
                self.steady[size] = longer[0]
        some = next(iter(self.first.values() or self.steady.values())).compiled
        self.samples_per_frame = some.output("pcm").get_partial_shape()[1].get_length() // some.input(
            "codes").get_partial_shape()[2].get_length()
        self.quantizers = some.input("codes").get_partial_shape()[1].get_length()
        # state layout (name -> per-row shape and dtype) from the state outputs
        self.layout = {o.get_any_name()[len(NEXT):]: (tuple(d.get_length() for d in o.get_partial_shape()[1:]),
                                                      o.get_element_type().to_dtype())
                       for o in some.outputs if o.get_any_name().startswith(NEXT)}

    def _zeros(self) -> dict[str, np.ndarray]:
        return {name: np.zeros((1, *shape), dtype) for name, (shape, dtype) in self.layout.items()}

    def decode(self, streams: Sequence[CodecStream], chunks: Sequence[np.ndarray], size: int) -> list[np.ndarray]:
        """Decode one chunk per stream with the graph for `size` frames; chunks are codes
        [Q, m] with 1 ≤ m ≤ size. Returns pcm [m·1920] f32 each."""
        if len(streams) != len(chunks) or not streams:
            raise ValueError("need one chunk per stream, and at least one stream")
        fresh = all(s.state is None for s in streams)
        if fresh and size in self.first:
            graph = self.first[size]
        elif size in self.steady:
            graph = self.steady[size]
        else:
            raise ValueError(f"no {'first or ' if fresh else ''}steady codec graph of {size} frames")
        for stream, chunk in zip(streams, chunks):
            if stream.closed:
                raise ValueError("stream already ended with a partial chunk")
            if chunk.ndim != 2 or chunk.shape[0] != self.quantizers or not 1 <= chunk.shape[1] <= size:
                raise ValueError(f"chunk must be codes [{self.quantizers}, 1..{size}], got {chunk.shape}")
        return self._run(graph, streams, chunks)

    def _run(self, graph: _Graph, streams: Sequence[CodecStream], chunks: Sequence[np.ndarray]) -> list[np.ndarray]:
        if graph.batch and len(streams) > graph.batch:  # a static batch too small: several calls
            k = graph.batch
            return [pcm for i in range(0, len(streams), k)
                    for pcm in self._run(graph, streams[i:i + k], chunks[i:i + k])]
        rows = graph.batch or len(streams)  # a static-batch graph gets idle rows (zero codes and state)
        codes = np.zeros((rows, self.quantizers, graph.frames), np.int64)
        for row, chunk in enumerate(chunks):
            codes[row, :, :chunk.shape[1]] = chunk
        feeds: dict[str, np.ndarray] = {"codes": codes}
        if graph.any_length:
            feeds[FRAMES] = np.array([c.shape[1] for c in chunks] + [graph.frames] * (rows - len(chunks)), np.int64)
        if graph.stateful:
            zeros = self._zeros()
            states = [s.state or zeros for s in streams] + [zeros] * (rows - len(streams))
            for name in self.layout:
                parts = [st[name] for st in states]
                feeds[STATE + name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        req = graph.request
        req.infer(feeds)
        pcm = req.get_tensor("pcm").data
        pcms = []
        for row, (stream, chunk) in enumerate(zip(streams, chunks)):
            frames = chunk.shape[1]
            pcms.append(pcm[row, :frames * self.samples_per_frame].copy())
            stream.frames += frames
            if frames < graph.frames and not graph.any_length:
                stream.closed, stream.state = True, None
            else:
                stream.state = {name: req.get_tensor(NEXT + name).data[row:row + 1].copy() for name in self.layout}
        return pcms

    def prime(self, codes: np.ndarray) -> CodecStream:
        """A stream that has decoded `codes` [Q, R] already, their audio dropped: in-context
        cloning decodes the reference codes in front of the generated ones. Runs the steady
        graphs, the longest that fits first; the rest takes a graph that decodes shorter
        chunks, or there must be graphs whose lengths add up to R (a 1-frame graph does)."""
        stream, start, total = CodecStream(), 0, codes.shape[1]
        while start < total:
            left = total - start
            graph = next((g for g in self._graphs if g.frames <= left), None) or next(
                (g for g in reversed(self._graphs) if g.any_length), None)
            if graph is None:
                raise ValueError(f"steady codec graphs of {sorted(self.steady)} frames cannot cover {total} frames "
                                 f"exactly (compile the 1-frame graph)")
            take = min(graph.frames, left)
            self._run(graph, [stream], [codes[:, start:start + take]])
            start += take
        return CodecStream(state=stream.state)

    def decode_sequence(self, codes: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
        """One stream's codes [Q, T] decoded in consecutive calls of the given graph sizes
        (the last call may be partial; sizes beyond the codes are ignored)."""
        stream, parts, start = CodecStream(), [], 0
        for size in sizes:
            if start >= codes.shape[1]:
                break
            parts.extend(self.decode([stream], [codes[:, start:start + size]], size))
            start += size
        if start < codes.shape[1]:
            raise ValueError(f"sizes cover {start} of {codes.shape[1]} frames")
        return np.concatenate(parts)
