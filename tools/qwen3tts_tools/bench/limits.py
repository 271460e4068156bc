"""The limit: how fast this machine could run our graphs if reading their weights were all
that mattered. Bandwidth is measured here; bytes per frame come from the converted IR.

At batch 1 a decoder step is memory-bound: every weight of a MatMul or convolution is
streamed from DRAM once per use (none of these graphs fits the caches). The IR tells how
often each weight is used per call: the talker reads its 28 layers once per step, the
subcode graph unrolls 15 code-predictor steps over shared weight constants (so the 5
layers are read 15 times per frame, each lm_head once), a codec chunk graph reads its
weights once per call of `chunk` frames. Embedding and codebook tables are gathered (only
the rows used are read), so they do not count.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import openvino as ov

from .stats import Spread

ELEMENT_BYTES = {"int4": 0.5, "int8": 1, "fp16": 2, "fp32": 4}
LM_PRECISIONS = ("int4", "int8", "fp16", "fp32")  # what the talker and subcode may be converted to
CODEC_PRECISIONS = ("fp16", "fp32")  # the codec's float formats (its int8 one: CODEC_INT8)
CODEC_INT8 = "fp32+int8_conv"  # a manifest's codec with INT8 convolutions (convert/pipeline.py)
STREAMED = frozenset({"MatMul", "Convolution", "GroupConvolution", "ConvolutionBackpropData",
                      "GroupConvolutionBackpropData"})
SOURCES = frozenset({"Parameter", "ReadValue"})


@dataclass
class Bandwidth:
    """Sequential read bandwidth of a buffer far larger than the caches."""

    buffer_mb: int
    gb_per_s: dict[int, Spread]  # by reader threads

    @property
    def best(self) -> float:
        return max(s.median for s in self.gb_per_s.values())


def _read(parts: list[np.ndarray]) -> float:
    """Seconds for len(parts) threads to each reduce one part. numpy releases the GIL in
    reductions, and an integer max is a SIMD compare per vector: the read is what limits it."""
    barrier = threading.Barrier(len(parts) + 1)

    def reader(part: np.ndarray) -> None:
        barrier.wait()
        part.max()

    threads = [threading.Thread(target=reader, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def read_bandwidth(buffer_mb: int = 1024, runs: int = 5, threads: tuple[int, ...] = (1, 2)) -> Bandwidth:
    """GB/s of reading `buffer_mb` with 1 and 2 threads, `runs` times each (after one warm read)."""
    buf = np.ones(buffer_mb * 2**20 // 8, np.uint64)  # written once, so every page is resident
    result = {}
    for n in threads:
        parts = np.array_split(buf, n)
        _read(parts)
        result[n] = Spread.of(buf.nbytes / _read(parts) / 1e9 for _ in range(runs))
    return Bandwidth(buffer_mb, result)


@dataclass
class GraphReads:
    """Memory one call of a graph reads for its constants (activations and KV aside)."""

    graph: str
    stored: str  # int4 / int8 / fp16 / fp32, as converted
    frames_per_call: int  # per sequence: 1, or a codec chunk's frames
    weight_elements: int  # MatMul/convolution weights, each counted once per use
    weight_bytes: int  # the same as stored (INT8 with its scales)
    other_bytes: int  # constants read whole by other ops (norms, biases, RoPE, ...)
    gathered_bytes: int  # tables of which only the rows used are read (not counted)
    precisions: tuple[str, ...] = field(default=LM_PRECISIONS)

    def bytes_per_frame(self, precision: str | None = None) -> float:
        """Bytes read per generated frame of one stream, with the weights stored at `precision`
        (None: as converted; other precisions ignore quantisation scales: < 1 % of INT8 weights,
        3 % of INT4 ones with f16 scales per 128)."""
        weights = self.weight_bytes if precision in (None, self.stored) else \
            self.weight_elements * ELEMENT_BYTES[precision]
        return (weights + self.other_bytes) / self.frames_per_call


def stored_format(manifest_format: str) -> str:
    """int8_sym, int4_sym_g128, fp16, fp32 (a manifest's weight formats) → int8, int4, fp16, fp32;
    a codec with INT8 convolutions → int8_conv: a format of its own, so its bytes are reported as
    converted and its fp16 / fp32 columns as the float codecs would read."""
    if manifest_format == CODEC_INT8:
        return "int8_conv"
    short = manifest_format.split("_")[0]
    if short not in ELEMENT_BYTES:
        raise ValueError(f"unknown stored weight format {manifest_format!r}")
    return short


def _nbytes(constant: ov.Node) -> int:
    """Bytes a constant occupies (u4/i4 pack two elements per byte: the type's size says 1)."""
    elements = int(np.prod(constant.get_output_shape(0), dtype=np.int64))
    return (elements * constant.get_output_element_type(0).bitwidth + 7) // 8


def _constant_derived(model: ov.Model) -> dict[str, tuple[ov.Node, ...]]:
    """Every node computed from constants only (weights and their decompression: Convert,
    Multiply by scales, Reshape...), mapped to the Constant nodes it is computed from."""
    roots: dict[str, tuple[ov.Node, ...]] = {}
    for node in model.get_ordered_ops():
        if node.get_type_name() == "Constant":
            roots[node.get_name()] = (node,)
            continue
        sources = [i.get_source_output().get_node() for i in node.inputs()]
        if sources and node.get_type_name() not in SOURCES and all(s.get_name() in roots for s in sources):
            seen = {c.get_name(): c for s in sources for c in roots[s.get_name()]}
            roots[node.get_name()] = tuple(seen.values())
    return roots


def graph_reads(xml: Path, graph: str, stored: str, frames_per_call: int) -> GraphReads:
    """Walk the IR: every edge from a constant-computed value into a computing op is one
    read of those constants per call."""
    model = ov.Core().read_model(xml)
    roots = _constant_derived(model)
    elements = weights = other = gathered = 0
    for node in model.get_ordered_ops():
        if node.get_name() in roots:
            continue
        for port, inp in enumerate(node.inputs()):
            source = inp.get_source_output().get_node()
            constants = roots.get(source.get_name())
            if constants is None:
                continue
            sizes = [_nbytes(c) for c in constants]
            if node.get_type_name() == "Gather" and port == 0:
                gathered += sum(sizes)
            elif node.get_type_name() in STREAMED:
                main = max(constants, key=lambda c: int(np.prod(c.get_output_shape(0), dtype=np.int64)))
                elements += int(np.prod(main.get_output_shape(0), dtype=np.int64))
                weights += sum(sizes)
            else:
                other += sum(sizes)
    precisions = CODEC_PRECISIONS if graph.startswith("codec") else LM_PRECISIONS
    return GraphReads(graph, stored_format(stored), frames_per_call, elements, weights, other, gathered, precisions)


@dataclass
class Bound:
    """Per-frame time of one stream against the time its memory reads take at `gb_per_s`."""

    gb_per_s: float
    mb_per_frame: dict[str, float]  # talker (+ KV), subcode, codec, total; as converted
    bound_ms: dict[str, float]
    measured_ms: dict[str, float]  # one stream: talker, subcode, codec, total (host time aside)
    ratio: dict[str, float]  # measured / bound


def frame_bound(reads: dict[str, GraphReads], kv_bytes_per_frame: float, gb_per_s: float,
                measured_ms: dict[str, float]) -> Bound:
    """reads: the talker, subcode and codec (steady chunk) graphs."""
    mb = {name: r.bytes_per_frame() / 1e6 for name, r in reads.items()}
    mb["talker"] += kv_bytes_per_frame / 1e6
    mb["total"] = sum(mb.values())
    bound = {name: v * 1e6 / (gb_per_s * 1e9) * 1e3 for name, v in mb.items()}
    measured = dict(measured_ms)
    measured["total"] = sum(measured[name] for name in reads)
    return Bound(gb_per_s, mb, bound, measured, {name: measured[name] / bound[name] for name in mb})
