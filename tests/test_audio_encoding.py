"""The HTTP side's streaming encoders (server/audio_encoding.py): every format's bytes, joined,
decode with PyAV (FFmpeg's decoders, not our code) to the PCM's duration, give or take the
format's stated priming and padding; the lossless ones to the very samples."""
from __future__ import annotations

import io

import av
import numpy as np
import pytest

from wyoming_qwen3tts.server.audio_encoding import FORMATS, StreamEncoder

RATE = 24_000


def speechlike(samples: int, seed: int = 0) -> np.ndarray:
    """A voiced tone with a changing pitch and some noise: int16, loud enough to matter."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / RATE
    pitch = 140 + 40 * np.sin(2 * np.pi * 0.7 * t)
    wave = 0.4 * np.sin(2 * np.pi * np.cumsum(pitch) / RATE) + 0.02 * rng.standard_normal(samples)
    return (wave * 32767).astype(np.int16)


def encode_in_chunks(name: str, pcm: np.ndarray, sizes: list[int]) -> tuple[list[bytes], bytes]:
    """The bytes after each chunk, and those of the flush."""
    encoder = StreamEncoder(FORMATS[name])
    outputs, begin = [], 0
    for size in sizes:
        outputs.append(encoder.encode(pcm[begin:begin + size]))
        begin += size
    assert begin == pcm.size
    return outputs, encoder.flush()


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """All samples (mono, float) and the rate, as FFmpeg decodes them."""
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray().astype(np.float64).reshape(-1) for f in container.decode(audio=0)]
        rate = container.streams.audio[0].codec_context.sample_rate
    return np.concatenate(frames), rate


def normalized(samples: np.ndarray) -> np.ndarray:
    return samples / 32768.0 if np.abs(samples).max() > 2 else samples


# 80 ms engine chunks, an empty one, odd sizes: 1.5 s and a bit in all
CHUNKS = [1920, 1920, 0, 333, 3840, 1920 * 5, 17, 1920 * 8, 1234]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_format_decodes_to_the_pcm_duration(name):
    fmt, pcm = FORMATS[name], speechlike(sum(CHUNKS))
    outputs, tail = encode_in_chunks(name, pcm, CHUNKS)
    data = b"".join(outputs) + tail
    if name == "pcm":
        assert data == pcm.tobytes()
        return
    decoded, rate = decode(data)
    duration, expected = decoded.size / rate, pcm.size / RATE
    assert expected <= duration + 1e-9 and duration - expected <= fmt.extra_s + 1e-9, (name, duration, expected)
    if fmt.exact:
        assert rate == RATE and np.array_equal(decoded.astype(np.int64), pcm.astype(np.int64))
    else:  # lossy: the same loudness as the input, not silence or noise
        level_in = np.sqrt(np.mean(normalized(pcm.astype(np.float64)) ** 2))
        level_out = np.sqrt(np.mean(normalized(decoded) ** 2))
        assert abs(level_out - level_in) / level_in < 0.2, (name, level_in, level_out)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_bytes_leave_before_the_end(name):
    """A streamed response's encoder hands out its audio while it comes in: after 0.4 s of the
    1.5 s, more than the container's header is out (mp3 and aac: their look-ahead later)."""
    pcm = speechlike(sum(CHUNKS))
    outputs, tail = encode_in_chunks(name, pcm, CHUNKS)
    total = len(b"".join(outputs) + tail)
    first_five = sum(len(o) for o in outputs[:5])  # 0.42 s of audio
    assert first_five > 0.15 * total, (name, first_five, total)


def test_wav_is_a_streaming_header_then_the_samples():
    """A WAV whose sizes are unknown (0xFFFFFFFF): 44 bytes of header, then the PCM as is,
    the header with the first chunk."""
    pcm = speechlike(4000)
    outputs, tail = encode_in_chunks("wav", pcm, [1920, 2080])
    head = outputs[0][:44]
    assert head[:4] == b"RIFF" and head[4:8] == b"\xff" * 4 and head[8:16] == b"WAVEfmt "
    assert int.from_bytes(head[24:28], "little") == RATE and int.from_bytes(head[34:36], "little") == 16
    assert head[36:40] == b"data" and head[40:44] == b"\xff" * 4
    assert b"".join(outputs)[44:] + tail == pcm.tobytes()


def test_opus_is_ogg_decoded_at_48k():
    pcm = speechlike(RATE)
    outputs, tail = encode_in_chunks("opus", pcm, [RATE])
    data = b"".join(outputs) + tail
    assert data[:4] == b"OggS" and b"OpusHead" in data[:64]
    decoded, rate = decode(data)
    assert rate == 48_000 and decoded.size == 2 * pcm.size


def test_aac_is_adts_and_mp3_bare_frames():
    for name, sync in (("aac", b"\xff\xf1"), ("mp3", b"\xff\xf3")):  # ADTS MPEG-4; MPEG-2 layer III at 24 kHz
        outputs, tail = encode_in_chunks(name, speechlike(RATE), [RATE])
        data = b"".join(outputs) + tail
        assert data[:2] == sync, (name, data[:4].hex())


def test_an_abandoned_encoder_closes_cleanly():
    """The client left mid-stream: the encoder is closed without its end, and says so if used."""
    encoder = StreamEncoder(FORMATS["mp3"])
    encoder.encode(speechlike(1920))
    encoder.close()
    encoder.close()
    with pytest.raises(RuntimeError):
        encoder.encode(speechlike(1920))


def test_rejects_samples_that_are_not_int16_mono():
    encoder = StreamEncoder(FORMATS["wav"])
    with pytest.raises(ValueError):
        encoder.encode(np.zeros(10, np.float32))
    with pytest.raises(ValueError):
        encoder.encode(np.zeros((2, 10), np.int16))
