"""A tensor of a synthetic checkpoint: name, shape, dtype and how to fill it."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

BLOCK_ELEMENTS = 1 << 22  # rows are produced in blocks of about this many values


@dataclass(frozen=True)
class TensorSpec:
    """One checkpoint tensor.

    init: "normal" (zero mean, `std`), "ones", "zeros", "constant" (`low`), or "uniform"
    (in [low, high]) — enough to give every norm, scale and codebook statistic a sane value.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"  # safetensors dtype name: "bfloat16", "float16" or "float32"
    init: str = "normal"
    std: float = 0.02
    low: float = 0.0
    high: float = 1.0

    def materialize(self, rng: np.random.Generator) -> np.ndarray:
        """Random float32 values for this tensor (the writer casts to `dtype`)."""
        if self.init == "normal":
            return (rng.standard_normal(self.shape, dtype=np.float32) * np.float32(self.std)).astype(np.float32)
        if self.init == "ones":
            return np.ones(self.shape, np.float32)
        if self.init == "zeros":
            return np.zeros(self.shape, np.float32)
        if self.init == "constant":
            return np.full(self.shape, self.low, np.float32)
        if self.init == "uniform":
            return rng.uniform(self.low, self.high, self.shape).astype(np.float32)
        raise ValueError(f"unknown init {self.init!r} for tensor {self.name}")

    def blocks(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        """The same kind of values as `materialize`, in blocks of rows, so a 300 M-value
        embedding never needs more than a few MB at once."""
        if len(self.shape) < 2:
            yield self.materialize(rng)
            return
        row = max(1, int(np.prod(self.shape[1:])))
        step = max(1, BLOCK_ELEMENTS // row)
        for start in range(0, self.shape[0], step):
            part = TensorSpec(self.name, (min(step, self.shape[0] - start), *self.shape[1:]), self.dtype,
                              self.init, self.std, self.low, self.high)
            yield part.materialize(rng)
