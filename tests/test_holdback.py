"""Holding back the start of a sentence whose text is still arriving (server/holdback.py and
Speech._play): the buffer it asks for, and what a response writes when."""
from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from wyoming_qwen3tts.engine.stream import AudioChunk, AudioStream, StreamResult
from wyoming_qwen3tts.server.holdback import FRAME_S, FRAMES_PER_TOKEN, Holdback
from wyoming_qwen3tts.server.speech import Speech, Synth

FRAME = 1920


def test_no_hold_when_faster_than_real_time_or_disabled():
    assert Holdback(1.0).buffer_s(frames=20, elapsed_s=1.0, tokens=10) == 0.0  # 20 frames/s
    assert Holdback(0.0).buffer_s(frames=5, elapsed_s=1.0, tokens=10) == 0.0
    assert Holdback(1.0).buffer_s(frames=0, elapsed_s=1.0, tokens=10) == 0.0  # nothing measured yet


def test_the_buffer_covers_the_predicted_shortfall_up_to_the_bound():
    # 10 frames/s for 10 tokens: 35 frames expected, 25 to come; playing them takes 2.0 s,
    # making them 2.5 s, so 0.5 s must be buffered first
    rate, tokens, frames = 10.0, 10, 10
    remaining = FRAMES_PER_TOKEN * tokens - frames
    expected = remaining / rate - remaining * FRAME_S
    assert Holdback(5.0).buffer_s(frames, frames / rate, tokens) == pytest.approx(expected)
    assert Holdback(0.3).buffer_s(frames, frames / rate, tokens) == 0.3
    assert Holdback(5.0).buffer_s(40, 4.0, tokens) == 0.0  # all expected frames made


class FakeUtterance:
    """An engine utterance whose audio arrives one frame per `period` seconds."""

    def __init__(self, frames: int, period: float, tokens: int) -> None:
        self.stream = AudioStream(0, lambda _: None)
        self.stream.marks["admitted"] = time.monotonic()
        self.tokens, self.frames, self.period = tokens, frames, period
        self.produced: list[float] = []

    def append(self, text: str) -> None:
        pass

    def finish(self) -> None:
        pass

    async def produce(self) -> None:
        for i in range(self.frames):
            await asyncio.sleep(self.period)
            self.produced.append(time.monotonic())
            self.stream.put(AudioChunk(np.full(FRAME, 0.1, np.float32), final=i == self.frames - 1))
        self.stream.finish(StreamResult("eos", self.frames, self.frames * FRAME, 0.0, 0.0, 0.0, None))


async def speak(holdback: float, frames: int = 12, period: float = 0.1) -> tuple[list[float], list[float], list]:
    """(times the frames were produced, times of the audio-chunk events written, the events)."""
    utterance = FakeUtterance(frames, period, tokens=10)
    written: list[float] = []
    events: list = []

    async def write(event) -> None:
        events.append(event)
        if event.type == "audio-chunk":
            written.append(time.monotonic())

    async def prepare() -> Synth:
        return Synth(submit=lambda sentence: None, open=lambda: utterance)

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
