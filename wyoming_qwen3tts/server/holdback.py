"""When to start playing a sentence whose text is still arriving (word-level feeding).

While its text is open, a sequence makes at most one frame per text token that has arrived
(the talker reads text token k+1 with frame k, docs/MODEL.md §5.3), and speech runs several
frames behind the text. When an LLM writes slower than 12.5 tokens/s, or the CPU generates
slower than real time, frames come slower than the 80 ms each plays for, and audio played
as it comes runs dry mid-word. So the start of such a sentence is held until the audio
buffered covers the shortfall that the sentence's measured frame rate predicts for the rest
of it, and never longer than `max_s` (server.holdback_s): the bound is what it can cost in
first-audio latency.
"""
from __future__ import annotations

from dataclasses import dataclass

FRAME_S = 0.08  # one frame of 24 kHz audio
FRAMES_PER_TOKEN = 3.5  # speech per text token: ~150 words/min at ~1.3 tokens/word (English), ~4 chars/s (Chinese)


@dataclass(frozen=True)
class Holdback:
    max_s: float  # the longest the start of a sentence's audio is held; 0: never held

    def buffer_s(self, frames: int, elapsed_s: float, tokens: int) -> float:
        """Seconds of audio to buffer before playing, for a sentence that has made `frames`
        frames in `elapsed_s` seconds from `tokens` text tokens so far. With r frames/s
        and R frames still to come, playing B buffered frames at once never runs dry iff
        B >= R (12.5 / r - 1); R is estimated from the text so far."""
        if self.max_s <= 0 or frames <= 0 or elapsed_s <= 0:
            return 0.0
        rate = frames / elapsed_s
        if rate * FRAME_S >= 1.0:
            return 0.0  # faster than real time
        remaining = max(0.0, FRAMES_PER_TOKEN * tokens - frames)
        return min(self.max_s, remaining * (1.0 / (rate * FRAME_S) - 1.0) * FRAME_S)
