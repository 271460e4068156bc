"""A tensor of a synthetic checkpoint: name, shape, dtype and how to fill it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
