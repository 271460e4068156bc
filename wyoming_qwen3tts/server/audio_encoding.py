"""Streaming audio encoders for the HTTP side: int16 PCM chunks in, encoded bytes out as soon
as the encoder has them, the rest at `flush()`. Every codec and container is FFmpeg's, through
PyAV (docs/OPENAI.md, "Formats"): a response's first bytes leave with its first audio, so every
muxer is told to write each packet at once (flush_packets), without seeking back (the output is
a socket): a WAV header carries unknown sizes, an MP3 has no Xing frame, a FLAC header no total.

`pcm` is the engine's own samples (24 kHz s16le mono), passed through untouched.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import av
import numpy as np
from av.audio.stream import AudioStream
from av.container import OutputContainer

from ..engine.audio import SAMPLE_RATE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AudioFormat:
    """One response format: its MIME type, FFmpeg muxer and encoder (None: raw PCM), and how
    much longer than the PCM its decode may be (encoder priming and padding of the last frame:
    MP3 and ADTS AAC carry no gapless information; Ogg Opus and FLAC decode to the exact length)."""

    name: str
    content_type: str
    muxer: str | None = None
    codec: str = ""
    bit_rate: int | None = None
    codec_options: dict[str, str] = field(default_factory=dict)
    muxer_options: dict[str, str] = field(default_factory=dict)
    extra_s: float = 0.0
    exact: bool = False  # decodes to the very samples (lossless)


FORMATS: dict[str, AudioFormat] = {f.name: f for f in (
    AudioFormat("mp3", "audio/mpeg", "mp3", "libmp3lame", 64_000, muxer_options={"id3v2_version": "0"}, extra_s=0.1),
    AudioFormat("opus", "audio/ogg; codecs=opus", "ogg", "libopus", 48_000,
                muxer_options={"page_duration": "20000"}),  # a page per 20 ms packet, not per second
    AudioFormat("aac", "audio/aac", "adts", "aac", 64_000, extra_s=0.1),
    AudioFormat("flac", "audio/flac", "flac", "flac", codec_options={"frame_size": "1920"},  # one 80 ms frame
                muxer_options={"metadata_header_padding": "0"}, exact=True),
    AudioFormat("wav", "audio/wav", "wav", "pcm_s16le", exact=True),
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

    def __init__(self, fmt: AudioFormat, rate: int = SAMPLE_RATE) -> None:
        self.format, self.rate = fmt, rate
        self.samples = 0  # PCM samples taken so far
        self._sink = _Sink()
        self._closed = False
        self._container: OutputContainer | None = None
        self._stream: AudioStream | None = None
        if fmt.muxer is None:
            return
        options = {"fflags": "+bitexact", "flush_packets": "1", **fmt.muxer_options}
        self._container = av.open(self._sink, mode="w", format=fmt.muxer, container_options=options)
        stream = self._container.add_stream(fmt.codec, rate=rate, layout="mono")
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
            return pcm.tobytes()
        if pcm.size == 0:
            return b""
        frame = av.AudioFrame.from_ndarray(pcm[None, :], format="s16", layout="mono")
        frame.sample_rate = self.rate
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
        return self.samples / self.rate
