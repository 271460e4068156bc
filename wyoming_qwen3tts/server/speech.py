"""One response: sentences in, Wyoming audio events out, in order.

Once the response is being written (not before: a connection's queued responses hold only
text), its sentences are submitted to the engine a few ahead of the one being sent
(sentence n+1 generates while n streams out), and every engine chunk goes out as soon as
it is decoded. With word-level feeding (streamed text, server.text_feeding: word) a sentence
goes to the engine with its first words, as an utterance that grows as the rest arrives
(engine/utterance.py). The start of a streamed response's sentence may be held back a little
(holdback.py) so that the client's playback does not run dry mid-word: a slow CPU, text that
is still being written, or the wait for the second codec chunk.
A response always has exactly one audio-start and one audio-stop (Home Assistant's one-shot
reader stops at the first audio-stop; its streaming reader takes the format from the first
audio-start); a streaming response then ends with synthesize-stopped, after errors too.

Every response ends, whatever happens: a failure sends the `error` event and then the end a
reader waits for, since released Home Assistant ignores `error` and reads a one-shot reply
until `audio-stop` and a streaming one until `synthesize-stopped`. A one-shot failure
therefore sends error, audio-start (if not sent yet), audio-stop; a streaming one error,
audio-stop (if audio started), synthesize-stopped. A response that would carry no audio (the
text had nothing speakable) carries SILENCE_S of silence instead, so every client gets a
playable stream.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.tts import SynthesizeStopped

from ..engine.audio import SAMPLE_RATE, to_int16
from ..engine.stream import AudioStream, EngineBusy, EngineError, RequestTimeout
from ..engine.utterance import Utterance
from .holdback import FRAME_S, Holdback
from .profile import FirstAudio, Profile

log = logging.getLogger(__name__)

WIDTH, CHANNELS = 2, 1
LOOKAHEAD = 2  # sentences in the engine per response: the one being sent and the next
SILENCE_S = 0.2  # the audio of a response with nothing to say: 200 ms of 24 kHz s16 mono zeros
SILENCE_SAMPLES = round(SILENCE_S * SAMPLE_RATE)

POLL_S = 0.02  # how often a held start is looked at again while no audio arrives (the engine's pace)


@dataclass(frozen=True)
class Synth:
    """How a response's sentences reach the engine once its voice is resolved: `submit` a
    whole sentence; `open` an utterance whose text grows (None: sentences are submitted
    whole, when complete). Their flag says whether the sentence is heard as soon as it has
    audio (no sentence of the response is playing before it): only such a sentence of a
    streamed response is paced (engine/pacing.py); the next one is made while the current one
    plays, and pacing it against a playback that has not started would spend decoder calls
    on audio nobody hears yet."""

    submit: Callable[[str, bool], AudioStream]
    open: Callable[[bool], Utterance] | None = None
    release: Callable[[], None] | None = None  # the response has ended: its model may be unloaded again


@dataclass
class _Sentence:
    """A sentence of the response: its text so far, and once started, its engine request."""

    text: str = ""
    closed: bool = False
    utterance: Utterance | None = None
    stream: AudioStream | None = None

    @property
    def started_stream(self) -> AudioStream:
        """The engine request's stream: a sentence in flight has one."""
        if self.stream is None:
            raise RuntimeError("the sentence has not been started")
        return self.stream


class SpeechError(Exception):
    """A failure to report to the client as an error event with a stable code."""

    def __init__(self, text: str, code: str) -> None:
        super().__init__(text)
        self.code = code


def error_code(error: Exception) -> str:
    """The Wyoming error code of an exception: its own `code`, else a stable name."""
    if isinstance(error, EngineBusy):
        return "Busy"
    if isinstance(error, RequestTimeout):
        return "Timeout"
    if isinstance(error, EngineError):
        return "SynthesisFailed"
    return getattr(error, "code", None) or ("BadRequest" if isinstance(error, ValueError) else "SynthesisFailed")


class Speech:
    """Feeds sentences to the engine and writes their audio as Wyoming events."""

    def __init__(self, prepare: Callable[[], Awaitable[Synth]], write: Callable[[Event], Awaitable[None]],
                 samples_per_chunk: int, streaming: bool, label: str = "", profile: Profile | None = None,
                 holdback: Holdback | None = None) -> None:
        """prepare: awaited when the response's turn comes; gives the way to the engine (it
        waits for the model, resolves the voice) or raises (SpeechError, or a ValueError
        with a `code`: the response becomes an error). profile: where the first audio's
        timing goes (server.profile). holdback: how long the start of a sentence's audio may
        be held."""
        self._prepare, self._write = prepare, write
        self._synth: Synth | None = None
        self._samples_per_chunk, self._streaming, self._label = samples_per_chunk, streaming, label
        self._holdback = holdback or Holdback(0.0)
        self._pending: collections.deque[_Sentence] = collections.deque()
        self._inflight: collections.deque[_Sentence] = collections.deque()
        self._open: _Sentence | None = None  # the sentence add_text appends to
        self._changed = asyncio.Event()
        self._closed = False
        self._failed: SpeechError | None = None
        self._started = False
        self._running = False
        self._finished = False
        self._samples = 0
        self._played_by = 0.0  # time.monotonic() when the client will have played what was written
        self._sentences = 0  # sentences queued, ever
        self.timing = FirstAudio()
        self._profile = profile or Profile()

    @property
    def first_audio_s(self) -> float | None:
        """Arrival to the first audio-chunk written (None: none yet)."""
        written = self.timing.times.get("written")
        return None if written is None else written - self.timing.arrival

    def add(self, sentence: str) -> None:
        """Queue a whole sentence (ignored after a failure: the response is already an error)."""
        self.add_text(sentence, end=True)

    def add_text(self, text: str, end: bool) -> None:
        """Append text to the sentence being written (a new one if none is open); `end`: it is
        complete. A started sentence takes its text at once (word-level feeding)."""
        if self._failed is not None:
            return
        if self._closed:
            raise RuntimeError("add_text() after close()")
        item = self._open
        if item is None:
            item = self._open = _Sentence()
            self._sentences += 1
            self.timing.mark("text")
            self._pending.append(item)
        item.text += text
        item.closed = end
        if end:
            self._open = None
        if item.utterance is not None:
            self._feed(item.utterance, text, item.closed)
        elif self._running:
            self._top_up()
        self._changed.set()

    def _feed(self, utterance: Utterance, text: str, closed: bool) -> None:
        try:
            if text:
                utterance.append(text)
            if closed:
                utterance.finish()
        except Exception as e:  # a tokenizer bug must still end the response
            log.exception("%s: failed to feed the text", self._label)
            self.fail(SpeechError(f"synthesis failed: {e}", "SynthesisFailed"))

    @property
    def done(self) -> bool:
        """run() has finished."""
        return self._finished

    def abort(self) -> None:
        """The client is gone: withdraw everything from the engine, started or not."""
        self._closed = True
        self._cancel_all()
        self._changed.set()

    def close(self) -> None:
        """No more sentences (one still open ends here)."""
        if self._open is not None and self._failed is None:
            self.add_text("", end=True)
        self._closed = True
        self._changed.set()

    def cancel(self, error: SpeechError) -> None:
        """End the response early with `error` (the server is stopping), without waiting
        for more of the client's text."""
        self.fail(error)
        self.close()

    def fail(self, error: SpeechError) -> None:
        """Turn the response into an error (e.g. a text-level problem found by the handler)."""
        if self._failed is None:
            self._failed = error
            self._cancel_all()
        self._changed.set()

    def _top_up(self) -> None:
        """Start queued sentences while fewer than LOOKAHEAD are in the engine. The next
        sentence waits for the one being sent to have its first audio: started together,
        both prompts would be prefilled in the same step, before that first audio. Without
        word-level feeding a sentence starts once complete."""
        synth = self._synth
        assert synth is not None  # run() has it before it starts sentences
        while self._failed is None and self._pending and len(self._inflight) < LOOKAHEAD and (
                not self._inflight or "first_audio" in self._inflight[-1].started_stream.marks):
            item = self._pending[0]
            if synth.open is None and not item.closed:
                return
            self._pending.popleft()
            heard_at_once = not self._inflight
            try:
                if synth.open is None:
                    item.stream = synth.submit(item.text, heard_at_once)
                else:
                    utterance = item.utterance = synth.open(heard_at_once)
                    item.stream = utterance.stream
                    self._feed(utterance, item.text, item.closed)
                self._inflight.append(item)
                self.timing.mark("submitted")
            except (EngineError, ValueError) as e:
                self.fail(SpeechError(str(e), error_code(e)))
            except Exception as e:
                log.exception("%s: synthesis failed", self._label)
                self.fail(SpeechError(f"synthesis failed: {e}", "SynthesisFailed"))

    def _cancel_all(self) -> None:
        self._pending.clear()
        while self._inflight:
            self._inflight.popleft().started_stream.cancel()

    async def run(self) -> None:
        """Write the response; on cancellation (client gone) abort what is in the engine.
        A failure is reported before the audio-stop: Home Assistant's one-shot reader stops
        at the first audio-stop and would take truncated audio for success."""
        try:
            try:
                if self._failed is None:
                    self._synth = await self._prepare()
                    self.timing.mark("ready")
                    self._running = True
                    await self._speak()
            except (asyncio.CancelledError, ConnectionError):
                raise
            except (SpeechError, ValueError) as e:  # refused: not ready, unknown voice...
                self.fail(e if isinstance(e, SpeechError) else SpeechError(str(e), error_code(e)))
            except Exception as e:  # a bug must still end the response properly
                log.exception("%s: synthesis failed", self._label)
                self.fail(SpeechError(f"synthesis failed: {e}", "SynthesisFailed"))
            if self._failed is not None:
                log.warning("%s failed: %s (%s)", self._label, self._failed, self._failed.code)
                await self._write(Error(text=str(self._failed), code=self._failed.code).event())
                if not self._streaming:
                    await self._write_start()  # the framing a one-shot reader waits for
            elif self._samples == 0:
                log.info("%s: %s; sending %.0f ms of silence", self._label,
                         "the model produced no audio" if self._sentences else "the text had nothing speakable",
                         SILENCE_S * 1000)
                await self._write_pcm(np.zeros(SILENCE_SAMPLES, np.float32))
            if self._started:
                await self._write(AudioStop().event())
            if self._streaming:
                while not self._closed:  # the client still sends text we will not speak
                    self._changed.clear()
                    await self._changed.wait()
                await self._write(SynthesizeStopped().event())
        finally:
            self._cancel_all()
            self._finished = True
            if self._synth is not None and self._synth.release is not None:
                self._synth.release()
        first = self.first_audio_s
        log.info("%s: %.2f s of audio, first after %s, done in %.2f s", self._label, self._samples / SAMPLE_RATE,
                 "-" if first is None else f"{first:.3f} s", time.monotonic() - self.timing.arrival)

    async def _speak(self) -> None:
        while self._failed is None:
            self._top_up()
            if self._failed is not None:
                return
            if not self._inflight:
                if self._closed and not self._pending:
                    return
                self._changed.clear()
                await self._changed.wait()
                continue
            item = self._inflight[0]
            try:
                await self._play(item)
            except EngineError as e:
                self.fail(SpeechError(f"synthesis failed: {e}", error_code(e)))
                return
            if self._inflight and self._inflight[0] is item:
                self._inflight.popleft()

    async def _play(self, item: _Sentence) -> None:
        """Write a sentence's audio as it is decoded; its start is held while the holdback
        predicts it would run dry (bounded by its max_s from the first chunk)."""
        stream = item.started_stream
        chunks = aiter(stream)
        held: list[np.ndarray] = []
        holding = self._holdback.max_s > 0
        first = 0.0
        upcoming = asyncio.ensure_future(anext(chunks))
        try:
            while True:
                done, _ = await asyncio.wait({upcoming}, timeout=POLL_S if holding and held else None)
                if upcoming in done:
                    try:
                        chunk = upcoming.result()
                    except StopAsyncIteration:
                        break
                    upcoming = asyncio.ensure_future(anext(chunks))
                    if self.first_audio_s is None and chunk.pcm.size and "received" not in self.timing.times:
                        self.timing.mark("admitted", stream.marks.get("admitted"))
                        self.timing.mark("first_pcm", stream.marks.get("first_audio"))
                        self.timing.mark("received")
                    self._top_up()  # the next sentence, once this one has its first audio
                    if not holding:
                        await self._write_pcm(chunk.pcm)
                        continue
                    if chunk.pcm.size and not held:
                        first = time.monotonic()
                    held.append(chunk.pcm)
                if holding and held and self._release(item, held, first):
                    holding = False
                    await self._write_pcm(np.concatenate(held))
                    held = []
        finally:
            upcoming.cancel()
        if held:
            await self._write_pcm(np.concatenate(held))

    def _release(self, item: _Sentence, held: list[np.ndarray], first: float) -> bool:
        """Whether a held start can play without running dry before its sentence's end, at the
        rate the engine makes its frames (holdback.py), counting the audio the client has not
        played yet; or has been held for the bound."""
        now, stream = time.monotonic(), item.started_stream
        if now - first >= self._holdback.max_s:
            return True
        wait = self._holdback.wait_s(stream.frames, now - stream.marks.get("first_audio", now),
                                     round(sum(p.size for p in held) / SAMPLE_RATE / FRAME_S),
                                     stream.text_tokens, stream.chunk_frames, stream.rate_hint)
        return wait is not None and wait <= max(0.0, self._played_by - now)

    def _first_written(self) -> None:
        self.timing.mark("written")
        log.log(logging.INFO if self._profile.enabled else logging.DEBUG, "%s: %s", self._label, self.timing.line())
        self._profile.add(self.timing)

    async def _write_start(self) -> None:
        if not self._started:
            self._started = True
            await self._write(AudioStart(rate=SAMPLE_RATE, width=WIDTH, channels=CHANNELS).event())

    async def _write_pcm(self, pcm: np.ndarray) -> None:
        """Send PCM at once, in audio-chunk events of at most samples_per_chunk samples."""
        if pcm.size == 0:
            return
        await self._write_start()
        self._played_by = max(self._played_by, time.monotonic()) + pcm.size / SAMPLE_RATE
        samples = to_int16(pcm)
        for begin in range(0, samples.size, self._samples_per_chunk):
            part = samples[begin:begin + self._samples_per_chunk]
            timestamp = self._samples * 1000 // SAMPLE_RATE
            await self._write(AudioChunk(rate=SAMPLE_RATE, width=WIDTH, channels=CHANNELS, audio=part.tobytes(),
                                         timestamp=timestamp).event())
            if self.first_audio_s is None:
                self._first_written()
            self._samples += part.size
