"""Test signals: speech-like audio and float WAV files that read back bit for bit (from the
tools' synthetic recordings), and reading back the 16-bit WAV files the package writes."""
from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from qwen3tts_tools.synthetic.recording import RATE, speech_like, write_float_wav

__all__ = ["RATE", "read_wav", "speech_like", "write_float_wav"]


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(int16 samples, sample rate) of a mono 16-bit WAV file."""
    with wave.open(str(path), "rb") as f:
        if f.getnchannels() != 1 or f.getsampwidth() != 2:
            raise ValueError(f"{path}: expected mono 16-bit PCM")
        return np.frombuffer(f.readframes(f.getnframes()), "<i2"), f.getframerate()
