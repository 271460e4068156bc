"""The speaker encoder's log-mel front-end, in numpy.

Reproduces the official `mel_spectrogram` as `extract_speaker_embedding` calls it (24 kHz,
n_fft 1024, hop 256, Hann 1024, 128 Slaney mels up to 12 kHz) without torch or librosa:

    reflect-pad (n_fft - hop) / 2 on each side → frames with center=False
    → |rfft(frame · hann)| as sqrt(re² + im² + 1e-9) → mel filterbank → log(max(x, 1e-5))

The filterbank is librosa's `filters.mel(..., htk=False, norm="slaney")` recomputed step by
step, including its float32 rounding points, so the weights are bit-identical to the ones
the official code multiplies by.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np


@dataclass(frozen=True)
class MelParams:
    """The fixed front-end of `Qwen3TTSForConditionalGeneration.extract_speaker_embedding`."""

    sample_rate: int = 24000
    n_fft: int = 1024
    hop: int = 256
    win: int = 1024
    n_mels: int = 128
    fmin: float = 0.0
    fmax: float = 12000.0
    magnitude_eps: float = 1e-9  # added to re² + im² before the square root
    log_floor: float = 1e-5  # dynamic_range_compression_torch's clip_val

    @property
    def pad(self) -> int:
        """Reflect padding on each side: the official code pads by hand and runs the STFT
        with center=False, so frames are centred on hops only approximately."""
        return (self.n_fft - self.hop) // 2


MEL = MelParams()

# Slaney's auditory mel scale (librosa htk=False): linear below 1 kHz, logarithmic above.
_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def _hz_to_mel(hz: float) -> float:
    return float(_MIN_LOG_MEL + np.log(hz / _MIN_LOG_HZ) / _LOGSTEP) if hz >= _MIN_LOG_HZ else hz / _F_SP


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    hz = _F_SP * mels
    log_region = mels >= _MIN_LOG_MEL
    hz[log_region] = _MIN_LOG_HZ * np.exp(_LOGSTEP * (mels[log_region] - _MIN_LOG_MEL))
    return hz


@cache
def mel_filterbank(p: MelParams = MEL) -> np.ndarray:
    """[n_mels, n_fft/2 + 1] float32 triangles with Slaney area normalisation.

    Same operations and float32 casts as librosa.filters.mel (rows rounded to float32
    before the per-row normalisation, which is computed in float64 and rounded again)."""
    fft_freqs = np.fft.rfftfreq(p.n_fft, 1.0 / p.sample_rate)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(p.fmin), _hz_to_mel(p.fmax), p.n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    weights = np.zeros((p.n_mels, p.n_fft // 2 + 1), np.float32)
    for i in range(p.n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:] - mel_f[:-2]))[:, None]
    weights.setflags(write=False)
    return weights


@cache
def hann_window(size: int) -> np.ndarray:
    """Periodic Hann window computed as torch.hann_window does it, in float32 steps.

    Its float32 rounding matters: the rounding acts as a tiny multiplicative noise that leaks
    strong tones into quiet mel bands, about 5e-5 in the log domain for a float64 window.
    Only the cosine differs (correctly rounded here, SLEEF's in torch): ~3% of the values
    are one ulp apart, which is invisible at that scale."""
    n = np.arange(size, dtype=np.float32)
    cos = np.cos((n * np.float32(2.0 * np.pi / size)).astype(np.float64)).astype(np.float32)
    window = cos * np.float32(-0.5) + np.float32(0.5)
    window.setflags(write=False)
    return window


def log_mel(audio: np.ndarray, p: MelParams = MEL) -> np.ndarray:
    """Log-mel features [T, n_mels] float32 of mono audio at p.sample_rate.

    The STFT runs in float64 (the official one in float32; the difference stays far below
    the parity tolerance); the filterbank holds the official float32 values."""
    audio = np.asarray(audio, np.float32)
    if audio.ndim != 1:
        raise ValueError(f"log_mel expects mono audio [samples], got shape {audio.shape}")
    if audio.shape[0] <= p.pad:
        raise ValueError(f"audio of {audio.shape[0]} samples is too short (need more than {p.pad})")
    padded = np.pad(audio.astype(np.float64), p.pad, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, p.n_fft)[:: p.hop]
    window = np.zeros(p.n_fft, np.float64)
    start = (p.n_fft - p.win) // 2  # torch.stft centres a shorter window inside n_fft
    window[start:start + p.win] = hann_window(p.win)
    spec = np.fft.rfft(frames * window, axis=-1)
    magnitude = np.sqrt(spec.real ** 2 + spec.imag ** 2 + p.magnitude_eps)
    mel = magnitude @ mel_filterbank(p).T.astype(np.float64)
    return np.log(np.maximum(mel, p.log_floor)).astype(np.float32)
