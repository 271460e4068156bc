"""A Wyoming text-to-speech client that speaks like Home Assistant does: one-shot
`synthesize`, or the streaming sequence (synthesize-start, text in pieces, the compat
`synthesize`, synthesize-stop), timing the first audio."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncClient
from wyoming.error import Error
from wyoming.event import Event, Eventable, async_read_event, async_write_event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped


class ClientError(Exception):
    """The server answered with an error event, or not at all."""

    def __init__(self, text: str, code: str | None = None) -> None:
        super().__init__(f"{text} ({code})" if code else text)
        self.code = code


@dataclass
class Reply:
    """What came back for one request."""

    audio: bytearray = field(default_factory=bytearray)
    rate: int = 0
    width: int = 2
    channels: int = 1
    events: list[str] = field(default_factory=list)  # event types in order
    chunk_bytes: list[int] = field(default_factory=list)  # size of each audio-chunk, in order
    first_audio_s: float | None = None  # request sent -> first audio-chunk
    total_s: float = 0.0

    @property
    def seconds(self) -> float:
        return len(self.audio) / (self.rate * self.width * self.channels) if self.rate else 0.0


async def describe(port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> Info | None:
    """A server's info, or None if it does not answer (yet): what a readiness probe needs."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return None
    try:
        await async_write_event(Describe().event(), writer)
        event = await asyncio.wait_for(async_read_event(reader), timeout)
        return Info.from_event(event) if event is not None and Info.is_type(event.type) else None
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()


def _voice(name: str | None, language: str | None) -> dict | None:
    """The raw voice object (the library's SynthesizeVoice drops language when a name is set)."""
    voice = {k: v for k, v in (("name", name), ("language", language)) if v}
    return voice or None


def pieces(text: str, size: int) -> list[str]:
    """Text cut every `size` characters, mid-word, as a language model streams it."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


async def synthesize(uri: str, text: str, voice: str | None = None, language: str | None = None,
                     streaming: bool = False, piece_chars: int = 7, timeout: float = 120.0) -> Reply:
    """Send one request and collect its audio; raises ClientError on an error event."""
    reply = Reply()
    async with AsyncClient.from_uri(uri, connect_timeout=10.0, read_timeout=timeout) as client:
        start = time.monotonic()
        raw_voice = _voice(voice, language)
        if streaming:
            async def send_text() -> None:
                await client.write_event(_with_voice(SynthesizeStart().event(), raw_voice))
                for piece in pieces(text, piece_chars):
                    await client.write_event(SynthesizeChunk(text=piece).event())
                await client.write_event(_with_voice(Synthesize(text=text).event(), raw_voice))
                await client.write_event(SynthesizeStop().event())

            writer = asyncio.create_task(send_text())
        else:
            await client.write_event(_with_voice(Synthesize(text=text).event(), raw_voice))
            writer = None
        try:
            await _read_reply(client, reply, start, end=SynthesizeStopped if streaming else AudioStop)
        finally:
            if writer is not None:
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)
        reply.total_s = time.monotonic() - start
    return reply


def _with_voice(event: Event, voice: dict | None) -> Event:
    if voice is not None:
        event.data["voice"] = voice
    return event


async def _read_reply(client: AsyncClient, reply: Reply, start: float, end: type[Eventable]) -> None:
    while True:
        event = await client.read_event()
        if event is None:
            raise ClientError("the server closed the connection before the end of the reply")
        reply.events.append(event.type)
        if Error.is_type(event.type):
            error = Error.from_event(event)
            raise ClientError(error.text, error.code)
        if AudioStart.is_type(event.type) and not reply.rate:
            started = AudioStart.from_event(event)
            reply.rate, reply.width, reply.channels = started.rate, started.width, started.channels
        elif AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            if reply.first_audio_s is None:
                reply.first_audio_s = time.monotonic() - start
            reply.rate = reply.rate or chunk.rate
            reply.audio += chunk.audio
            reply.chunk_bytes.append(len(chunk.audio))
        if end.is_type(event.type):
            return
