"""Codec chunks for a listener who plays the audio as it arrives (a paced sequence).

A stream's first chunk is short (first audio after one frame); the chunks after it are long
(`steady` frames), because the decoder's cost per call is mostly fixed: fewer, longer calls
make more frames per second. But a long chunk arrives only `steady` frames after the one
before it, so a listener who started playing at the first audio runs dry in between unless
that audio lasts longer than the time to make and decode the next long chunk — at 20 frames/s
the second chunk of 8 frames comes ~0.45 s after a first chunk that plays for 80 ms.

A paced sequence (a streamed response) therefore decodes short chunks — the first chunk's
size, through a steady graph of that length, which carries the decoder state on — for as long
as the audio it is ahead of playback would not cover the wait for a long chunk, and long ones
once it would. The engine measures the two costs that decide it as it runs: a decode step's
generation time at each batch size, and one stream's decoder call at each chunk size. Short
chunks only help while they are themselves at least as fast as real time; when they are not,
the long ones make the most audio and the schedule does not change (the server's holdback is
what then guards the start).

They are taken whenever they keep up at all, not only with a margin over real time: the other
choice, a long chunk, makes the server's holdback (server/holdback.py) hold a streamed start
for most of that chunk's making — ~0.5 s at 13–15 frames/s, which is where a default-preset
stream sits on two cores (docs/BENCHMARKS.md, "Against Home Assistant's default TTS").
"""
from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass, field

MARGIN_S = 0.1  # audio kept in hand beyond the predicted wait for a long chunk (the host's jitter)
WINDOW = 7  # recent measurements an estimate is the median of (a first, cold call is far off)


@dataclass
class _Estimate:
    samples: collections.deque = field(default_factory=lambda: collections.deque(maxlen=WINDOW))

    def add(self, sample: float) -> None:
        self.samples.append(sample)

    @property
    def value(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


@dataclass
class Pacer:
    """Running cost estimates of the batch, and the short-chunk decision for paced sequences."""

    short: int  # frames of a short chunk (the schedule's first chunk)
    steady: int  # frames of a long chunk
    frame_s: float  # seconds of audio per frame
    _generate: dict[int, _Estimate] = field(default_factory=dict)  # batch size -> s per decode step
    _decode: dict[int, _Estimate] = field(default_factory=dict)  # chunk size -> s per stream and call

    def generated(self, sequences: int, seconds: float) -> None:
        """A decode step (one frame for each of `sequences`, no prefill) took `seconds`, from
        its plan to its frames applied (host time included)."""
        self._generate.setdefault(sequences, _Estimate()).add(seconds)

    def decoded(self, size: int, streams: int, seconds: float) -> None:
        """A decoder call of `streams` chunks of `size` frames took `seconds`."""
        self._decode.setdefault(size, _Estimate()).add(seconds / streams)

    def step_s(self, sequences: int) -> float | None:
        """A decode step's generation time at this batch size (None: not measured yet)."""
        return self._generate.get(sequences, _Estimate()).value

    def short_rate(self, sequences: int) -> float | None:
        """Frames per second each of `sequences` paced sequences makes while they all decode
        short chunks: every step then also runs each one's decoder call, for its one new frame
        (a short graph longer than a frame still costs a whole call). None: not measured."""
        step, short = self.step_s(sequences), self._decode_s(self.short)
        return None if step is None or short is None else 1.0 / (step + sequences * short)

    def keeps_up(self, sequences: int) -> bool:
        """Whether short chunks come at least as fast as they play at this batch size (the
        estimates are medians of recent calls, so one slow step does not flip it)."""
        rate = self.short_rate(sequences)
        return rate is not None and rate * self.frame_s >= 1.0

    def short_due(self, sequences: int, ahead_s: float, ready: int) -> bool:
        """Whether a paced sequence with `ready` frames not yet decoded (fewer than a long
        chunk) decodes them now: the audio it is ahead of playback by, `ahead_s`, would not
        cover the wait for a long chunk — the rest of its frames (each step with the other
        sequences' short calls), then the call — and short chunks keep up. Where the long call
        is not measured yet, it is taken to cost a short call per frame (more than it does)."""
        if not self.keeps_up(sequences):
            return False
        step = self.step_s(sequences)
        long = self._decode_s(self.steady)
        short = self._decode_s(self.short)
        assert step is not None and short is not None  # keeps_up measured both
        per_frame = step + (sequences - 1) * short
        wait = (self.steady - ready) * per_frame + (long if long is not None else short * self.steady)
        return ahead_s < wait + MARGIN_S

    def lead_keeps_up(self, lead_s: float, streams: int) -> bool:
        """Whether the first chunks of `streams` new streams, decoded one call after their
        leads (engine/codec_lead.py), come before the lead's `lead_s` of audio has played:
        the first chunk's measured cost per stream, for all of them, within half of it (the
        other half for the host's jitter). False until it is measured."""
        short = self._decode_s(self.short)
        return short is not None and streams * short <= lead_s / 2

    def call_size(self, ready: int) -> int:
        """The graph length that decodes `ready` frames soonest: short calls one after the
        other, or one long call (which costs the same for any frame count up to its length)."""
        short, long = self._decode_s(self.short), self._decode_s(self.steady)
        if short is None or long is None:
            return self.short
        return self.short if -(-ready // self.short) * short <= long else self.steady

    def _decode_s(self, size: int) -> float | None:
        return self._decode.get(size, _Estimate()).value
