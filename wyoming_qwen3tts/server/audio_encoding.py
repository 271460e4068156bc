"""Streaming audio encoders for the HTTP side: int16 PCM chunks in, encoded bytes out as soon
as the encoder has them, the rest at `flush()`. Every codec and container is FFmpeg's, through
PyAV (docs/OPENAI.md, "Formats"): a response's first bytes leave with its first audio, so every
muxer is told to write each packet at once (flush_packets), without seeking back (the output is
a socket): a WAV header carries unknown sizes, an MP3 has no Xing frame, a FLAC header no total.

`pcm` is the engine's own samples (24 kHz s16le mono), passed through untouched; `wav` is them
after the voice lab's streaming WAV header (http_speech.wav_stream_header: one header for
both), which is what FFmpeg's WAV muxer writes to a pipe too.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import av
import numpy as np
from av.audio.stream import AudioStream
from av.container import OutputContainer

from ..engine.audio import SAMPLE_RATE
from .http_speech import wav_stream_header

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AudioFormat:
    """One response format: its MIME type, FFmpeg muxer and encoder (None: raw PCM), and how
    much longer than the PCM its decode may be (encoder priming and padding of the last frame:
    MP3 and ADTS AAC carry no gapless information; Ogg Opus and FLAC decode to the exact length)."""

    name: str
    content_type: str
    header: bytes = b""  # before the samples, when there is no muxer
    muxer: str | None = None
    codec: str = ""
    bit_rate: int | None = None
    codec_options: dict[str, str] = field(default_factory=dict)
    muxer_options: dict[str, str] = field(default_factory=dict)
    extra_s: float = 0.0
    exact: bool = False  # decodes to the very samples (lossless)


FORMATS: dict[str, AudioFormat] = {f.name: f for f in (
    AudioFormat("mp3", "audio/mpeg", muxer="mp3", codec="libmp3lame", bit_rate=64_000,
                muxer_options={"id3v2_version": "0"}, extra_s=0.1),
    AudioFormat("opus", "audio/ogg; codecs=opus", muxer="ogg", codec="libopus", bit_rate=48_000,
                muxer_options={"page_duration": "20000"}),  # a page per 20 ms packet, not per second
    AudioFormat("aac", "audio/aac", muxer="adts", codec="aac", bit_rate=64_000, extra_s=0.1),
    AudioFormat("flac", "audio/flac", muxer="flac", codec="flac",
                codec_options={"frame_size": "1920"},  # one 80 ms frame, out as soon as it is in
                muxer_options={"metadata_header_padding": "0"}, exact=True),
    AudioFormat("wav", "audio/wav", header=wav_stream_header(SAMPLE_RATE), exact=True),
    AudioFormat("pcm", "audio/pcm", exact=True),
)}


class _Sink:
    """The muxer's output: collects what it writes until taken. It has no seek, so every muxer
    writes as for a pipe."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


class StreamEncoder:
    """One response's encoder. Not thread-safe; `close()` releases it early (the client left)."""

    def __init__(self, fmt: AudioFormat) -> None:
        self.format = fmt
        self.samples = 0  # PCM samples taken so far
        self._sink = _Sink()
        self._closed = False
        self._header = fmt.header
        self._container: OutputContainer | None = None
        self._stream: AudioStream | None = None
        if fmt.muxer is None:
            return
        options = {"fflags": "+bitexact", "flush_packets": "1", **fmt.muxer_options}
        self._container = av.open(self._sink, mode="w", format=fmt.muxer, container_options=options)
        stream = self._container.add_stream(fmt.codec, rate=SAMPLE_RATE, layout="mono")
        assert isinstance(stream, AudioStream)
        if fmt.bit_rate is not None:
            stream.codec_context.bit_rate = fmt.bit_rate
        stream.codec_context.options = dict(fmt.codec_options)
        self._stream = stream

    def encode(self, pcm: np.ndarray) -> bytes:
        """Encode int16 mono samples; returns what the encoder and muxer have produced so far
        (may be empty: a codec that waits for a whole frame, or its look-ahead)."""
        if pcm.dtype != np.int16 or pcm.ndim != 1:
            raise ValueError(f"expected 1-D int16 samples, got {pcm.dtype} {pcm.shape}")
        if self._closed:
            raise RuntimeError("the encoder is closed")
        self.samples += pcm.size
        if self._container is None:
            header, self._header = self._header, b""
            return header + pcm.tobytes()
        if pcm.size == 0:
            return b""
        frame = av.AudioFrame.from_ndarray(pcm[None, :], format="s16", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        self._mux(frame)
        return self._sink.take()

    def flush(self) -> bytes:
        """The end of the audio: the encoder's last frames and the container's trailer."""
        if self._closed:
            raise RuntimeError("the encoder is closed")
        if self._container is None:
            self._closed = True
            return b""
        self._mux(None)
        self.close()
        return self._sink.take()

    def close(self) -> None:
        self._closed = True
        if self._container is not None:
            container, self._container = self._container, None
            container.close()

    def _mux(self, frame: av.AudioFrame | None) -> None:
        assert self._container is not None and self._stream is not None
        for packet in self._stream.encode(frame):
            self._container.mux(packet)

    @property
    def duration_s(self) -> float:
        """The PCM taken so far, in seconds."""
        return self.samples / SAMPLE_RATE
