"""Reference recordings for voice cloning: any WAV file, read with numpy, resampled to 24 kHz.

The official implementation reads audio with librosa/soundfile and resamples with
`librosa.resample`, whose default is soxr's "HQ" filter. Reading is done here by hand, so no
audio library is needed: WAV files (RIFF or RF64) of 8/16/24/32-bit integer or 32/64-bit
float samples, plain or WAVE_FORMAT_EXTENSIBLE, any channel count (mixed down by the mean),
scaled as soundfile scales them. Resampling calls soxr with librosa's settings and output
length, so a recording at any rate gives the official encoder inputs bit for bit.
"""
from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import numpy as np
import soxr

MAX_FILE_BYTES = 256 * 2**20  # a 30 s reference is a few MB even as 192 kHz float stereo
RATES = (4000, 384000)  # sample rates accepted (Hz)

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
        if cid == b"ds64" and size >= 16 and pos + 24 <= len(data):  # RF64: the real data size lives here
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
    """A reference file's bytes: a regular file of bounded size (not a pipe or a device)."""
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer (regular files ignore it)
        with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise AudioError(f"{path} is not a regular file")
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise AudioError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise AudioError(f"{path} is over {MAX_FILE_BYTES // 2**20} MB; a reference recording should be a few seconds")
    return data


def decode_wav(data: bytes, where: str, max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate) of a WAV file's bytes. A recording longer than
    max_seconds is refused from its header, before its samples are decoded."""
    chunks = _chunks(data, where)
    fmt = chunks[b"fmt "]
    if len(fmt) < 16:
        raise AudioError(f"{where}: broken WAV file (short 'fmt' chunk)")
    tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == _EXTENSIBLE:
        if len(fmt) < 26:
            raise AudioError(f"{where}: broken WAV file (short extensible 'fmt' chunk)")
        tag = struct.unpack("<H", fmt[24:26])[0]  # the sub-format GUID starts with the format tag
    if channels < 1:
        raise AudioError(f"{where}: broken WAV file (no channels)")
    if not RATES[0] <= rate <= RATES[1]:
        raise AudioError(f"{where}: a sample rate of {rate} Hz is not supported ({RATES[0]}-{RATES[1]} Hz)")
    seconds = len(chunks[b"data"]) / (max(1, bits // 8) * channels * rate)
    if max_seconds is not None and seconds > max_seconds:
        raise AudioError(f"{where} is {seconds:.1f} s long; use at most {max_seconds:g} s")
    x = _samples(chunks[b"data"], tag, bits, channels, where)
    if x.shape[0] == 0:
        raise AudioError(f"{where} holds no audio")
    if not np.isfinite(x).all():
        raise AudioError(f"{where} holds NaN or infinite samples")
    return (x[:, 0] if channels == 1 else x.mean(axis=1, dtype=np.float32)), int(rate)


def resample(x: np.ndarray, orig_rate: int, target_rate: int) -> np.ndarray:
    """x at orig_rate -> float32 at target_rate, as `librosa.resample` (soxr HQ) does it:
    the same filter and the same output length, ceil(len · target / orig) in floating point."""
    x = np.asarray(x, np.float32)
    if orig_rate == target_rate:
        return x.copy()
    y = soxr.resample(x, orig_rate, target_rate, quality="soxr_hq")
    n = int(np.ceil(x.shape[0] * (float(target_rate) / orig_rate)))
    return np.pad(y, (0, max(0, n - y.shape[0])))[:n].astype(np.float32)
