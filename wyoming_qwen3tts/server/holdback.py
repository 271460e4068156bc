"""When to start playing a sentence whose text is still arriving (word-level feeding).

While its text is open, a sequence makes at most one frame per text token that has arrived
(the talker reads text token k+1 with frame k, docs/MODEL.md §5.3), and speech runs several
frames behind the text. Audio also arrives in codec chunks: one short first chunk (latency),
then `chunk` frames at a time, so the second chunk comes only `chunk` frames after the first
(a paced sentence the engine keeps supplied with short chunks: `chunk` is 1, engine/pacing.py).
When the LLM writes slower than 12.5 tokens/s, the CPU generates slower than real time, or a
chunk takes longer to make than the audio before it lasts, audio played as it comes runs dry
mid-word. So the start of such a sentence is held until, at the frame rate the engine is
measured to make (or, until it is, expects to make), every later chunk would arrive before
playback reaches it — and never longer
than `max_s` (server.holdback_s) from its first audio: the bound is what it can cost in
first-audio latency.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

FRAME_S = 0.08  # one frame of 24 kHz audio
FRAMES_PER_TOKEN = 3.5  # speech per text token: ~150 words/min at ~1.3 tokens/word (English), ~4 chars/s (Chinese)
MEASURED_FRAMES = 2  # frames made after the first before the rate is trusted (until then: the expected rate, or hold)


@dataclass(frozen=True)
class Holdback:
    max_s: float  # the longest the start of a sentence's audio is held; 0: never held

    def wait_s(self, made: int, since_first_s: float, held: int, tokens: int, chunk: int,
               expected_rate: float | None = None) -> float | None:
        """Seconds still to wait before playing a held start; None while the rate is unknown.

        made: frames the engine has made; since_first_s: seconds since the first of them
        arrived as audio; held: frames of audio received and not yet played; tokens: text
        tokens so far (the sentence's length is estimated from them); chunk: frames per codec
        chunk from here on; expected_rate: the frames/s the engine expects to make for this
        sentence (measured on the ones before it), used until its own rate is measured. At r
        frames/s, the chunk that ends at frame e arrives (e - made) / r from now and its first
        frame s plays s * FRAME_S after playback starts, so the start waits for the latest of
        those differences."""
        if self.max_s <= 0:
            return 0.0
        if made - 1 >= MEASURED_FRAMES and since_first_s > 0:
            rate = (made - 1) / since_first_s
        elif expected_rate is not None and expected_rate > 0:
            rate = expected_rate
        else:
            return None
        total = max(made, held, math.ceil(FRAMES_PER_TOKEN * tokens))
        wait, end = 0.0, held
        while end < total:  # at most total / chunk rounds
            start, end = end, min(end + max(1, chunk), total)
            wait = max(wait, max(0, end - made) / rate - start * FRAME_S)
        return wait
