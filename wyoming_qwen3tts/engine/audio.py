"""PCM conversion and WAV output (standard library + numpy only)."""
from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

SAMPLE_RATE = 24000


def to_int16(pcm: np.ndarray) -> np.ndarray:
    """Float PCM in [-1, 1] -> 16-bit samples (clipped, rounded)."""
    return np.round(np.clip(np.asarray(pcm, np.float32), -1.0, 1.0) * 32767.0).astype("<i2")


def write_wav(path: str | Path, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """A mono 16-bit WAV file."""
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sample_rate)
        f.writeframes(to_int16(pcm).tobytes())
