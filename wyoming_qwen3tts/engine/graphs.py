"""Load-time changes to converted graphs, made after `read_model` and before compiling.

The IR on disk keeps the form a reader accepts; what depends on the device or on the runner
is done here: the talker becomes paged, the codec chunk graphs get a static batch.
"""
from __future__ import annotations

import mmap
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import openvino as ov
from openvino._offline_transformations import paged_attention_transformation


class MappedIr:
    """An IR whose weights are a private mapping of its .bin that this object owns (what
    native/src/mapped_ir.cpp does for the native runner's graphs). OpenVINO's own mapping
    (`read_model(path)`) stays resident as long as anything holds a constant of the model, and
    a compiled CPU graph holds them all: every page compiling read stays in the process's
    RSS. `release()` drops the resident pages once the graph has packed its weights (after
    its first inference); a page read later (a Gather table read in place) maps again from
    the page cache. Keep this object as long as the compiled graph: its constants point here."""

    def __init__(self, core: ov.Core, xml: Path) -> None:
        self._xml = xml
        with open(xml.with_suffix(".bin"), "rb") as f:
            # ACCESS_COPY: MAP_PRIVATE, writable (OpenVINO shares only a writable array), never written
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        self._weights = ov.Tensor(np.frombuffer(self._map, np.uint8), shared_memory=True)
        self.model = core.read_model(xml.read_text(encoding="utf-8"), self._weights)

    def largest_constant(self) -> tuple[int, int]:
        """(offset, size) in the .bin of the IR's largest constant (the IR's Const layers)."""
        consts = ElementTree.parse(self._xml).getroot().iterfind("./layers/layer[@type='Const']/data")
        return max(((int(d.get("offset", 0)), int(d.get("size", 0))) for d in consts), key=lambda c: c[1])

    def release(self, start: int = 0, length: int | None = None) -> None:
        """Drop the resident pages of the mapping, or of bytes [start, start + length) of it
        (whole pages inside it), while the file stays mapped: whatever reads a constant again
        faults its page back in."""
        page = mmap.PAGESIZE
        first = -(-start // page) * page
        end = len(self._map) if length is None else start + length
        last = end if end == len(self._map) else end // page * page
        if last > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, last - first)


def to_paged(model: ov.Model, num_layers: int) -> ov.Model:
    """The stateful talker made paged (docs/OPENVINO.md §1: an IR cannot hold
    PagedAttentionExtension, so the pass runs at load, as openvino-genai does); proves it
    worked, since the pass silently does nothing when the stateful pattern is not exact."""
    paged_attention_transformation(model)
    count = sum(o.get_type_name() == "PagedAttentionExtension" for o in model.get_ordered_ops())
    if count != num_layers:
        raise RuntimeError(f"paged_attention_transformation inserted {count} PagedAttention nodes, "
                           f"expected {num_layers}")
    return model


def fix_batch(model: ov.Model, batch: int) -> ov.Model:
    """Reshape a streaming codec graph (in place) to a static batch, to do before compiling
    for the CPU: only with fully static shapes does the plugin fuse SnakeBeta's elementwise
    chain into one kernel (full-size steady chunk of 8, 2 cores: ≈30 against ≈42 ms/frame)."""
    model.reshape({p.get_any_name(): [batch, *(d.get_length() for d in list(p.get_partial_shape())[1:])]
                   for p in model.inputs})
    return model
