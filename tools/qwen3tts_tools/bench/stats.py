"""Medians with their spread: every benchmark figure is reported as median, min and max over runs."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        v = np.asarray(list(values), np.float64)
        if v.size == 0:
            raise ValueError("no values to summarise")
        return cls(float(np.median(v)), float(v.min()), float(v.max()), int(v.size))

    def scaled(self, factor: float) -> Spread:
        """The same figure in other units (e.g. seconds → ms)."""
        return Spread(self.median * factor, self.min * factor, self.max * factor, self.n)

    def text(self, fmt: str = ".1f") -> str:
        """'median (min–max)' for tables."""
        return f"{self.median:{fmt}} ({self.min:{fmt}}–{self.max:{fmt}})"


def percentile(values: Iterable[float], q: float) -> float:
    return float(np.percentile(np.asarray(list(values), np.float64), q))
