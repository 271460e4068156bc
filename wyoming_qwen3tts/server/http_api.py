"""The HTTP side of the server: the voice lab page and its API (docs/HTTP.md), in the same
process, on the same event loop and engine (ServiceSlot) as Wyoming.

build_app() makes the aiohttp application; other routes (another protocol) can be added to
it before start_http(). Every URL the page uses is relative: under Home Assistant's ingress
the whole app lives below a per-add-on path prefix.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from .. import __version__
from ..config import ServerSettings, http_address
from ..engine.audio import SAMPLE_RATE
from .api_error import ApiError
from .http_auth import TOKEN_COOKIE, Handler, access_guard
from .http_forms import read_json, read_voice_form
from .http_speech import StreamFailed, pcm_stream, wav_stream_header
from .openai_api import OpenAIRoutes, SlotBackend
from .service import ServiceSlot
from .speech import SpeechError
from .text import TextTooLong
from .transcribe import AsrClient, AsrError
from .upload import MAX_CLIP_S, MAX_UPLOAD_BYTES, MIN_CLIP_S
from .voice_lab import VoiceLab
from .voices import VoiceEntry

log = logging.getLogger(__name__)

PAGE_DIR = Path(__file__).resolve().parent / "page"
STATIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")  # a file of page/static/: no path, no dot-file
BODY_SLACK = 256 * 1024  # a form's fields besides its audio file
UPLOADS = 4  # requests with a recording handled at once (each holds up to 20 MB); the others wait
STOP_S = 2.0  # at shutdown, what open HTTP connections get (responses in flight were drained with Wyoming's)
LINGER_S = 2.0  # the unread rest of a refused body is read this long, then the connection closed

SLOT = web.AppKey("slot", ServiceSlot)
LAB = web.AppKey("lab", VoiceLab)
ASR = web.AppKey("asr", AsrClient)

# SpeechError and ValueError codes -> HTTP status
STATUS_OF_CODE = {"VoiceNotFound": 404, "LanguageNotSupported": 422, "TextTooLong": 413, "BadRequest": 422,
                  "NotReady": 503, "ShuttingDown": 503, "Busy": 503, "Timeout": 504}


@dataclass(frozen=True)
class HttpServer:
    """A started HTTP side, for serve() to stop."""

    runner: web.AppRunner
    address: str

    async def stop(self) -> None:
        await self.runner.cleanup()


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every refusal as {"error": ...} with its status; a bug as a 500 that names no internals."""
    try:
        return await handler(request)
    except ApiError as e:
        return error(e.status, str(e))
    except (SpeechError, TextTooLong, ValueError) as e:
        return error(STATUS_OF_CODE.get(getattr(e, "code", ""), 422), str(e))
    except web.HTTPException as e:
        if e.status >= 400:
            return error(e.status, e.reason)
        raise
    except Exception:
        log.exception("HTTP %s %s failed", request.method, request.path)
        return error(500, "internal error; see the server's log")


def build_app(slot: ServiceSlot, settings: ServerSettings, lab: VoiceLab, asr: AsrClient | None = None,
              page_dir: Path = PAGE_DIR) -> web.Application:
    """The application: the page, its static files and the API; access rules of http_auth.py."""
    app = web.Application(client_max_size=MAX_UPLOAD_BYTES + BODY_SLACK,
                          middlewares=[access_guard(settings.http_token, settings.http_ingress), errors_as_json])
    app[SLOT], app[LAB] = slot, lab
    if asr is not None:
        app[ASR] = asr
    routes = Routes(slot, lab, asr, page_dir, settings)
    app.router.add_get("/", routes.page)
    app.router.add_get("/static/{file}", routes.static)
    app.router.add_get("/api/health", routes.health)
    app.router.add_get("/api/info", routes.info)
    app.router.add_get("/api/voices", routes.voices)
    app.router.add_post("/api/voices", routes.save)
    app.router.add_patch("/api/voices/{name}", routes.rename)
    app.router.add_delete("/api/voices/{name}", routes.delete)
    app.router.add_post("/api/preview", routes.preview)
    app.router.add_post("/api/speak", routes.speak)
    app.router.add_post("/api/transcribe", routes.transcribe)
    OpenAIRoutes(SlotBackend(slot)).add_to(app)  # /v1/...: docs/OPENAI.md
    return app


async def start_http(app: web.Application, bind: str) -> HttpServer:
    """Listen at server.http's HOST:PORT (raises OSError for a port that is taken)."""
    host, port = http_address(bind)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=STOP_S,
                           lingering_time=LINGER_S)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("HTTP (voice lab) on http://%s", bind)
    return HttpServer(runner, bind)


async def stream_wav(request: web.Request, text: str, voice: str | None, language: str | None,
                     entry: VoiceEntry | None = None) -> web.StreamResponse:
    """A streamed audio/wav response: checked first (an error is still a JSON status), then a
    header of unknown length and the PCM as it is decoded. A failure after the audio started
    cuts the connection, so the client sees an incomplete transfer, not a short success."""
    slot = request.app[SLOT]
    label = f"http request {slot.next_id()} from {request.remote}"
    chunks = await pcm_stream(slot, text, voice, language or None, entry, label)
    response = web.StreamResponse(headers={"Content-Type": "audio/wav", "Cache-Control": "no-store"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        await response.write(wav_stream_header(SAMPLE_RATE))
        async for pcm in chunks:
            await response.write(pcm)
    except StreamFailed as e:
        log.warning("%s failed after its audio started: %s", label, e)
        if request.transport is not None:
            request.transport.abort()
        return response
    except ConnectionError:
        log.info("%s: the client is gone", label)
        return response
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    await response.write_eof()
    return response


class Routes:
    """The handlers; each one thin: the voice lab does the work."""

    def __init__(self, slot: ServiceSlot, lab: VoiceLab, asr: AsrClient | None, page_dir: Path,
                 settings: ServerSettings) -> None:
        self.slot, self.lab, self.asr, self.page_dir, self.settings = slot, lab, asr, page_dir, settings
        self.uploads = asyncio.Semaphore(UPLOADS)

    async def page(self, request: web.Request) -> web.StreamResponse:
        index = self.page_dir / "index.html"
        if not index.is_file():
            return error(404, "the voice lab page is not installed")
        response = web.FileResponse(index, headers={"Cache-Control": "no-cache"})
        token = self.settings.http_token
        given = request.query.get("token")
        if token is not None and given is not None and hmac.compare_digest(given.encode(), token.encode()):
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict")
        return response

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["file"]
        path = self.page_dir / "static" / name
        if STATIC_NAME.fullmatch(name) is None or not path.is_file():
            return error(404, f"no static file {name!r}")
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return web.FileResponse(path, headers={"Content-Type": kind, "Cache-Control": "no-cache"})

    async def health(self, request: web.Request) -> web.Response:
        ready = self.slot.service is not None and not self.slot.stopping
        return web.json_response({"ready": ready}, status=200 if ready else 503)

    async def info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "version": __version__, **self.lab.abilities(), "asr": self.asr is not None,
            "limits": {"max_upload_mb": MAX_UPLOAD_BYTES // 2**20, "min_clip_s": MIN_CLIP_S, "max_clip_s": MAX_CLIP_S}})

    async def voices(self, request: web.Request) -> web.Response:
        return web.json_response(self.lab.voices())

    async def save(self, request: web.Request) -> web.Response:
        async with self.uploads:
            form = await read_voice_form(request, MAX_UPLOAD_BYTES)
            return web.json_response(await self.lab.save(form), status=201)

    async def rename(self, request: web.Request) -> web.Response:
        return web.json_response(await self.lab.rename(request.match_info["name"], await read_json(request)))

    async def delete(self, request: web.Request) -> web.Response:
        await self.lab.delete(request.match_info["name"])
        return web.Response(status=204)

    async def preview(self, request: web.Request) -> web.StreamResponse:
        async with self.uploads:  # until the voice is made: the recording is dropped then
            form = await read_voice_form(request, MAX_UPLOAD_BYTES)
            if not form.text:
                raise ApiError(422, "give the text to speak")
            entry = await self.lab.preview(form)
            text, language = form.text, form.language
            del form
        return await stream_wav(request, text, None, language, entry=entry)

    async def speak(self, request: web.Request) -> web.StreamResponse:
        data = await read_json(request)
        voice, text, language = data.get("voice"), data.get("text"), data.get("language")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(422, "give the text to speak")
        if not isinstance(voice, (str, type(None))) or not isinstance(language, (str, type(None))):
            raise ApiError(422, "voice and language must be strings")
        return await stream_wav(request, text, voice or None, language)

    async def transcribe(self, request: web.Request) -> web.Response:
        if self.asr is None:
            raise ApiError(503, "no speech-to-text server is configured (server.asr, --asr)")
        async with self.uploads:
            form = await read_voice_form(request, MAX_UPLOAD_BYTES)
            if form.audio is None:
                raise ApiError(422, "send the recording as the form's audio file")
            clip = await self.lab.decode(form.audio)
        try:
            return web.json_response({"text": await self.asr.transcribe(clip, form.language or None)})
        except AsrError as e:
            raise ApiError(502, str(e)) from None
