"""A response's audio for the HTTP side: the same `Speech` the Wyoming handler writes, with a
write callback that hands its PCM to an async iterator instead of a Wyoming connection.

Every response reaches the engine through `ServiceSlot.synth` (so HTTP requests join the same
continuous batching as Wyoming ones), is counted in `slot.active` (a shutdown drains and
cancels it like any other), and is split, normalised and read out (server/spoken.py) as a
Wyoming one-shot `synthesize` is. The caller that stops iterating (a client gone mid-stream)
aborts the response: its sentences are withdrawn from the engine and their KV blocks freed.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from wyoming.audio import AudioChunk
from wyoming.error import Error
from wyoming.event import Event

from .holdback import Holdback
from .service import ServiceSlot, Unsaved
from .speech import Speech, SpeechError, Synth
from .spoken import request_normalizer
from .text import normalize, split_sentences

log = logging.getLogger(__name__)

QUEUE_EVENTS = 64  # audio events buffered between the engine side and a slow HTTP client


class StreamFailed(Exception):
    """The response failed once iterated: usually after its audio had started (the HTTP status
    is already sent), else before its first audio (the engine's queue full). `code` is the
    Wyoming error's (Busy, Timeout, SynthesisFailed, ...), which a route can map to a status."""

    def __init__(self, text: str, code: str | None = None) -> None:
        super().__init__(text)
        self.code = code


async def pcm_stream(slot: ServiceSlot, text: str, voice: str | None = None, language: str | None = None,
                     unsaved: Unsaved | None = None, label: str = "http") -> AsyncIterator[bytes]:
    """Check a request and return its audio as an async iterator of s16le 24 kHz mono bytes.

    Raises before returning (so a route can still answer with an error status): TextTooLong
    (over server.max_text_chars), SpeechError (NotReady, ShuttingDown), VoiceNotFound or
    LanguageNotSupported (ValueErrors with a `code`). unsaved: an unsaved voice (and its model) to speak with
    instead of the catalogue's `voice` (a preview). Nothing reaches the engine before the
    iterator is iterated; a failure after that raises StreamFailed from it; closing it early
    (aclose, or an exception in the consumer's loop) aborts the response.
    """
    settings = slot.settings
    if slot.stopping:
        raise SpeechError("the server is shutting down", "ShuttingDown")
    spoken = request_normalizer(slot, voice, language, label)
    sentences = [spoken.sentence(s) for piece in split_sentences(text, settings.max_sentence_chars,
                                                                 settings.max_text_chars)
                 if (s := normalize(piece, settings.max_text_chars))]
    synth = await slot.synth(label, voice, language, words=False, paced=True, unsaved=unsaved)
    return _audio(slot, synth, sentences, label)


async def _audio(slot: ServiceSlot, synth: Synth, sentences: list[str], label: str) -> AsyncIterator[bytes]:
    queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_EVENTS)

    async def write(event: Event) -> None:
        await queue.put(event)

    async def prepared() -> Synth:
        return synth

    settings = slot.settings
    speech = Speech(prepared, write, settings.samples_per_chunk, True, label, slot.profile,
                    Holdback(settings.holdback_s))
    for sentence in sentences:
        speech.add(sentence)
    speech.close()
    slot.active.add(speech)

    async def run() -> None:
        try:
            await speech.run()
        finally:
            slot.active.discard(speech)

    task = asyncio.create_task(run())
    getter: asyncio.Future[Event] | None = None
    try:
        while True:  # the events written, until the response has ended and all are taken
            if queue.empty():
                if task.done():
                    break
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():  # the response ended: take what is left
                    getter.cancel()
                    continue
                event = getter.result()
            else:
                event = queue.get_nowait()
            if AudioChunk.is_type(event.type):
                yield AudioChunk.from_event(event).audio
            elif Error.is_type(event.type):
                error = Error.from_event(event)
                raise StreamFailed(error.text, error.code)
    finally:
        if getter is not None:
            getter.cancel()
        if not task.done():
            log.info("%s: the client is gone; aborting the response", label)
            speech.abort()
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def wav_stream_header(rate: int, channels: int = 1, width: int = 2) -> bytes:
    """A WAV header for a stream of unknown length: the RIFF and data sizes are the largest
    values (0xFFFFFFFF), which browsers and ffmpeg read as "until the end of the stream"."""
    block = channels * width
    return b"".join((b"RIFF", (0xFFFFFFFF).to_bytes(4, "little"), b"WAVE", b"fmt ", (16).to_bytes(4, "little"),
                     (1).to_bytes(2, "little"), channels.to_bytes(2, "little"), rate.to_bytes(4, "little"),
                     (rate * block).to_bytes(4, "little"), block.to_bytes(2, "little"),
                     (width * 8).to_bytes(2, "little"), b"data", (0xFFFFFFFF).to_bytes(4, "little")))
