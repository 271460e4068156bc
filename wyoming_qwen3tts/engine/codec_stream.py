"""Drives the streaming codec graphs (convert/codec_stream.py) for many streams.

Each stream keeps its decoder state on the host between calls (≈5 MB at full size, mostly
the transformer's key/value window). A call decodes one chunk for a batch of streams with
the same chunk size: their states are stacked into the batch, and split again afterwards.

- A fresh stream has no state: a first-chunk graph needs none, and a steady graph is fed
  zeros at position 0, which is exactly what the first-chunk graph computes. So fresh and
  running streams can share one steady call.
- Graphs compiled with a static batch (reshaped before compiling, which lets the CPU
  plugin fuse SnakeBeta's elementwise chain) are filled up with idle rows, or called
  several times for more streams than their batch. On a CPU the decoder is compute-bound
  (batching saves little), so a static batch of 1 is the fast choice there.
- A chunk shorter than the graph (the end of a stream) is padded with code 0 and its output
  cut to its own frames: the decoder is causal, so this is exact. The stream is then closed,
  because its state has seen the padding.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import openvino as ov

log = logging.getLogger(__name__)

STATE, NEXT = "state.", "next."  # tensor-name prefixes (convert/codec_stream.py)


@dataclass
class CodecStream:
    """One stream's decoder state between calls."""

    state: dict[str, np.ndarray] | None = None  # state name -> [1, ...]; None before the first chunk
    frames: int = 0  # frames decoded so far
    closed: bool = False  # a partial last chunk was decoded

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.state.values()) if self.state else 0


@dataclass
class _Graph:
    compiled: ov.CompiledModel
    request: ov.InferRequest = field(init=False)
    batch: int | None = field(init=False)  # a static batch (compiled after reshape) or None

    def __post_init__(self) -> None:
        self.request = self.compiled.create_infer_request()
        dim = self.compiled.input("codes").get_partial_shape()[0]
        self.batch = dim.get_length() if dim.is_static else None


class StreamingCodec:
    """Compiled first/steady graphs by chunk size, and the stacking of per-stream state."""

    def __init__(self, first: Mapping[int, ov.CompiledModel], steady: Mapping[int, ov.CompiledModel]) -> None:
        if not first and not steady:
            raise ValueError("no codec graphs")
        self.first = {n: _Graph(m) for n, m in first.items()}
        self.steady = {n: _Graph(m) for n, m in steady.items()}
        some = next(iter(self.first.values() or self.steady.values())).compiled
        self.samples_per_frame = some.output("pcm").get_partial_shape()[1].get_length() // some.input(
            "codes").get_partial_shape()[2].get_length()
        self.quantizers = some.input("codes").get_partial_shape()[1].get_length()
        # state layout (name -> per-row shape and dtype) from the state outputs
        self.layout = {o.get_any_name()[len(NEXT):]: (tuple(d.get_length() for d in o.get_partial_shape()[1:]),
                                                      o.get_element_type().to_dtype())
                       for o in some.outputs if o.get_any_name().startswith(NEXT)}

    def state_bytes(self) -> int:
        """Bytes of one stream's state."""
        return sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in self.layout.values())

    def _zeros(self) -> dict[str, np.ndarray]:
        return {name: np.zeros((1, *shape), dtype) for name, (shape, dtype) in self.layout.items()}

    def decode(self, streams: Sequence[CodecStream], chunks: Sequence[np.ndarray], size: int) -> list[np.ndarray]:
        """Decode one chunk per stream with the graphs of `size` frames; chunks are codes
        [Q, m] with 1 ≤ m ≤ size (m < size ends the stream). Returns pcm [m·1920] f32 each."""
        if len(streams) != len(chunks) or not streams:
            raise ValueError("need one chunk per stream, and at least one stream")
        fresh = all(s.state is None for s in streams)
        if fresh and size in self.first:
            graph = self.first[size]
        elif size in self.steady:
            graph = self.steady[size]
        else:
            raise ValueError(f"no {'first or ' if fresh else ''}steady codec graph of {size} frames")
        if graph.batch and len(streams) > graph.batch:  # a static batch too small: several calls
            k = graph.batch
            return [pcm for i in range(0, len(streams), k)
                    for pcm in self.decode(streams[i:i + k], chunks[i:i + k], size)]
        rows = graph.batch or len(streams)  # a static-batch graph gets idle rows (zero codes and state)
        codes = np.zeros((rows, self.quantizers, size), np.int64)
        for row, (stream, chunk) in enumerate(zip(streams, chunks)):
            if stream.closed:
                raise ValueError("stream already ended with a partial chunk")
            if chunk.ndim != 2 or chunk.shape[0] != self.quantizers or not 1 <= chunk.shape[1] <= size:
                raise ValueError(f"chunk must be codes [{self.quantizers}, 1..{size}], got {chunk.shape}")
            codes[row, :, :chunk.shape[1]] = chunk
        feeds: dict[str, np.ndarray] = {"codes": codes}
        if graph is not self.first.get(size):
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
            if frames < size:
                stream.closed, stream.state = True, None
            else:
                stream.state = {name: req.get_tensor(NEXT + name).data[row:row + 1].copy() for name in self.layout}
        return pcms

    def prime(self, codes: np.ndarray) -> CodecStream:
        """A stream that has decoded `codes` [Q, R] already, their audio dropped: in-context
        cloning decodes the reference codes in front of the generated ones. Runs the steady
        graphs, largest first; their sizes must add up to R (a 1-frame graph always does)."""
        stream, start, sizes = CodecStream(), 0, sorted(self.steady, reverse=True)
        while start < codes.shape[1]:
            size = next((n for n in sizes if n <= codes.shape[1] - start), None)
            if size is None:
                raise ValueError(f"steady codec graphs of {sizes} frames cannot cover {codes.shape[1]} frames "
                                 f"exactly (compile the 1-frame graph)")
            self.decode([stream], [codes[:, start:start + size]], size)
            start += size
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
