"""Reference recordings for voice cloning: any WAV file, read with numpy, resampled to 24 kHz.

The official implementation reads audio with librosa/soundfile and resamples with
librosa (soxr). Here the standard library's job is done by hand so that no audio library
is needed: WAV files (RIFF or RF64) of 8/16/24/32-bit integer or 32/64-bit float samples,
plain or WAVE_FORMAT_EXTENSIBLE, any channel count (mixed down to mono by the mean, as the
official loader does). Resampling is a Kaiser-windowed sinc polyphase filter; at 24 kHz
input it is skipped, so a 24 kHz reference gives exactly the official encoder inputs.
"""
from __future__ import annotations

import math
import struct
from functools import lru_cache
from pathlib import Path

import numpy as np

MAX_FILE_BYTES = 256 * 2**20  # a 30 s reference is a few MB even as 192 kHz float stereo

_PCM, _FLOAT, _EXTENSIBLE = 0x0001, 0x0003, 0xFFFE


class AudioError(ValueError):
    """A reference recording that cannot be used; the message says why."""


def _chunks(data: bytes, where: str) -> dict[bytes, bytes]:
    """The RIFF chunks of a WAV file by id (the first of each)."""
    if len(data) < 12 or data[:4] not in (b"RIFF", b"RF64") or data[8:12] != b"WAVE":
        raise AudioError(f"{where} is not a WAV file (convert it first, e.g. ffmpeg -i in.mp3 -ar 24000 ref.wav)")
    chunks: dict[bytes, bytes] = {}
    data_size = None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if cid == b"ds64" and size >= 16:  # RF64: the real data size lives here
            data_size = struct.unpack("<Q", data[pos + 16:pos + 24])[0]
        if cid == b"data" and (size == 0xFFFFFFFF or data_size is not None):
            size = data_size if data_size is not None else len(data) - pos - 8
        chunks.setdefault(cid, data[pos + 8:pos + 8 + size])
        pos += 8 + size + (size & 1)
    for need in (b"fmt ", b"data"):
        if need not in chunks:
            raise AudioError(f"{where}: broken WAV file (no {need.decode().strip()!r} chunk)")
    return chunks


def _samples(raw: bytes, tag: int, bits: int, channels: int, where: str) -> np.ndarray:
    """[frames, channels] float32 in [-1, 1] from the data chunk."""
    width = bits // 8
    if bits % 8 or width == 0:
        raise AudioError(f"{where}: {bits}-bit samples are not supported")
    frames = len(raw) // (width * channels)
    raw = raw[:frames * width * channels]
    if tag == _FLOAT and bits in (32, 64):
        x = np.frombuffer(raw, "<f4" if bits == 32 else "<f8").astype(np.float32)
    elif tag == _PCM and bits == 8:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif tag == _PCM and bits in (16, 32):
        x = np.frombuffer(raw, f"<i{width}").astype(np.float32) / float(2 ** (bits - 1))
    elif tag == _PCM and bits == 24:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v) / float(1 << 23)).astype(np.float32)
    else:
        kind = {_PCM: "integer", _FLOAT: "float"}.get(tag, f"format 0x{tag:04x}")
        raise AudioError(f"{where}: {bits}-bit {kind} WAV samples are not supported "
                         f"(use 8/16/24/32-bit integer or 32/64-bit float)")
    return x.reshape(frames, channels)


def read_file(path: str | Path) -> bytes:
    """A reference file's bytes (bounded)."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_FILE_BYTES:
            raise AudioError(f"{path} is {size / 2**20:.0f} MB; a reference recording should be a few seconds")
        return Path(path).read_bytes()
    except OSError as e:
        raise AudioError(f"cannot read {path}: {e.strerror or e}") from None


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate) of a WAV file."""
    return decode_wav(read_file(path), str(path))


def decode_wav(data: bytes, where: str) -> tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate) of a WAV file's bytes."""
    chunks = _chunks(data, where)
    fmt = chunks[b"fmt "]
    if len(fmt) < 16:
        raise AudioError(f"{where}: broken WAV file (short 'fmt' chunk)")
    tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == _EXTENSIBLE:
        if len(fmt) < 26:
            raise AudioError(f"{where}: broken WAV file (short extensible 'fmt' chunk)")
        tag = struct.unpack("<H", fmt[24:26])[0]  # the sub-format GUID starts with the format tag
    if channels < 1 or rate < 1:
        raise AudioError(f"{where}: broken WAV file ({channels} channels at {rate} Hz)")
    x = _samples(chunks[b"data"], tag, bits, channels, where)
    if x.shape[0] == 0:
        raise AudioError(f"{where} holds no audio")
    if not np.isfinite(x).all():
        raise AudioError(f"{where} holds NaN or infinite samples")
    return (x[:, 0] if channels == 1 else x.mean(axis=1, dtype=np.float32)), int(rate)


# ---------------------------------------------------------------------------------- resampling

ZERO_CROSSINGS = 32  # sinc lobes per side: the filter's length (and sharpness)
ROLLOFF = 0.945  # pass band edge as a fraction of the lower Nyquist frequency
KAISER_BETA = 12.0  # about 120 dB stop band
_BLOCK = 1 << 15  # output samples per vectorised block (bounds the tap matrix's memory)


@lru_cache(maxsize=8)
def _polyphase(up: int, down: int) -> tuple[np.ndarray, int]:
    """Filter taps by phase, [up, taps], and the half length in upsampled samples."""
    fc = 0.5 * ROLLOFF / max(up, down)  # cut-off in cycles per upsampled sample
    half = ZERO_CROSSINGS * math.ceil(1.0 / (2.0 * fc))
    n = np.arange(-half, half + 1, dtype=np.float64)
    h = 2.0 * fc * np.sinc(2.0 * fc * n) * np.kaiser(2 * half + 1, KAISER_BETA) * up
    taps = 2 * half // up + 2
    # Output m reads input i0 + k with i0 = ceil((m·down - half) / up); with offset =
    # i0·up - (m·down - half) its tap k is h[2·half - offset - k·up] (0 outside the filter).
    idx = 2 * half - np.arange(up)[:, None] - np.arange(taps)[None, :] * up
    table = np.where(idx >= 0, h[np.clip(idx, 0, None)], 0.0)
    return table.astype(np.float64), half


def resample(x: np.ndarray, orig_rate: int, target_rate: int) -> np.ndarray:
    """x at orig_rate -> float32 at target_rate (length ceil(len·target/orig))."""
    x = np.asarray(x, np.float32)
    if orig_rate == target_rate:
        return x.copy()
    g = math.gcd(orig_rate, target_rate)
    up, down = target_rate // g, orig_rate // g
    table, half = _polyphase(up, down)
    taps = table.shape[1]
    n_out = -(-len(x) * up // down)
    pad = half // up + 2
    xp = np.concatenate([np.zeros(pad), x.astype(np.float64), np.zeros(pad + taps)])
    y = np.empty(n_out, np.float32)
    for start in range(0, n_out, _BLOCK):
        m = np.arange(start, min(n_out, start + _BLOCK), dtype=np.int64)
        a = m * down - half
        i0 = -((-a) // up)
        offset = i0 * up - a
        window = xp[(i0 + pad)[:, None] + np.arange(taps)[None, :]]
        y[start:start + len(m)] = np.einsum("mk,mk->m", window, table[offset])
    return y
