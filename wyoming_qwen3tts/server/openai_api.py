"""OpenAI's speech API on the server's HTTP side (docs/OPENAI.md): `POST /v1/audio/speech`
streams a response's audio, encoded as asked, as the engine decodes it (chunked transfer, or
Server-Sent Events), and the lists clients read: `GET /v1/models`, `/v1/models/{id}`, and the
`/v1/audio/models` and `/v1/audio/voices` that Open WebUI and others ask a custom endpoint for.

The audio comes from a backend (the same responses as Wyoming's, so both protocols' requests
are batched together); this module checks requests, encodes, and writes. The status waits
for the first audio, so a failure before it is an error response; a failure after it ends
the stream early (an `error` event on SSE, a cut chunked body otherwise); a client that
leaves closes the backend's iterator, which withdraws its requests from the engine.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncGenerator, Awaitable
from typing import Any, Protocol, TypeVar

import numpy as np
from aiohttp import web

from .audio_encoding import StreamEncoder
from .http_auth import Handler
from .http_speech import pcm_stream
from .openai_request import OpenAIError, SpeechJob, known_model, model_id, parse_body, speech_job
from .service import ServiceSlot
from .speech import error_code
from .voices import Catalogue

log = logging.getLogger(__name__)
T = TypeVar("T")

FRAME_SAMPLES = 1920  # one 80 ms codec frame: an output token of the SSE usage
MAX_BODY_OVERHEAD = 16_384  # bytes of a body beyond its text: the other fields, JSON escapes
BODY_TIMEOUT_S = 30.0  # a body that takes longer to arrive is refused
WRITE_TIMEOUT_S = 60.0  # a client that takes no data for this long is disconnected (as Wyoming's)
GONE_POLL_S = 0.1  # how often a request waiting for its first audio looks whether its client left
OWNER = "qwen3tts"

# SpeechError codes (speech.py, engine/stream.py) -> HTTP status and OpenAI error type
_STATUS = {"NotReady": 503, "ShuttingDown": 503, "Busy": 503, "Timeout": 504, "VoiceNotFound": 400,
           "LanguageNotSupported": 400, "TextTooLong": 400, "BadRequest": 400}


class SpeechBackend(Protocol):
    """Where responses come from: the voice list, the text limit, the audio."""

    @property
    def max_text_chars(self) -> int:
        """The most characters of an input (server.max_text_chars)."""

    def catalogue(self) -> Catalogue | None:
        """The voice list (None until the model's config has been read)."""

    async def pcm(self, job: SpeechJob, label: str) -> AsyncGenerator[np.ndarray, None]:
        """The response's audio as int16 24 kHz mono chunks, in order, as they are decoded.
        Raises before returning what refuses the request (SpeechError: the model not loaded
        in time, shutting down; a voice's ValueError), and from the iterator what fails it
        later; closing the iterator early withdraws the response from the engine."""

    def text_tokens(self, text: str) -> int:
        """The model's text tokens in `text` (the SSE usage's input tokens)."""


class SlotBackend:
    """The server's responses: http_speech.pcm_stream over the ServiceSlot, the same way to the
    engine as Wyoming's (split and normalised as a one-shot `synthesize`, paced as a stream)."""

    def __init__(self, slot: ServiceSlot) -> None:
        self.slot = slot

    @property
    def max_text_chars(self) -> int:
        return self.slot.settings.max_text_chars

    def catalogue(self) -> Catalogue | None:
        return self.slot.catalogue

    async def pcm(self, job: SpeechJob, label: str) -> AsyncGenerator[np.ndarray, None]:
        # With instructions the voice goes as an entry (a preset speaker or a designed voice:
        # the same before and after the model loads); without, by name, resolved once loaded.
        entry = job.voice.styled(job.instructions) if job.instructions else None
        audio = await pcm_stream(self.slot, job.text, job.voice.name, None, entry, label)

        async def samples() -> AsyncGenerator[np.ndarray, None]:
            try:
                async for data in audio:
                    yield np.frombuffer(data, np.int16)
            finally:
                await audio.aclose()  # type: ignore[attr-defined]

        return samples()

    def text_tokens(self, text: str) -> int:
        service = self.slot.service
        return len(service.engine.model.tokenizer.encode(text)) if service is not None else 0


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Under /v1/, what the routes do not answer themselves (an unknown path or method, a bug)
    in OpenAI's error shape too."""
    if not request.path.startswith("/v1/"):
        return await handler(request)
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = "not_found" if e.status == 404 else None
        return error_response(OpenAIError(e.status, f"{request.method} {request.path}: {e.reason}", None, code))
    except Exception:
        log.exception("HTTP %s %s failed", request.method, request.path)
        return error_response(OpenAIError(500, "internal error; see the server's log", None, None, "server_error"))


def error_response(error: OpenAIError) -> web.Response:
    return web.json_response(error.body(), status=error.status)


def speech_error(error: Exception) -> OpenAIError:
    """An error of the backend before the first audio, as OpenAI's error."""
    code = error_code(error)
    status = _STATUS.get(code, 500)
    return OpenAIError(status, str(error), None, code, "invalid_request_error" if status < 500 else "server_error")


def sse_event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class OpenAIRoutes:
    """The routes of OpenAI's speech API over one backend."""

    def __init__(self, backend: SpeechBackend) -> None:
        self.backend = backend
        self.created = int(time.time())  # the models' `created`: when this server started
        self._ids = 0

    def add_to(self, app: web.Application) -> None:
        app.middlewares.append(openai_errors)
        app.router.add_post("/v1/audio/speech", self.speech)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model}", self.model)
        app.router.add_get("/v1/audio/models", self.audio_models)
        app.router.add_get("/v1/audio/voices", self.audio_voices)

    # --- lists ---
    def _catalogue(self) -> Catalogue:
        catalogue = self.backend.catalogue()
        if catalogue is None:
            raise OpenAIError(503, "The model is still loading (its voice list is not known yet); try again shortly.",
                              None, "NotReady", "server_error")
        return catalogue

    def _model(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": OWNER}

    async def models(self, request: web.Request) -> web.Response:
        """The served model, in OpenAI's list shape (OpenAI's names are taken as it, not listed)."""
        try:
            return web.json_response({"object": "list", "data": [self._model(model_id(self._catalogue()))]})
        except OpenAIError as e:
            return error_response(e)

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        try:
            if not known_model(name, self._catalogue()):
                raise OpenAIError(404, f"The model '{name}' does not exist.", "model", "model_not_found")
        except OpenAIError as e:
            return error_response(e)
        return web.json_response(self._model(name))

    async def audio_models(self, request: web.Request) -> web.Response:
        """Open WebUI's model list of a custom endpoint: {"models": [{"id"}]}."""
        try:
            catalogue = self._catalogue()
        except OpenAIError as e:
            return error_response(e)
        return web.json_response({"models": [{"id": model_id(catalogue), "name": catalogue.label}]})

    async def audio_voices(self, request: web.Request) -> web.Response:
        """Open WebUI's voice list of a custom endpoint: {"voices": [{"id", "name"}]}, plus each
        voice's languages (BCP-47, native first) and whether it takes instructions."""
        try:
            catalogue = self._catalogue()
        except OpenAIError as e:
            return error_response(e)
        voices = [{"id": v.name, "name": v.description, "languages": list(v.languages)} for v in catalogue.voices]
        return web.json_response({"voices": voices, "default": catalogue.default.name,
                                  "instructions": catalogue.takes_instructions})

    # --- speech ---
    async def speech(self, request: web.Request) -> web.StreamResponse:
        self._ids += 1
        label = f"openai request {self._ids} from {request.remote}"
        try:
            job = speech_job(parse_body(await self._body(request)), self._catalogue(), self.backend.max_text_chars)
        except OpenAIError as e:
            log.info("%s: %d %s", label, e.status, e.message)
            return error_response(e)
        log.info("%s: voice %s, %s%s, %d characters", label, job.voice.name, job.format.name,
                 " over SSE" if job.sse else "", len(job.text))
        holder: list[AsyncGenerator[np.ndarray, None]] = []

        async def first_audio() -> np.ndarray:
            holder.append(await self.backend.pcm(job, label))
            first = await _next(holder[0])
            return np.zeros(0, np.int16) if first is None else first

        try:
            try:
                first = await _unless_gone(first_audio(), request)
            except ConnectionError:
                log.info("%s: client gone before the first audio", label)
                return web.Response(status=499)
            except Exception as e:  # refused or failed before any audio: an error status
                log.info("%s: failed before its first audio: %s", label, e)
                return error_response(speech_error(e))
            return await self._stream(request, job, first, holder[0], label)
        finally:
            if holder:  # withdraws the response from the engine if it has not ended
                await holder[0].aclose()

    async def _body(self, request: web.Request) -> bytes:
        """The body, read with a bound on its size and time."""
        limit = 4 * (self.backend.max_text_chars + 2000) + MAX_BODY_OVERHEAD
        if request.content_length is not None and request.content_length > limit:
            raise OpenAIError(413, f"The request body is {request.content_length} bytes; the most is {limit}.",
                              None, "request_too_large")
        try:
            raw = await asyncio.wait_for(_read_at_most(request, limit + 1), BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise OpenAIError(408, "The request body did not arrive in time.", None, "timeout") from None
        if len(raw) > limit:
            raise OpenAIError(413, f"The request body is over {limit} bytes.", None, "request_too_large")
        return raw

    async def _stream(self, request: web.Request, job: SpeechJob, first: np.ndarray,
                      chunks: AsyncGenerator[np.ndarray, None], label: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream" if job.sse else job.format.content_type,
            "Cache-Control": "no-store", "X-Accel-Buffering": "no"})  # proxies: pass each chunk at once
        response.enable_chunked_encoding()
        await response.prepare(request)
        encoder = StreamEncoder(job.format)

        async def send(pcm: np.ndarray | None) -> None:
            """Encode (a lossy codec's ~1 ms per 80 ms off the event loop) and write; None: the end."""
            if pcm is None:
                data = encoder.flush()
            else:
                data = encoder.encode(pcm) if job.format.exact else await asyncio.to_thread(encoder.encode, pcm)
            if data:
                out = sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}) \
                    if job.sse else data
                await asyncio.wait_for(response.write(out), WRITE_TIMEOUT_S)

        try:
            pcm: np.ndarray | None = first
            while pcm is not None:
                await send(pcm)
                pcm = await _unless_gone(_next(chunks), request)
            await send(None)
            if job.sse:
                await asyncio.wait_for(response.write(sse_event(self._done(job, encoder.samples))), WRITE_TIMEOUT_S)
            await response.write_eof()
            log.info("%s: %.2f s of audio sent", label, encoder.duration_s)
        except (ConnectionError, asyncio.TimeoutError) as e:
            log.info("%s: client gone (%s) after %.2f s of audio", label, type(e).__name__, encoder.duration_s)
            _cut(request)
        except Exception as e:  # the engine failed mid-response
            log.warning("%s: failed after %.2f s of audio: %s", label, encoder.duration_s, e)
            try:
                if not job.sse:
                    raise ConnectionError("no way to say it in an audio stream")
                await asyncio.wait_for(response.write(sse_event(speech_error(e).body())), WRITE_TIMEOUT_S)
                await response.write_eof()  # the event said it
            except (ConnectionError, asyncio.TimeoutError):
                _cut(request)  # never a clean end: the client must not take a cut response as whole
        finally:
            encoder.close()
        return response

    def _done(self, job: SpeechJob, samples: int) -> dict[str, Any]:
        """OpenAI's last SSE event. Its usage: the input's text tokens, and the audio's 80 ms
        codec frames as output tokens (docs/OPENAI.md, "Streaming")."""
        inputs, outputs = self.backend.text_tokens(job.text), math.ceil(samples / FRAME_SAMPLES)
        return {"type": "speech.audio.done",
                "usage": {"input_tokens": inputs, "output_tokens": outputs, "total_tokens": inputs + outputs}}


async def _unless_gone(work: Awaitable[T], request: web.Request) -> T:
    """`work`'s result; ConnectionResetError (and `work` cancelled) when the client leaves first.
    A response waits for the model, the queue and each next chunk with nothing to write, so
    only the connection's state tells, within GONE_POLL_S, that nobody waits for it any more
    (aiohttp does not cancel a handler whose client left)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=GONE_POLL_S)
            if done:
                return task.result()
            if request.transport is None or request.transport.is_closing():
                raise ConnectionResetError("the client closed the connection")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _next(chunks: AsyncGenerator[np.ndarray, None]) -> np.ndarray | None:
    """The next chunk, or None at the end."""
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return None


async def _read_at_most(request: web.Request, most: int) -> bytes:
    """The body up to its end or `most` bytes, whichever comes first (it arrives in pieces)."""
    parts: list[bytes] = []
    size = 0
    while size < most and (part := await request.content.read(most - size)):
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def _cut(request: web.Request) -> None:
    """Close the connection without ending the chunked body."""
    if request.transport is not None:
        request.transport.abort()
