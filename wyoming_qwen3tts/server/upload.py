"""Uploaded recordings -> a clip the clone encoders take: 24 kHz mono float32 (docs/HTTP.md,
"Recordings").

Decoded with PyAV (FFmpeg): WAV, FLAC, MP3, OGG (Opus, Vorbis), M4A/MP4 (AAC), WebM/Matroska
(Opus), ADTS AAC. The container is recognised from the file's first bytes and opened with
that demuxer only (FFmpeg's playlist and concat demuxers, which open other files, can never
be picked by probing). Bounds, each checked as early as it can be: the bytes (the route reads
at most MAX_UPLOAD_BYTES), the duration the container declares (before decoding), the
samples decoded so far (a file that declares less than it holds, or a decompression bomb,
stops at MAX_DECODE_S), the packets read and the decoding errors met.

Then: channels mixed down by the mean and resampled to 24 kHz as the encoders' reference
reader does (clone/reference_audio.py: soxr with librosa's settings), silence at both ends
trimmed, and the rest must be MIN_CLIP_S..MAX_CLIP_S long.
"""
from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import av
import numpy as np

from ..clone.reference_audio import RATES, resample
from ..engine.audio import SAMPLE_RATE
from .api_error import ApiError

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 20 * 2**20
MAX_DECODE_S = 60.0  # a recording is decoded up to this long (silence trimming may shorten it)
MIN_CLIP_S, MAX_CLIP_S = 3, 30  # the clip after trimming; the encoders take up to 30 s (clone/cloner.py)
MAX_PACKETS = 50_000  # even 1 ms packets of 60 s are fewer
MAX_BAD_PACKETS = 8  # damaged packets skipped before the file is refused
MAX_CHANNELS = 8
SILENCE_RMS = 1e-4  # the whole clip quieter than this (about -80 dBFS) holds no voice (as clone/cloner.py)
TRIM_WINDOW = 480  # 20 ms at 24 kHz
TRIM_BELOW_PEAK = 0.01  # windows 40 dB below the loudest one are silence at the ends
TRIM_MARGIN = 2400  # 100 ms of the silence kept on each side

# The containers taken: (first bytes match) -> FFmpeg demuxer.
FORMATS = ("wav", "flac", "mp3", "aac", "ogg", "mov", "matroska")


class UploadError(ApiError):
    """A recording that cannot be used; the status says how (413 too big, 415 not audio, 422 unusable)."""


@dataclass(frozen=True, eq=False)
class Clip:
    """A usable recording: 24 kHz mono float32, trimmed."""

    pcm: np.ndarray
    source_seconds: float  # as decoded, before trimming
    container: str

    @property
    def seconds(self) -> float:
        return self.pcm.shape[0] / SAMPLE_RATE


def sniff(data: bytes) -> str:
    """The demuxer for a file's first bytes; UploadError 415 for anything else."""
    head = data[:64]
    if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"
    if head[4:8] == b"ftyp":
        return "mov"
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "aac" if head[:2] in (b"\xff\xf1", b"\xff\xf9") else "mp3"
    raise UploadError(415, "not an audio file this server reads: use WAV, FLAC, MP3, OGG/Opus, M4A/AAC, "
                           "WebM/Opus or MP4")


def decode_upload(data: bytes) -> Clip:
    """The clip of an uploaded file's bytes, or UploadError with a message for the user."""
    if not data:
        raise UploadError(422, "the file is empty")
    if len(data) > MAX_UPLOAD_BYTES:
        raise UploadError(413, f"the file is over {MAX_UPLOAD_BYTES // 2**20} MB")
    container = sniff(data)
    mono, rate = _decode(data, container)
    if mono.shape[0] == 0:
        raise UploadError(422, "the file holds no audio (truncated or empty)")
    source_seconds = mono.shape[0] / rate
    pcm = resample(mono, rate, SAMPLE_RATE)
    if float(np.sqrt(np.mean(np.square(pcm, dtype=np.float64)))) < SILENCE_RMS:
        raise UploadError(422, "the recording is silent")
    pcm = trim_silence(pcm)
    seconds = pcm.shape[0] / SAMPLE_RATE
    if seconds < MIN_CLIP_S:
        raise UploadError(422, f"the recording has {seconds:.1f} s of sound; record at least {MIN_CLIP_S} s "
                               f"(5-15 s of clear speech work best)")
    if seconds > MAX_CLIP_S:
        raise UploadError(422, f"the recording has {seconds:.1f} s of sound; use at most {MAX_CLIP_S} s")
    log.info("upload: %s, %.1f s at %d Hz -> %.1f s at 24 kHz after trimming", container, source_seconds, rate,
             seconds)
    return Clip(pcm, source_seconds, container)


def _decode(data: bytes, container: str) -> tuple[np.ndarray, int]:
    """(mono float32 samples, their rate), bounded as the module says."""
    try:
        with av.open(io.BytesIO(data), mode="r", format=container) as media:
            streams = media.streams.audio
            if not streams:
                raise UploadError(415, "the file has no audio track")
            stream = streams[0]
            declared = _declared_seconds(media, stream)
            if declared is not None and declared > MAX_DECODE_S:
                raise UploadError(422, f"the recording is {declared:.0f} s long; use at most {MAX_CLIP_S} s "
                                       f"(files up to {MAX_DECODE_S:.0f} s are trimmed of silence)")
            return _samples(media, stream)
    except av.FFmpegError as e:
        raise UploadError(422, f"the file cannot be decoded as {container} audio (damaged or truncated?): "
                               f"{e.strerror or e}") from None


def _declared_seconds(media: av.container.InputContainer, stream: av.audio.stream.AudioStream) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if media.duration is not None:
        return media.duration / av.time_base
    return None


def _samples(media: av.container.InputContainer, stream: av.audio.stream.AudioStream) -> tuple[np.ndarray, int]:
    parts: list[np.ndarray] = []
    rate: int | None = None
    decoded = packets = bad = 0
    for packet in media.demux(stream):
        packets += 1
        if packets > MAX_PACKETS:
            raise UploadError(422, "the file is split into too many packets to be a short recording")
        try:
            frames = packet.decode()
        except av.FFmpegError:
            bad += 1
            if bad > MAX_BAD_PACKETS:
                raise UploadError(422, "the file is damaged (too many undecodable packets)") from None
            continue
        for frame in frames:
            if rate is None:
                rate = frame.sample_rate
                if not RATES[0] <= rate <= RATES[1]:
                    raise UploadError(422, f"a sample rate of {rate} Hz is not supported ({RATES[0]}-{RATES[1]} Hz)")
            elif frame.sample_rate != rate:
                raise UploadError(422, "the sample rate changes within the file")
            decoded += frame.samples
            if decoded > MAX_DECODE_S * rate:
                raise UploadError(422, f"the recording is over {MAX_DECODE_S:.0f} s long; use at most "
                                       f"{MAX_CLIP_S} s")
            parts.append(_mono(frame))
    if rate is None:
        return np.zeros(0, np.float32), SAMPLE_RATE
    return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), rate


def _mono(frame: av.AudioFrame) -> np.ndarray:
    """A frame's samples as float32 in [-1, 1], channels mixed down by the mean."""
    channels = len(frame.layout.channels)
    if not 1 <= channels <= MAX_CHANNELS:
        raise UploadError(422, f"{channels} audio channels are not supported (at most {MAX_CHANNELS})")
    x: np.ndarray = frame.to_ndarray()
    fmt = frame.format
    if not fmt.is_planar:  # interleaved: [1, samples * channels]
        x = x.reshape(-1, channels).T
    if x.dtype.kind == "f":
        x = x.astype(np.float32)
    elif x.dtype == np.uint8:
        x = (x.astype(np.float32) - 128.0) / 128.0
    else:
        x = x.astype(np.float32) / float(2 ** (8 * x.dtype.itemsize - 1))
    x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    return x[0] if channels == 1 else x.mean(axis=0, dtype=np.float32)


def trim_silence(pcm: np.ndarray) -> np.ndarray:
    """`pcm` without the silence at its ends (windows far below the loudest), keeping a margin."""
    windows = pcm.shape[0] // TRIM_WINDOW
    if windows == 0:
        return pcm
    rms = np.sqrt(np.mean(np.square(pcm[:windows * TRIM_WINDOW].reshape(windows, TRIM_WINDOW),
                                    dtype=np.float64), axis=1))
    loud = np.flatnonzero(rms >= max(SILENCE_RMS, float(rms.max()) * TRIM_BELOW_PEAK))
    if loud.size == 0:
        return pcm
    start = max(0, int(loud[0]) * TRIM_WINDOW - TRIM_MARGIN)
    end = min(pcm.shape[0], (int(loud[-1]) + 1) * TRIM_WINDOW + TRIM_MARGIN)
    return pcm[start:end]
