"""Transcripts from a Wyoming speech-to-text server (server/transcribe.py), against a fake one
that answers as Home Assistant's Whisper add-on does, through the voice lab's route too."""
from __future__ import annotations

import asyncio

import aiohttp
import pytest
from http_app import with_app
from lab_server import encode, free_port, recording
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.server import AsyncEventHandler, AsyncTcpServer

from wyoming_qwen3tts.server.transcribe import AsrClient, AsrError
from wyoming_qwen3tts.server.upload import decode_upload


class FakeAsr(AsyncEventHandler):
    """Collects the audio, then answers with how much it got (or misbehaves, by `mode`)."""

    mode = "ok"
    seen: list[dict] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.audio = bytearray()
        self.request: dict = {}

    async def handle_event(self, event: Event) -> bool:
        if Transcribe.is_type(event.type):
            self.request["language"] = Transcribe.from_event(event).language
        elif AudioStart.is_type(event.type):
            start = AudioStart.from_event(event)
            self.request["format"] = (start.rate, start.width, start.channels)
        elif AudioChunk.is_type(event.type):
            self.audio += AudioChunk.from_event(event).audio
        elif AudioStop.is_type(event.type):
            self.request["bytes"] = len(self.audio)
            FakeAsr.seen.append(self.request)
            if self.mode == "silent":
                await asyncio.sleep(30)
            elif self.mode == "error":
                await self.write_event(Error(text="model not loaded").event())
            elif self.mode == "close":
                return False
            else:
                await self.write_event(Event("transcript-start"))
                await self.write_event(Transcript(text=f"  heard {len(self.audio)} bytes  ").event())
        return True


async def with_asr(mode: str, fn):
    FakeAsr.mode, FakeAsr.seen = mode, []
    port = free_port()
    server = AsyncTcpServer("127.0.0.1", port)
    await server.start(FakeAsr)
    try:
        return await fn(AsrClient(f"tcp://127.0.0.1:{port}", timeout=2.0))
    finally:
        await server.stop()


def test_a_transcript_from_the_asr_server():
    clip = decode_upload(encode("flac", "flac", recording(4.0)))

    async def ask(client: AsrClient) -> str:
        return await client.transcribe(clip, "en")

    text = asyncio.run(with_asr("ok", ask))
    (request,) = FakeAsr.seen
    assert request == {"language": "en", "format": (24000, 2, 1), "bytes": clip.pcm.shape[0] * 2}
    assert text == f"heard {clip.pcm.shape[0] * 2} bytes"


@pytest.mark.parametrize("mode,message", [("silent", "did not answer within 2 s"), ("error", "model not loaded"),
                                          ("close", "closed the connection")])
def test_asr_failures_are_clear(mode, message):
    clip = decode_upload(encode("wav", "pcm_s16le", recording(3.5)))
    with pytest.raises(AsrError, match=message):
        asyncio.run(with_asr(mode, lambda client: client.transcribe(clip)))


def test_an_unreachable_asr_server():
    clip = decode_upload(encode("wav", "pcm_s16le", recording(3.5)))
    with pytest.raises(AsrError, match="cannot reach"):
        asyncio.run(AsrClient(f"tcp://127.0.0.1:{free_port()}").transcribe(clip))


def test_the_transcribe_route(tmp_path):
    upload = encode("webm", "libopus", recording(4.0))

    async def route(client: AsrClient) -> None:
        async def post(url: str) -> None:
            async with aiohttp.ClientSession() as session:
                data = aiohttp.FormData()
                data.add_field("audio", upload, filename="rec.webm")
                async with session.post(f"{url}/api/transcribe", data=data) as r:
                    body = await r.json()
                    assert r.status == 200 and body["text"].startswith("heard "), body
                async with session.post(f"{url}/api/transcribe", data=aiohttp.FormData({"x": "1"})) as r:
                    assert r.status == 422 and "audio" in (await r.json())["error"]
                async with session.get(f"{url}/api/info") as r:
                    assert (await r.json())["asr"] is True
        await with_app(tmp_path, post, asr=client)

    asyncio.run(with_asr("ok", route))

    async def without(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            data = aiohttp.FormData()
            data.add_field("audio", upload, filename="rec.webm")
            async with session.post(f"{url}/api/transcribe", data=data) as r:
                assert r.status == 503 and "no speech-to-text server" in (await r.json())["error"]

    asyncio.run(with_app(tmp_path, without))
