"""Reference recordings: WAV files of every common sample format, and resampling to 24 kHz."""
from __future__ import annotations

import os
import struct
from pathlib import Path

import librosa
import numpy as np
import pytest

from wyoming_qwen3tts.clone.reference_audio import AudioError, decode_wav, read_file, resample

RATE = 24000


def read_audio(path: Path, max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    return decode_wav(read_file(path), str(path), max_seconds)


def wav_bytes(frames: np.ndarray, rate: int, tag: int, bits: int, extensible: bool = False,
              channels: int = 1) -> bytes:
    """A WAV file of the samples `frames`, already in the file's encoding."""
    data = frames.tobytes()
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, rate, rate * block, block, bits)
    if extensible:  # cbSize, valid bits, channel mask, sub-format GUID (starts with the tag)
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + bytes(14)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    chunks += b"LIST" + struct.pack("<I", 3) + b"abc\x00"  # an odd-sized chunk before the data (padded)
    chunks += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def tone(n: int, channels: int = 1) -> np.ndarray:
    t = np.arange(n) / RATE
    x = 0.5 * np.sin(2 * np.pi * 440 * t)[:, None] * np.linspace(1.0, 0.5, channels)[None, :]
    return x.astype(np.float64)


def encode(x: np.ndarray, tag: int, bits: int) -> np.ndarray:
    """x [n, channels] in [-1, 1] as the file's sample bytes, and what reading should give."""
    if tag == 3:
        return x.astype("<f4" if bits == 32 else "<f8")
    if bits == 8:
        return np.round(x * 127 + 128).astype(np.uint8)
    if bits == 24:
        v = np.round(x * (2**23 - 1)).astype(np.int64) & 0xFFFFFF
        return np.stack([(v >> s) & 0xFF for s in (0, 8, 16)], axis=-1).astype(np.uint8).reshape(len(x), -1)
    return np.round(x * (2 ** (bits - 1) - 1)).astype(f"<i{bits // 8}")


@pytest.mark.parametrize("tag,bits,channels,extensible", [
    (1, 8, 1, False), (1, 16, 1, False), (1, 24, 1, False), (1, 32, 1, False), (3, 32, 1, False), (3, 64, 1, False),
    (1, 16, 2, False), (1, 24, 2, True), (3, 32, 6, True),
], ids=["u8", "s16", "s24", "s32", "f32", "f64", "s16-stereo", "s24-extensible", "f32-5.1-extensible"])
def test_every_common_wav_format_reads_as_the_mean_of_its_channels(tmp_path, tag, bits, channels, extensible):
    x = tone(3001, channels)
    path = tmp_path / "ref.wav"
    path.write_bytes(wav_bytes(encode(x, tag, bits), 44100, tag, bits, extensible, channels))
    audio, rate = read_audio(path)
    assert rate == 44100 and audio.dtype == np.float32 and audio.shape == (3001,)
    step = 1.0 / 127 if bits == 8 else 2.0 ** (1 - bits) if tag == 1 else 1e-7
    assert np.abs(audio - x.mean(axis=1)).max() <= step + 1e-7
    assert np.abs(audio).max() > 0.3


@pytest.mark.parametrize("content,message", [
    (b"", "not a WAV file"),
    (b"OggS" + bytes(100), "not a WAV file"),
    (b"RIFF" + struct.pack("<I", 4) + b"WAVE", "no 'fmt' chunk"),
    (wav_bytes(np.zeros((0, 1), "<i2"), RATE, 1, 16), "holds no audio"),
    (wav_bytes(np.zeros((10, 1), "<i2"), RATE, 2, 16), "format 0x0002"),
    (wav_bytes(np.zeros((10, 1), np.uint8), RATE, 1, 12), "12-bit"),
    (wav_bytes(np.array([[np.nan]] * 10, "<f4"), RATE, 3, 32), "NaN"),
])
def test_unusable_files_give_a_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.wav"
    path.write_bytes(content)
    with pytest.raises(AudioError, match=message):
        read_audio(path)


def test_rf64_files_take_their_size_from_ds64(tmp_path):
    x = tone(1000)
    data = x.astype("<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, RATE, RATE * 4, 4, 32)
    ds64 = struct.pack("<QQQI", 0, len(data), len(x), 0)
    body = (b"ds64" + struct.pack("<I", len(ds64)) + ds64 + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", 0xFFFFFFFF) + data)
    path = tmp_path / "rf64.wav"
    path.write_bytes(b"RF64" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + body)
    audio, rate = read_audio(path)
    assert rate == RATE and np.array_equal(audio, x[:, 0].astype(np.float32))
    path.write_bytes(b"RF64" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + b"ds64" + struct.pack("<I", 28) + b"\0" * 6)
    with pytest.raises(AudioError, match="no 'fmt' chunk"):  # a ds64 cut short is a broken file, not a crash
        read_audio(path)


def test_odd_rates_and_lengths_are_refused_from_the_header(tmp_path):
    path = tmp_path / "odd.wav"
    path.write_bytes(wav_bytes(np.zeros((100, 1), np.uint8) + 128, 1_000_000, 1, 8))
    with pytest.raises(AudioError, match="1000000 Hz is not supported"):
        read_audio(path)
    path.write_bytes(wav_bytes(np.zeros((RATE * 40, 1), "<i2"), RATE, 1, 16))
    with pytest.raises(AudioError, match="40.0 s long; use at most 30 s"):
        read_audio(path, max_seconds=30)


def test_only_regular_files_are_read(tmp_path):
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    with pytest.raises(AudioError, match="Is a directory"):
        read_file(tmp_path)
    with pytest.raises(AudioError, match="not a regular file"):
        read_file(fifo)  # opening a FIFO for reading would wait for a writer: O_NONBLOCK


def test_a_missing_file_names_itself(tmp_path):
    with pytest.raises(AudioError, match="cannot read .*nope.wav"):
        read_audio(tmp_path / "nope.wav")


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000, 96000])
@pytest.mark.parametrize("length", [1.0, 2.37])
def test_resampling_is_the_official_librosa_resample(rate, length):
    x = np.random.default_rng(rate).standard_normal(int(rate * length)).astype(np.float32) * 0.1
    y = resample(x, rate, RATE)
    expected = librosa.resample(x, orig_sr=rate, target_sr=RATE)  # what the official code calls
    assert y.dtype == np.float32 and y.shape == expected.shape
    assert np.array_equal(y, expected)


def test_resampling_keeps_the_band_and_removes_what_24_khz_cannot_carry():
    t = np.arange(48000) / 48000
    x = 0.3 * np.sin(2 * np.pi * 1000 * t) + 0.3 * np.sin(2 * np.pi * 15000 * t)
    y = resample(x.astype(np.float32), 48000, RATE)
    exact = 0.3 * np.sin(2 * np.pi * 1000 * np.arange(y.size) / RATE)  # 15 kHz is above 12 kHz
    assert np.abs(y - exact)[2400:-2400].max() <= 1e-3


def test_24_khz_is_taken_as_is():
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    y = resample(x, RATE, RATE)
    assert np.array_equal(x, y) and y is not x


def test_files_read_back_what_was_written(tmp_path: Path):
    x = tone(2400)
    path = tmp_path / "f.wav"
    path.write_bytes(wav_bytes(x.astype("<f4"), RATE, 3, 32))
    audio, _ = read_audio(path)
    assert np.array_equal(audio, x[:, 0].astype(np.float32))
