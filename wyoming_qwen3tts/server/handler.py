"""The Wyoming handler: one instance per connection, a thin layer over the engine.

It never synthesizes on the event loop: text goes to the engine's scheduler thread, audio
comes back through the request streams, and each response is written by its own task, so
the connection keeps reading (describe, ping, more text, a disconnect) while audio flows.
Every request that opens a response (a one-shot `synthesize`, a `synthesize-start`) gets one,
and every response ends (speech.py), also when it is refused.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe
from wyoming.ping import Ping, Pong
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from ..normalize import SentenceNormalizer
from .holdback import Holdback
from .service import Service, ServiceSlot
from .speech import Speech, SpeechError, error_code
from .spoken import request_normalizer
from .text import SentenceSplitter, TextTooLong, normalize, split_sentences
from .text_stream import SentenceStream
from .wire import BadEvent, read_event

__all__ = ["Service", "ServiceSlot", "TtsHandler"]

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 600.0  # a connection that sends nothing (and awaits nothing) for this long is closed
WRITE_TIMEOUT_S = 60.0  # a client that takes no data for this long is disconnected
MAX_RESPONSES = 4  # responses queued on one connection; the next request is read when one ends


class TtsHandler(AsyncEventHandler):
    """Describe, one-shot `synthesize`, and streaming synthesize-start/chunk/stop."""

    def __init__(self, slot: ServiceSlot, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.slot = slot
        peer = writer.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer or "client")
        self._tasks: list[asyncio.Task] = []
        self._speeches: list[Speech] = []
        # an open synthesize-start: its response, its splitter, and the normaliser of its sentences
        self._stream: tuple[Speech, SentenceSplitter | SentenceStream, SentenceNormalizer] | None = None
        self._gone = False

    def _live(self) -> list[asyncio.Task]:
        self._tasks = [t for t in self._tasks if not t.done()]
        return self._tasks

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
                    if self._live():
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
                if self.slot.info is None:  # never an empty program: the client retries later
                    log.info("%s: describe before the voice list is known; closing the connection so that "
                             "the client retries", self._peer)
                    return False
                await self._send(self.slot.info.event())
            elif Ping.is_type(event.type):
                await self._send(Pong(text=Ping.from_event(event).text).event())
            elif SynthesizeStart.is_type(event.type):
                if self._stream is not None:  # a new start without a stop: finish the old one first
                    self._stop_stream()
                await self._room()
                self._start_stream(event.data)
            elif SynthesizeChunk.is_type(event.type):
                self._stream_text(SynthesizeChunk.from_event(event).text)
            elif SynthesizeStop.is_type(event.type):
                self._stop_stream()
            elif Synthesize.is_type(event.type):
                if self._stream is None:  # inside a stream it is the compat copy of the text: ignore
                    await self._room()
                    self._one_shot(event.data)
            else:
                log.debug("%s: ignoring %s", self._peer, event.type)
        except Exception:  # a bug must not take the connection down unanswered
            log.exception("%s: failed to handle %s", self._peer, event.type)
            await self._send(Error(text=f"internal error handling {event.type}", code="InternalError").event())
        return True

    # --- requests ---
    async def _room(self) -> None:
        """Wait until fewer than MAX_RESPONSES responses are queued on this connection: a
        client that pipelines requests is read no faster than it is answered."""
        while len(self._live()) >= MAX_RESPONSES:
            await asyncio.wait({self._tasks[0]})

    def _voice(self, data: dict[str, Any]) -> tuple[str | None, str | None]:
        """(voice name, language) from the raw event data: the library's SynthesizeVoice drops
        `language` whenever a name is set."""
        voice = data.get("voice")
        if not isinstance(voice, dict):
            return None, None
        name, language = voice.get("name"), voice.get("language")
        return (name if isinstance(name, str) else None), (language if isinstance(language, str) else None)

    def _open(self, data: dict[str, Any], streaming: bool) -> tuple[Speech, SentenceNormalizer]:
        """A response for the voice in `data`, queued behind the connection's others. The voice
        is checked at once against the voice list (an unknown one fails before the model has
        loaded), and resolved again with the loaded model when the response's turn comes.
        Also the normaliser of its sentences (server/spoken.py)."""
        label = f"request {self.slot.next_id()} from {self._peer}"
        name, language = self._voice(data)
        log.debug("%s: %s, voice %s", label, "streaming" if streaming else "one-shot", name or "(default)")
        settings = self.slot.settings
        words = streaming and settings.text_feeding == "word"
        # Only a streamed response is played as it arrives (Home Assistant's streaming reader);
        # its one-shot reader plays nothing before audio-stop, so holding a one-shot start would
        # delay its first audio without preventing any gap a listener hears.
        holdback = Holdback(settings.holdback_s if streaming else 0.0)
        speech = Speech(lambda: self.slot.synth(label, name, language, words, streaming), self._send,
                        settings.samples_per_chunk, streaming, label, self.slot.profile, holdback)
        if self.slot.stopping:
            speech.fail(SpeechError("the server is shutting down", "ShuttingDown"))
        elif self.slot.directory is not None:
            try:
                self.slot.directory.resolve(name, language)
            except ValueError as e:
                speech.fail(SpeechError(str(e), error_code(e)))
        self._speeches = [s for s in self._speeches if not s.done] + [speech]
        self._queue(speech)
        return speech, request_normalizer(self.slot, name, language, label)

    def _queue(self, speech: Speech) -> None:
        """Run a response once the ones before it on this connection are written."""
        live = self._live()
        previous = live[-1] if live else None
        active = self.slot.active
        active.add(speech)

        async def after() -> None:
            try:
                if previous is not None:
                    await asyncio.gather(previous, return_exceptions=True)
                await speech.run()
            finally:
                active.discard(speech)

        self._tasks.append(asyncio.create_task(after()))

    def _add(self, speech: Speech, spoken: SentenceNormalizer, pieces: Callable[[], list]) -> None:
        """Queue what `pieces()` gives: raw sentences (cleaned and read out here, empty ones
        dropped) or the fragments of a SentenceStream (read out by it); a text problem or a bug
        fails the response, which still ends."""
        settings = self.slot.settings
        try:
            for piece in pieces():
                if not isinstance(piece, str):
                    speech.add_text(piece.text, piece.end)
                elif sentence := normalize(piece, settings.max_text_chars):
                    speech.add(spoken.sentence(sentence))
        except (TextTooLong, SpeechError) as e:
            speech.fail(e if isinstance(e, SpeechError) else SpeechError(str(e), error_code(e)))
        except Exception as e:
            log.exception("%s: failed to read the text", self._peer)
            speech.fail(SpeechError(f"internal error reading the text: {e}", "InternalError"))

    def _one_shot(self, data: dict[str, Any]) -> None:
        speech, spoken = self._open(data, streaming=False)
        text, settings = data.get("text"), self.slot.settings

        def pieces() -> list[str]:
            if not isinstance(text, str):
                raise SpeechError("synthesize needs a text string", "BadRequest")
            return split_sentences(text, settings.max_sentence_chars, settings.max_text_chars)

        self._add(speech, spoken, pieces)
        speech.close()

    def _start_stream(self, data: dict[str, Any]) -> None:
        settings = self.slot.settings
        speech, spoken = self._open(data, streaming=True)
        splitter: SentenceSplitter | SentenceStream
        if settings.text_feeding == "word":
            splitter = SentenceStream(settings.max_sentence_chars, settings.max_text_chars, spoken=spoken)
        else:
            splitter = SentenceSplitter(settings.max_sentence_chars, settings.max_text_chars)
        self._stream = (speech, splitter, spoken)

    def _stream_text(self, text: str) -> None:
        if self._stream is None:
            log.debug("%s: synthesize-chunk outside a stream, ignored", self._peer)
            return
        speech, splitter, spoken = self._stream
        self._add(speech, spoken, lambda: splitter.push(text))

    def _stop_stream(self) -> None:
        if self._stream is None:  # nothing open: still answer with the end marker, in turn
            previous = list(self._live())

            async def stopped() -> None:
                await asyncio.gather(*previous, return_exceptions=True)
                await self._send(SynthesizeStopped().event())

            self._tasks.append(asyncio.create_task(stopped()))
            return
        speech, splitter, spoken = self._stream
        self._stream = None
        self._add(speech, spoken, splitter.flush)
        speech.close()
