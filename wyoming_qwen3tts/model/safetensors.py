"""Torch-free safetensors: a lazy, memory-mapped reader and a streaming writer.

The reader maps each file once and hands out views, so a 1.7B checkpoint never needs
twice its size in RAM: only the tensors (or rows) actually asked for are converted.
bfloat16 has no numpy dtype; it is read as uint16 and widened to float32 exactly.
"""
from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

# safetensors dtype name -> (numpy storage dtype, bytes per element)
_STORAGE: dict[str, np.dtype] = {
    "BF16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_NAMES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "int64": "I64", "int32": "I32", "bool": "BOOL"}
_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    """A safetensors file that cannot be read; the message names the file."""


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16) to float32 — exact."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 bit patterns (round to nearest even, as torch does)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # safetensors name: "BF16", "F32", ...
    shape: tuple[int, ...]
    path: Path


class SafetensorsFile:
    """One memory-mapped .safetensors file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                head = f.read(8)
                if len(head) != 8:
                    raise SafetensorsError(f"{self.path}: truncated (no header length)")
                (n,) = struct.unpack("<Q", head)
                if n > _MAX_HEADER:
                    raise SafetensorsError(f"{self.path}: header length {n} is implausible")
                header = json.loads(f.read(n))
        except FileNotFoundError:
            raise SafetensorsError(f"{self.path}: file not found") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise SafetensorsError(f"{self.path}: header is not valid JSON ({e})") from None
        self.metadata: dict[str, str] = header.pop("__metadata__", None) or {}
        self._data_start = 8 + n
        size = self.path.stat().st_size
        self._entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, entry in header.items():
            dtype, shape, (begin, end) = entry["dtype"], tuple(int(s) for s in entry["shape"]), entry["data_offsets"]
            if dtype not in _STORAGE:
                raise SafetensorsError(f"{self.path}: tensor {name} has unsupported dtype {dtype}")
            nbytes = int(np.prod(shape, dtype=np.int64)) * _STORAGE[dtype].itemsize
            if end - begin != nbytes or self._data_start + end > size:
                raise SafetensorsError(f"{self.path}: tensor {name} has inconsistent offsets")
            self._entries[name] = (dtype, shape, begin, end)
        self._mmap: mmap.mmap | None = None
        self._map: np.ndarray | None = None
        if size > self._data_start:
            with open(self.path, "rb") as f:  # the mapping outlives the descriptor
                self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._map = np.frombuffer(self._mmap, np.uint8)

    def names(self) -> list[str]:
        return list(self._entries)

    def info(self, name: str) -> TensorInfo:
        dtype, shape, _, _ = self._entries[name]
        return TensorInfo(name, dtype, shape, self.path)

    def raw(self, name: str) -> np.ndarray:
        """A zero-copy read-only view in the storage dtype (uint16 for bfloat16)."""
        dtype, shape, begin, end = self._entries[name]
        if begin == end:
            return np.zeros(shape, _STORAGE[dtype])
        assert self._map is not None
        buf = self._map[self._data_start + begin : self._data_start + end]
        return buf.view(_STORAGE[dtype]).reshape(shape)

    def release(self, name: str, rows: slice = slice(None)) -> None:
        """Drop the whole pages of tensor `name` (of its `rows`) from this process: read once
        and converted, a 1.7B checkpoint's pages would otherwise stay resident as long as the
        file is open (they stay in the page cache; a later read faults them back in)."""
        dtype, shape, begin, end = self._entries[name]
        if self._mmap is None or begin == end or not hasattr(self._mmap, "madvise"):
            return
        row = (end - begin) // shape[0] if shape and shape[0] else end - begin
        first, last, _ = rows.indices(shape[0] if shape else 1)
        start = self._data_start + begin + first * row
        stop = self._data_start + begin + last * row
        start = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages only: neighbours keep theirs
        stop = stop // mmap.PAGESIZE * mmap.PAGESIZE
        if stop > start:
            self._mmap.madvise(mmap.MADV_DONTNEED, start, stop - start)


def to_float32(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Storage array -> float32 (a new array; views are never written)."""
    if dtype == "BF16":
        return bf16_to_f32(raw)
    return np.asarray(raw, dtype=np.float32).copy() if raw.dtype == np.float32 else raw.astype(np.float32)


# ----------------------------------------------------------------------------- writer


def _header(items: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str] | None) -> bytes:
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape in items:
        nbytes = int(np.prod(shape, dtype=np.int64)) * _STORAGE[dtype].itemsize
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    return raw + b" " * (-len(raw) % 8)  # pad so tensor data starts 8-byte aligned


def _storage_bytes(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return f32_to_bf16(array) if array.dtype != np.uint16 else array
    return np.ascontiguousarray(array, dtype=_STORAGE[dtype])


def write_streaming(
    path: str | Path,
    items: Iterable[tuple[str, str, tuple[int, ...]]],
    produce: Callable[[str], np.ndarray | Iterable[np.ndarray]],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write tensors one at a time: `items` are (name, dtype, shape) in file order and
    `produce(name)` returns each tensor when its turn comes — an array, or blocks of rows
    (axis 0) — so a full-size checkpoint is never held in memory."""
    items = [(n, _NAMES.get(d, d), tuple(s)) for n, d, s in items]
    head = _header(items, metadata)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for name, dtype, shape in items:
            produced = produce(name)
            blocks = [produced] if isinstance(produced, np.ndarray) else produced
            rows = 0
            for block in blocks:
                block = np.asarray(block)
                if tuple(block.shape[1:]) != shape[1:] or (not shape and block.shape):
                    raise ValueError(f"tensor {name}: produced block shape {block.shape}, declared {shape}")
                rows += block.shape[0] if shape else 1
                _write_array(f, _storage_bytes(block, dtype))
            if rows != (shape[0] if shape else 1):
                raise ValueError(f"tensor {name}: produced {rows} rows, declared {shape}")


def _write_array(f: BinaryIO, array: np.ndarray) -> None:
    f.write(np.ascontiguousarray(array).tobytes(order="C"))
