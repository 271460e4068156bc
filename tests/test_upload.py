"""Uploaded recordings (server/upload.py): every container the voice lab takes, made by PyAV
here, and the files it must refuse early and clearly."""
from __future__ import annotations

import struct
import time

import numpy as np
import pytest
from lab_server import FORMATS, encode, recording
from signals import speech_like

from wyoming_qwen3tts.server.upload import MAX_UPLOAD_BYTES, UploadError, decode_upload, sniff, trim_silence


@pytest.mark.parametrize("container,codec,name", FORMATS, ids=[f[2] for f in FORMATS])
def test_every_format_decodes_to_24k_mono(container, codec, name):
    pcm = recording(5.0)
    clip = decode_upload(encode(container, codec, pcm, stereo=True))
    assert clip.pcm.dtype == np.float32 and clip.pcm.ndim == 1
    assert 4.5 <= clip.seconds <= 5.2, clip.seconds  # trimmed only of the silence at the ends
    # the same sound: the loudness matches the source's within a lossy codec's error
    rms = float(np.sqrt(np.mean(clip.pcm.astype(np.float64) ** 2)))
    assert rms == pytest.approx(float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2))), rel=0.15)


def test_wav_at_24k_decodes_to_its_samples():
    """No resampling and nothing trimmed: the file's s16 samples, scaled as soundfile scales them."""
    pcm = (0.5 * np.sin(2 * np.pi * 440 * np.arange(4 * 24000) / 24000)).astype(np.float32)
    clip = decode_upload(encode("wav", "pcm_s16le", pcm, rate=24000))
    stored = np.round(pcm * 32767).clip(-32768, 32767) / 32768
    assert clip.pcm.shape == pcm.shape and np.abs(clip.pcm - stored).max() < 1e-4


def test_silence_at_the_ends_is_trimmed():
    pcm = np.concatenate([np.zeros(48000 * 3, np.float32), recording(4.0), np.zeros(48000 * 5, np.float32)])
    clip = decode_upload(encode("flac", "flac", pcm))
    assert clip.source_seconds == pytest.approx(12.0, abs=0.05)
    assert 3.9 <= clip.seconds <= 4.3
    assert trim_silence(np.zeros(0, np.float32)).shape == (0,)


def flac_claiming(total_samples: int, data: bytes) -> bytes:
    """A FLAC file whose STREAMINFO declares `total_samples` (36 bits) instead of its own."""
    info = bytearray(data[8:8 + 34])  # after "fLaC" and the block header
    packed = int.from_bytes(info[10:18], "big")
    packed = (packed & ~((1 << 36) - 1)) | total_samples
    info[10:18] = packed.to_bytes(8, "big")
    return data[:8] + bytes(info) + data[8 + 34:]


def wav_claiming(seconds: float, real_seconds: float) -> bytes:
    rate = 24000
    data = (speech_like(int(real_seconds * rate), 0) * 32767).astype("<i2").tobytes()
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    size = int(seconds * rate) * 2
    return (b"RIFF" + struct.pack("<I", 36 + size) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
            + b"data" + struct.pack("<I", size) + data)


def refused(data: bytes, status: int, words: str) -> float:
    start = time.monotonic()
    with pytest.raises(UploadError) as caught:
        decode_upload(data)
    assert caught.value.status == status, caught.value
    assert words in str(caught.value), str(caught.value)
    return time.monotonic() - start


def test_a_ten_hour_declaration_is_refused_before_decoding():
    """A FLAC whose header says 10 hours: refused from the header (no samples decoded)."""
    data = flac_claiming(10 * 3600 * 48000, encode("flac", "flac", recording(5.0)))
    assert refused(data, 422, "36000 s long") < 0.5
    assert refused(encode("wav", "pcm_s16le", recording(90.0, rate=8000), rate=8000), 422, "90 s long") < 0.5
    # A WAV header claiming more data than the file holds is read for what it holds (FFmpeg
    # bounds the data chunk by the file), so the lie costs nothing.
    assert decode_upload(wav_claiming(7200, 4.0)).seconds == pytest.approx(4.0, abs=0.05)


def test_more_audio_than_declared_stops_at_the_decoding_bound():
    """A live WebM (a browser's recording: no duration in the header) of 70 s is cut off while
    decoding, at 60 s, not decoded to its end."""
    data = encode("webm", "libopus", recording(70.0), options={"live": "1"})
    refused(data, 422, "over 60 s long")


@pytest.mark.parametrize("make,status,words", [
    (lambda: b"", 422, "empty"),
    (lambda: b"not audio at all, just some text\n" * 100, 415, "not an audio file"),
    (lambda: b"PK\x03\x04" + bytes(2000), 415, "not an audio file"),
    (lambda: b"\x89PNG\r\n\x1a\n" + bytes(500), 415, "not an audio file"),
    (lambda: b"#EXTM3U\n#EXT-X-VERSION:3\nfile:///etc/passwd\n", 415, "not an audio file"),
    (lambda: encode("ipod", "aac", recording(5.0))[:3000], 422, "cannot be decoded"),
    (lambda: encode("wav", "pcm_s16le", recording(5.0))[:40], 422, ""),
    (lambda: encode("mp3", "libmp3lame", recording(5.0))[:5000], 422, "of sound"),
    (lambda: encode("flac", "flac", recording(2.0)), 422, "at least 3 s"),
    (lambda: encode("ogg", "libopus", recording(40.0)), 422, "at most 30 s"),
    (lambda: encode("wav", "pcm_s16le", np.zeros(48000 * 5, np.float32)), 422, "silent"),
    (lambda: b"RIFF" + bytes(MAX_UPLOAD_BYTES), 413, "over 20 MB"),
], ids=["empty", "text", "zip", "png", "playlist", "truncated-m4a", "header-only-wav", "truncated-mp3",
        "too-short", "too-long", "silent", "oversized"])
def test_bad_files_are_refused_clearly(make, status, words):
    refused(make(), status, words)


def test_containers_are_recognised_by_their_first_bytes():
    assert sniff(encode("webm", "libopus", recording(0.5))) == "matroska"
    assert sniff(encode("mp4", "aac", recording(0.5))) == "mov"
    assert sniff(b"ID3\x04\x00" + bytes(20)) == "mp3"
