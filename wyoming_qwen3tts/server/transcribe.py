"""A recording's transcript from a Wyoming speech-to-text server (server.asr, --asr), for the
voice lab's transcript field: Home Assistant's Whisper add-on answers at
tcp://core-whisper:10300 on the add-on network.

The wyoming library's ASR events: transcribe, audio-start, audio-chunk..., audio-stop, then
the server answers with a transcript (other events, such as its streaming transcript-chunk
ones, are skipped). Every read is bounded (server/wire.py) and the whole exchange has a timeout.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from urllib.parse import urlparse

from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_write_event

from ..engine.audio import SAMPLE_RATE, to_int16
from .upload import Clip
from .wire import MAX_LINE, BadEvent, read_event

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0  # connecting, sending and the answer together (Whisper on a CPU: seconds for 30 s)
CHUNK_SAMPLES = 4096
MAX_EVENTS = 1000  # events read before the transcript (streaming servers send partial ones)
MAX_TRANSCRIPT_CHARS = 2000


class AsrError(Exception):
    """The speech-to-text server could not be used; the message says why."""


@dataclass(frozen=True)
class AsrClient:
    """The Wyoming speech-to-text server at tcp://HOST:PORT."""

    uri: str
    timeout: float = TIMEOUT_S

    async def transcribe(self, clip: Clip, language: str | None = None) -> str:
        """The clip's text (24 kHz mono float32 as s16)."""
        try:
            return await asyncio.wait_for(self._exchange(clip, language), self.timeout)
        except asyncio.TimeoutError:
            raise AsrError(f"the speech-to-text server at {self.uri} did not answer within "
                           f"{self.timeout:.0f} s") from None
        except (OSError, ConnectionError) as e:
            raise AsrError(f"cannot reach the speech-to-text server at {self.uri}: {e}") from None
        except BadEvent as e:
            raise AsrError(f"the speech-to-text server at {self.uri} sent a bad event: {e}") from None

    async def _exchange(self, clip: Clip, language: str | None) -> str:
        parsed = urlparse(self.uri)
        reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port, limit=MAX_LINE)
        try:
            samples = to_int16(clip.pcm).tobytes()
            fmt = {"rate": SAMPLE_RATE, "width": 2, "channels": 1}
            events: list[Event] = [Transcribe(language=language).event(), AudioStart(**fmt).event()]
            step = CHUNK_SAMPLES * 2
            events += [AudioChunk(audio=samples[i:i + step], **fmt).event() for i in range(0, len(samples), step)]
            events.append(AudioStop().event())
            for event in events:
                await async_write_event(event, writer)
            for _ in range(MAX_EVENTS):
                answer = await read_event(reader, None)
                if answer is None:
                    raise AsrError(f"the speech-to-text server at {self.uri} closed the connection without "
                                   f"a transcript")
                if Transcript.is_type(answer.type):
                    text = Transcript.from_event(answer).text or ""
                    log.info("transcript of %.1f s: %d characters", clip.seconds, len(text))
                    return text.strip()[:MAX_TRANSCRIPT_CHARS]
                if Error.is_type(answer.type):
                    raise AsrError(f"the speech-to-text server says: {Error.from_event(answer).text}")
            raise AsrError(f"the speech-to-text server at {self.uri} sent {MAX_EVENTS} events and no transcript")
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, ConnectionError):
                pass
