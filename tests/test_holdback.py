"""Holding back the start of a sentence whose text is still arriving (server/holdback.py and
Speech._play): the buffer it asks for, and what a response writes when."""
from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import pytest

from wyoming_qwen3tts.engine.stream import AudioChunk, AudioStream, StreamResult
from wyoming_qwen3tts.server.holdback import FRAME_S, FRAMES_PER_TOKEN, MEASURED_FRAMES, Holdback
from wyoming_qwen3tts.server.speech import Speech, Synth

FRAME = 1920


def dry_frames(wait: float, made: int, held: int, total: int, rate: float, chunk: int) -> list[int]:
    """Frames that would play before they arrive, simulated frame by frame: playback starts
    `wait` s from now with frames 0..held-1 in hand, frame j plays at wait + j * FRAME_S;
    frame f > made is made at (f - made) / rate and arrives with the last frame of its chunk
    (chunks of `chunk` frames after `held`)."""
    dry = []
    for j in range(held, total):
        end = min(held + ((j - held) // chunk + 1) * chunk, total)
        if wait + j * FRAME_S < max(0, end - made) / rate - 1e-9:
            dry.append(j)
    return dry


def test_no_hold_when_disabled_and_none_until_the_rate_is_measured():
    assert Holdback(0.0).wait_s(made=5, since_first_s=1.0, held=1, tokens=10, chunk=8) == 0.0
    assert Holdback(1.0).wait_s(made=1 + MEASURED_FRAMES - 1, since_first_s=0.1, held=1, tokens=10, chunk=1) is None
    assert Holdback(1.0).wait_s(made=1 + MEASURED_FRAMES, since_first_s=0.0, held=1, tokens=10, chunk=1) is None
    assert Holdback(1.0).wait_s(made=1 + MEASURED_FRAMES, since_first_s=0.1, held=1, tokens=10, chunk=1) is not None


def test_the_engines_expected_rate_stands_in_until_the_sentences_own_is_measured():
    assert Holdback(1.0).wait_s(made=1, since_first_s=0.0, held=1, tokens=10, chunk=1, expected_rate=20.0) == 0.0
    assert Holdback(1.0).wait_s(made=1, since_first_s=0.0, held=1, tokens=10, chunk=1,
                                expected_rate=10.0) > 0  # slower than real time: the end would run dry
    # measured: its own rate (8 frames/s here) wins over the expectation
    assert Holdback(1.0).wait_s(made=4, since_first_s=3 / 8, held=4, tokens=10, chunk=1, expected_rate=50.0) > 0


@pytest.mark.parametrize("rate", [8.0, 12.5, 20.0, 60.0])
@pytest.mark.parametrize("chunk", [1, 4, 8])
@pytest.mark.parametrize("made,held", [(3, 1), (6, 1), (9, 9)])
def test_the_wait_is_the_shortest_that_never_runs_dry(rate, chunk, made, held):
    tokens = 10
    total = math.ceil(FRAMES_PER_TOKEN * tokens)
    wait = Holdback(100.0).wait_s(made, (made - 1) / rate, held, tokens, chunk)
    assert wait is not None and wait >= 0
    assert dry_frames(wait, made, held, total, rate, chunk) == []
    if wait > 0:
        assert dry_frames(wait - 0.01, made, held, total, rate, chunk) != []


def test_faster_than_real_time_frame_by_frame_needs_no_wait_but_chunks_do():
    assert Holdback(1.0).wait_s(made=4, since_first_s=0.15, held=4, tokens=10, chunk=1) == 0.0  # 20 frames/s
    # the same pace with 8-frame chunks: the second chunk comes 8 frames after the first
    assert Holdback(1.0).wait_s(made=4, since_first_s=0.15, held=1, tokens=10, chunk=8) == pytest.approx(
        (9 - 4) / 20 - FRAME_S)


class FakeUtterance:
    """An engine utterance whose audio arrives one frame per `period` seconds."""

    def __init__(self, frames: int, period: float, tokens: int, chunk: int = 1) -> None:
        self.stream = AudioStream(0, lambda _: None)
        self.stream.marks["admitted"] = time.monotonic()
        self.stream.chunk_frames, self.stream.text_tokens = chunk, tokens
        self.frames, self.period, self.chunk = frames, period, chunk
        self.produced: list[float] = []

    def append(self, text: str) -> None:
        pass

    def finish(self) -> None:
        pass

    async def produce(self) -> None:
        """One frame per period, decoded alone first and then `chunk` at a time, as the engine's
        chunk schedule does."""
        pending = 0
        for i in range(self.frames):
            await asyncio.sleep(self.period)
            self.produced.append(time.monotonic())
            self.stream.frames, pending = i + 1, pending + 1
            if i == 0:
                self.stream.marks["first_audio"] = time.monotonic()
            final = i == self.frames - 1
            if i == 0 or pending == self.chunk or final:
                self.stream.put(AudioChunk(np.full(FRAME * pending, 0.1, np.float32), final=final))
                pending = 0
        self.stream.finish(StreamResult("eos", self.frames, self.frames * FRAME, 0.0, 0.0, 0.0, None))


async def speak(holdback: float, frames: int = 12, period: float = 0.1, tokens: int = 10,
                chunk: int = 1, expected_rate: float | None = None) -> tuple[list[float], list[float], list]:
    """(times the frames were produced, times of the audio-chunk events written, the events)."""
    utterance = FakeUtterance(frames, period, tokens, chunk)
    utterance.stream.rate_hint = expected_rate
    written: list[float] = []
    events: list = []

    async def write(event) -> None:
        events.append(event)
        if event.type == "audio-chunk":
            written.append(time.monotonic())

    async def prepare() -> Synth:
        return Synth(submit=lambda sentence, heard: None, open=lambda heard: utterance)

    speech = Speech(prepare, write, samples_per_chunk=FRAME, streaming=True, holdback=Holdback(holdback))
    speech.add_text("The weather today", end=False)
    producer = asyncio.create_task(utterance.produce())
    runner = asyncio.create_task(speech.run())
    await producer
    speech.add_text(" is fine.", end=True)
    speech.close()
    await asyncio.wait_for(runner, 10)
    return utterance.produced, written, events


def test_a_slow_sentence_is_held_at_most_the_bound_and_then_written_whole():
    """10 frames/s is slower than real time: the start waits 0.35 s (three more frames), not
    for the end (1.2 s)."""
    produced, written, events = asyncio.run(speak(holdback=0.35))
    assert len(written) == 12  # nothing lost
    assert written[0] >= produced[0] + 0.35 and written[0] > produced[3]
    assert written[0] < produced[-1]
    assert [e.type for e in events][-2:] == ["audio-stop", "synthesize-stopped"]


def test_without_a_holdback_audio_goes_out_as_it_comes():
    produced, written, _ = asyncio.run(speak(holdback=0.0))
    assert len(written) == 12 and written[0] < produced[1]


def test_a_fast_sentence_starts_once_its_rate_is_measured():
    """50 frames/s, frame by frame: released as soon as the rate is known, long before the bound."""
    produced, written, _ = asyncio.run(speak(holdback=1.0, frames=20, period=0.02, tokens=5))
    assert len(written) == 20
    assert produced[MEASURED_FRAMES] <= written[0] < produced[MEASURED_FRAMES + 3]  # not at the end (0.4 s)


def test_a_fast_sentence_the_engine_expects_to_keep_up_starts_with_its_first_audio():
    produced, written, _ = asyncio.run(speak(holdback=1.0, frames=20, period=0.02, tokens=5, expected_rate=50.0))
    assert len(written) == 20 and written[0] < produced[1]


def test_a_chunked_start_waits_for_the_second_chunk_and_then_never_runs_dry():
    """20 frames/s (faster than real time) in 8-frame chunks after a 1-frame first chunk: played
    as it came, the first frame would be followed by a 0.32 s gap; held, every chunk is written
    before the audio before it has played."""
    produced, written, events = asyncio.run(speak(holdback=1.0, frames=25, period=0.05, tokens=7, chunk=8))
    chunks = [e for e in events if e.type == "audio-chunk"]
    assert sum(len(c.payload) for c in chunks) == 25 * FRAME * 2  # nothing lost
    assert written[0] > produced[0] + 0.2  # held for the second chunk
    played = 0.0
    for at, chunk in zip(written, chunks):
        assert at <= written[0] + played + 0.03, "ran dry"
        played += len(chunk.payload) / 2 / 24000


def test_only_a_sentence_heard_as_soon_as_it_has_audio_is_paced():
    """The next sentence is made while the one before it plays: pacing it against a playback
    that has not started would spend decoder calls on audio nobody hears yet."""
    flags: list[bool] = []

    def submit(sentence: str, heard: bool) -> AudioStream:
        flags.append(heard)
        utterance = FakeUtterance(frames=3, period=0.01, tokens=3)
        asyncio.get_running_loop().create_task(utterance.produce())
        return utterance.stream

    async def main() -> list:
        events: list = []

        async def write(event) -> None:
            events.append(event)

        async def prepare() -> Synth:
            return Synth(submit=submit)

        speech = Speech(prepare, write, samples_per_chunk=FRAME, streaming=True, holdback=Holdback(0.0))
        for sentence in ("One.", " Two.", " Three."):
            speech.add_text(sentence, end=True)
        speech.close()
        await asyncio.wait_for(speech.run(), 10)
        return events

    events = asyncio.run(main())
    assert flags == [True, False, False]
    assert sum(e.type == "audio-chunk" for e in events) == 9
