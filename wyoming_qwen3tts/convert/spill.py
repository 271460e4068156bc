"""A graph's weights kept out of the converter's memory while it is built, compressed and saved.

Widened to float32, a 1.7B talker's matrices alone are 5.6 GB, and nncf holds every original
Constant of a graph until it has compressed them all, so a graph built in RAM peaks at its full
f32 size plus the compressed copy (docs/OPENVINO.md §16). Here the first `budget` bytes of a
graph's matrices stay in RAM; the rest are written to a scratch file, tensor by tensor, and
mapped back (one mapping per tensor) as Constants that share that memory. Whatever
reads them (nncf compressing one matrix, the serializer writing the .bin) faults their pages
in; a trimmer thread drops them from the process again (MADV_DONTNEED on a never-written
file mapping: a later read re-faults the same bytes from the page cache, which the kernel may
evict under pressure). The Constants' values are the same floats either way, so the IR is too.
"""
from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

import numpy as np
import openvino as ov
from openvino import opset13

log = logging.getLogger(__name__)

TRIM_INTERVAL = 0.05  # seconds between two passes of the trimmer (nncf compresses a 100 MB matrix in ~0.2 s)
_ALIGN = mmap.ALLOCATIONGRANULARITY  # a mapping's file offset must be a multiple of it


class WeightSpill:
    """Weight Constants for one graph: in RAM up to `budget` bytes, then mapped from `path`.

    Use as a context manager around building, compressing and saving the graph: leaving it
    stops the trimmer and deletes the scratch file (the mappings that Constants still hold
    stay readable until the graph is dropped; an unlinked file lives until its last mapping)."""

    def __init__(self, path: Path, budget: int, interval: float = TRIM_INTERVAL) -> None:
        self.path, self.budget, self.interval = path, budget, interval
        self.held = 0  # bytes of matrices kept in RAM
        self.spilled = 0  # bytes written to the scratch file
        self._file = open(path, "w+b")  # closed in close()
        self._maps: list[mmap.mmap] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._trimmer = threading.Thread(target=self._trim_loop, name="weight-spill-trimmer", daemon=True)
        self._trimmer.start()

    def constant(self, array: np.ndarray) -> ov.Node:
        """A Constant with `array`'s values (C order, its dtype): a copy in RAM while the budget
        lasts, else a view of the tensor written to the scratch file."""
        array = np.ascontiguousarray(array)
        if self._fits(array.nbytes):
            return opset13.constant(array)
        return self.constant_from_blocks(array.shape, array.dtype, [array])

    def _fits(self, nbytes: int) -> bool:
        """Whether a tensor of `nbytes` stays in RAM (counted against the budget if so)."""
        if self.held + nbytes <= self.budget or nbytes == 0:
            self.held += nbytes
            return True
        return False

    def constant_from_blocks(self, shape: tuple[int, ...], dtype: np.dtype | type,
                             blocks: Iterable[np.ndarray]) -> ov.Node:
        """A Constant of `shape` whose rows (axis 0) come as `blocks`: past the budget they go to
        the scratch file one by one, so the whole tensor is never in RAM."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if self._fits(nbytes):
            whole = np.empty(shape, dtype)
            filled = 0
            for block in blocks:  # into place: never the blocks and the whole at once
                whole.reshape(-1)[filled:filled + block.size] = block.reshape(-1)
                filled += block.size
            if filled != whole.size:
                raise ValueError(f"blocks of {filled} values for a tensor of {shape}")
            return opset13.constant(whole, shared_memory=True)  # the Constant keeps `whole`: no copy
        offset = -(-self._file.seek(0, os.SEEK_END) // _ALIGN) * _ALIGN
        self._file.seek(offset)
        written = 0
        for block in blocks:
            block = np.ascontiguousarray(block, dtype)
            self._file.write(block.data)
            written += block.nbytes
        if written != nbytes:
            raise ValueError(f"blocks of {written} bytes for a tensor of {shape} {dtype} ({nbytes} bytes)")
        self._file.flush()
        # copy-on-write rather than read-only: OpenVINO shares only writable arrays (nothing writes them)
        view = mmap.mmap(self._file.fileno(), nbytes, access=mmap.ACCESS_COPY, offset=offset)
        with self._lock:
            self._maps.append(view)
        self.spilled += nbytes
        return opset13.constant(np.frombuffer(view, dtype=dtype).reshape(shape), shared_memory=True)

    def trim(self) -> None:
        """Drop every mapped weight page from the process (they stay in the page cache)."""
        with self._lock:
            maps = list(self._maps)
        for view in maps:
            view.madvise(mmap.MADV_DONTNEED)

    def _trim_loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.trim()

    def close(self) -> None:
        self._stop.set()
        self._trimmer.join()
        with self._lock:
            self._maps.clear()  # the Constants keep their own views alive as long as they need them
        self._file.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> WeightSpill:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
