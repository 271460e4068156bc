"""The Wyoming handler: one instance per connection, a thin layer over the engine.

It never synthesizes on the event loop: text goes to the engine's scheduler thread, audio
comes back through the request streams, and each response is written by its own task, so
the connection keeps reading (describe, ping, more text, a disconnect) while audio flows.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.ping import Ping, Pong
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from ..engine.sampling import SamplingParams
from ..engine.scheduler import Scheduler
from ..engine.stream import AudioStream
from .speech import Speech, SpeechError, error_code
from .text import SentenceSplitter, TextTooLong, normalize, split_sentences
from .voices import Catalogue
from .wire import BadEvent, read_event

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 600.0  # a connection that sends nothing (and awaits nothing) for this long is closed
WRITE_TIMEOUT_S = 60.0  # a client that takes no data for this long is disconnected
MAX_RESPONSES = 4  # responses queued on one connection; more get a Busy error


@dataclass(frozen=True)
class Service:
    """What every connection shares once the model is loaded: the engine, the voices and
    the server settings."""

    engine: Scheduler
    catalogue: Catalogue
    info: Info
    params: SamplingParams  # sampling of every request (greedy or the model's defaults, seed)
    samples_per_chunk: int
    max_text_chars: int
    max_sentence_chars: int


@dataclass
class ServiceSlot:
    """The service, once loading (download, conversion, compilation, warm-up) is done; until
    then `describe` gets the loading info and synthesis a NotReady error."""

    info: Info
    service: Service | None = None


class TtsHandler(AsyncEventHandler):
    """Describe, one-shot `synthesize`, and streaming synthesize-start/chunk/stop."""

    def __init__(self, slot: ServiceSlot, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.slot = slot
        self._peer = writer.get_extra_info("peername") or "client"
        self._tasks: list[asyncio.Task] = []
        self._speeches: list[Speech] = []
        self._stream: tuple[Speech, SentenceSplitter] | None = None  # an open synthesize-start
        self._count = 0
        self._gone = False

    @property
    def service(self) -> Service:
        return self.slot.service

    def _busy(self) -> bool:
        self._tasks = [t for t in self._tasks if not t.done()]
        return bool(self._tasks)

    async def run(self) -> None:
        """The library's loop, with bounded reads (wire.read_event). At the end of the input
        the responses still being written are finished (a client may half-close after its
        request); a dead peer shows up as a failed write, which aborts them."""
        try:
            while not self._gone:
                try:
                    event = await read_event(self.reader, IDLE_TIMEOUT_S)
                except BadEvent as e:
                    log.warning("%s: %s; closing the connection", self._peer, e)
                    await self._send(Error(text=str(e), code="BadEvent").event())
                    break
                except asyncio.TimeoutError:
                    if self._busy():
                        continue  # quiet while its audio is written: not idle
                    log.info("%s: idle for %.0f s; closing the connection", self._peer, IDLE_TIMEOUT_S)
                    break
                if event is None:  # end of input: what was asked is still answered
                    if self._stream is not None:
                        self._stop_stream()
                    await asyncio.gather(*self._tasks, return_exceptions=True)
                    break
                if not await self.handle_event(event):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await self.disconnect()
            self.writer.close()

    async def disconnect(self) -> None:
        """Client gone: withdraw every response from the engine (also those whose turn has
        not come) and stop their tasks."""
        for speech in self._speeches:
            speech.abort()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _send(self, event: Event) -> None:
        """Write an event; a dead or stalled client is disconnected (its responses aborted)."""
        if self._gone:
            return
        try:
            await asyncio.wait_for(self.write_event(event), WRITE_TIMEOUT_S)
        except (ConnectionError, RuntimeError, asyncio.TimeoutError) as e:
            log.info("%s: client gone (%s)", self._peer, type(e).__name__)
            self._gone = True
            for speech in self._speeches:
                speech.abort()
            self.writer.transport.abort()

    async def handle_event(self, event: Event) -> bool:
        try:
            if Describe.is_type(event.type):
                await self._send(self.slot.info.event())
            elif Ping.is_type(event.type):
                await self._send(Pong(text=Ping.from_event(event).text).event())
            elif (refusal := self._refusal(event)) is not None:
                await self._send(refusal.event())  # and read no more until it is sent
            elif SynthesizeStart.is_type(event.type):
                self._start_stream(event.data)
            elif SynthesizeChunk.is_type(event.type):
                self._stream_text(SynthesizeChunk.from_event(event).text)
            elif SynthesizeStop.is_type(event.type):
                self._stop_stream()
            elif Synthesize.is_type(event.type):
                if self._stream is None:  # inside a stream it is the compat copy of the text: ignore
                    self._one_shot(event.data)
            else:
                log.debug("%s: ignoring %s", self._peer, event.type)
        except Exception:  # a bug must not take the connection down unanswered
            log.exception("%s: failed to handle %s", self._peer, event.type)
            await self._send(Error(text=f"internal error handling {event.type}", code="InternalError").event())
        return True

    # --- requests ---
    def _refusal(self, event: Event) -> Error | None:
        """Why an event that would open a response can't (None: it can, or opens none)."""
        opens = SynthesizeStart.is_type(event.type) or (Synthesize.is_type(event.type) and self._stream is None)
        if not opens:
            return None
        if self.slot.service is None:
            return Error(text="the model is still loading (the first start downloads and converts it); "
                              "try again shortly", code="NotReady")
        if self._busy() and len(self._tasks) >= MAX_RESPONSES:
            return Error(text=f"busy: {len(self._tasks)} responses are already queued on this connection",
                         code="Busy")
        return None

    def _voice(self, data: dict[str, Any]) -> tuple[str | None, str | None]:
        """(voice name, language) from the raw event data: the library's SynthesizeVoice drops
        `language` whenever a name is set."""
        voice = data.get("voice")
        if not isinstance(voice, dict):
            return None, None
        name, language = voice.get("name"), voice.get("language")
        return (name if isinstance(name, str) else None), (language if isinstance(language, str) else None)

    def _speech(self, data: dict[str, Any], streaming: bool) -> Speech:
        """A response for the voice in `data`; voice errors make it an error response, and
        so does a connection that already has MAX_RESPONSES waiting."""
        self._count += 1
        label = f"{self._peer} #{self._count}"
        submit, problem = self._submitter(*self._voice(data))
        speech = Speech(submit, self._send, self.service.samples_per_chunk, streaming, label)
        if problem is not None:
            speech.fail(problem)
        self._speeches = [s for s in self._speeches if not s.done] + [speech]
        self._queue(speech.run())
        return speech

    def _queue(self, response: Coroutine[Any, Any, None]) -> None:
        """Run a response once the ones before it on this connection are written."""
        self._tasks = [t for t in self._tasks if not t.done()]
        previous = self._tasks[-1] if self._tasks else None

        async def after() -> None:
            try:
                if previous is not None:
                    await asyncio.gather(previous, return_exceptions=True)
            except asyncio.CancelledError:
                response.close()  # never started
                raise
            await response

        self._tasks.append(asyncio.create_task(after()))

    def _submitter(self, name: str | None,
                   language: str | None) -> tuple[Callable[[str], AudioStream] | None, SpeechError | None]:
        """(sentence -> engine stream, None), or (None, the error) for an unusable voice."""
        try:
            entry, lang = self.service.catalogue.resolve(name, language)
        except ValueError as e:
            return None, SpeechError(str(e), error_code(e))

        def submit(sentence: str) -> AudioStream:
            return self.service.engine.submit(entry.request(sentence, lang), self.service.params)

        log.info("%s: voice %s, language %s", self._peer, entry.name, lang)
        return submit, None

    def _sentences(self, pieces: list[str]) -> list[str]:
        """Normalized sentences, empty ones dropped."""
        out = [normalize(p, self.service.max_text_chars) for p in pieces]
        return [s for s in out if s]

    def _one_shot(self, data: dict[str, Any]) -> None:
        speech = self._speech(data, streaming=False)
        text = data.get("text")
        try:
            if not isinstance(text, str):
                raise SpeechError("synthesize needs a text string", "BadRequest")
            for sentence in self._sentences(split_sentences(text, self.service.max_sentence_chars,
                                                            self.service.max_text_chars)):
                speech.add(sentence)
        except (TextTooLong, SpeechError) as e:
            speech.fail(e if isinstance(e, SpeechError) else SpeechError(str(e), error_code(e)))
        speech.close()

    def _start_stream(self, data: dict[str, Any]) -> None:
        if self._stream is not None:  # a new start without a stop: finish the old one first
            self._stop_stream()
        splitter = SentenceSplitter(self.service.max_sentence_chars, self.service.max_text_chars)
        self._stream = (self._speech(data, streaming=True), splitter)

    def _stream_text(self, text: str) -> None:
        if self._stream is None:
            log.debug("%s: synthesize-chunk outside a stream, ignored", self._peer)
            return
        speech, splitter = self._stream
        try:
            for sentence in self._sentences(splitter.push(text)):
                speech.add(sentence)
        except TextTooLong as e:
            speech.fail(SpeechError(str(e), error_code(e)))

    def _stop_stream(self) -> None:
        if self._stream is None:  # nothing open: still answer with the end marker
            self._queue(self._send(SynthesizeStopped().event()))
            return
        speech, splitter = self._stream
        self._stream = None
        try:
            for sentence in self._sentences(splitter.flush()):
                speech.add(sentence)
        except TextTooLong as e:
            speech.fail(SpeechError(str(e), error_code(e)))
        speech.close()
