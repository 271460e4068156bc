"""Speech-like test recordings: a voiced source under a syllable envelope, written as float
WAV files that read back bit for bit (clone voices for tests and benchmarks)."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

RATE = 24000


def speech_like(samples: int, seed: int, rate: int = RATE) -> np.ndarray:
    """A voiced source (f0 gliding 90–260 Hz, 12 decaying harmonics) under a syllable-rate
    envelope with pauses, plus fricative-like noise bursts and a little background noise;
    peak 0.6."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate
    f0 = 150 + 60 * np.sin(2 * np.pi * rng.uniform(0.2, 0.6) * t + rng.uniform(0, 6)) + 20 * rng.standard_normal()
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = sum(np.sin(h * phase + rng.uniform(0, 6)) / h ** 1.2 for h in range(1, 13))
    syllables = np.clip(np.sin(2 * np.pi * rng.uniform(3, 5) * t + rng.uniform(0, 6)), 0, None) ** 2
    pauses = (np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6)) > -0.6).astype(np.float64)
    bursts = rng.standard_normal(samples) * (np.sin(2 * np.pi * 1.3 * t + rng.uniform(0, 6)) > 0.85)
    x = 0.25 * voiced * syllables * pauses + 0.08 * bursts + 0.005 * rng.standard_normal(samples)
    return (0.6 * x / np.abs(x).max()).astype(np.float32)


def write_float_wav(path: Path, x: np.ndarray, rate: int = RATE) -> Path:
    """A mono 32-bit float WAV (format 3)."""
    data = np.asarray(x, "<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    path.write_bytes(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data)) + b"WAVE"
                     + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data)
    return path
