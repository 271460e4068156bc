"""Small safetensors files written from a dict of arrays, for tests that edit a checkpoint."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from wyoming_qwen3tts.model.safetensors import write_streaming

_DTYPE_NAMES = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("int64"): "I64"}


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray], dtypes: dict[str, str] | None = None) -> None:
    """Write `tensors` in one file. dtypes: name -> "bfloat16"/"float16"/... (default: the array's)."""
    dtypes = dtypes or {}
    items = [(n, dtypes.get(n) or _DTYPE_NAMES[a.dtype], tuple(a.shape)) for n, a in tensors.items()]
    write_streaming(path, items, lambda n: tensors[n])
