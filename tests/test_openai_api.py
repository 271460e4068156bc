"""OpenAI's speech API (server/openai_api.py, openai_request.py) over a fake audio source: the
request checks and their error shapes, every format and SSE through the official `openai`
client, failures before and after the first audio, and clients that leave."""
from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field

import av
import httpx
import numpy as np
import openai
import pytest
from aiohttp import web

from wyoming_qwen3tts.model.spec import Speaker, VoiceSpec
from wyoming_qwen3tts.server import openai_api
from wyoming_qwen3tts.server.audio_encoding import FORMATS
from wyoming_qwen3tts.server.http_speech import StreamFailed
from wyoming_qwen3tts.server.openai_api import OpenAIRoutes
from wyoming_qwen3tts.server.openai_request import SpeechJob
from wyoming_qwen3tts.server.speech import SpeechError
from wyoming_qwen3tts.server.voices import Catalogue

RATE, CHUNK = 24_000, 1920
LANGUAGES = {"english": 2050, "chinese": 2055}
SPEAKERS = (Speaker("ryan", 3000, None), Speaker("vivian", 3001, None))


def catalogue(size: str = "0b6", kind: str = "custom_voice") -> Catalogue:
    return Catalogue(VoiceSpec(kind, size, LANGUAGES, SPEAKERS if kind == "custom_voice" else ()))


def tone(samples: int) -> np.ndarray:
    t = np.arange(samples) / RATE
    return (0.3 * np.sin(2 * np.pi * 180 * t) * 32767).astype(np.int16)


@dataclass
class FakeBackend:
    """Chunks of a tone, `chunks` of them; records the jobs and whether each iterator was
    closed before its end (the route withdrawing a response)."""

    voices: Catalogue | None = field(default_factory=catalogue)
    max_text_chars: int = 5000
    chunks: int = 10
    delay_s: float = 0.0  # before each chunk
    refuse: Exception | None = None  # raised before the iterator is returned
    fail_after: int | None = None  # chunks, then a failure
    failure: Exception = field(default_factory=lambda: RuntimeError("synthesis failed: the engine broke"))
    jobs: list[SpeechJob] = field(default_factory=list)
    closed_early: list[bool] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)

    def catalogue(self) -> Catalogue | None:
        return self.voices

    def text_tokens(self, text: str) -> int:
        return len(text.split())

    @property
    def pcm_all(self) -> np.ndarray:
        return tone(self.chunks * CHUNK)

    async def pcm(self, job: SpeechJob, label: str) -> AsyncGenerator[np.ndarray, None]:
        if self.refuse is not None:
            raise self.refuse
        self.jobs.append(job)
        index = len(self.closed_early)
        self.closed_early.append(False)
        pcm = self.pcm_all

        async def chunks() -> AsyncGenerator[np.ndarray, None]:
            finished = False
            try:
                for i in range(self.chunks):
                    if self.fail_after is not None and i == self.fail_after:
                        raise self.failure
                    await asyncio.sleep(self.delay_s)
                    self.started.set()
                    yield pcm[i * CHUNK:(i + 1) * CHUNK]
                finished = True
            finally:
                self.closed_early[index] = not finished

        return chunks()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class App:
    """The routes in an aiohttp app on its own event loop thread."""

    def __init__(self, backend: FakeBackend) -> None:
        self.port, self.loop = free_port(), asyncio.new_event_loop()
        app = web.Application()
        OpenAIRoutes(backend).add_to(app)
        self.runner = web.AppRunner(app)
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            started.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self.runner.cleanup())
            self.loop.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def app(backend) -> Iterator[App]:
    server = App(backend)
    try:
        yield server
    finally:
        server.close()


def client(app: App) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{app.url}/v1", api_key="unused", max_retries=0, timeout=30)


def post(app: App, body: object, raw: bytes | None = None) -> httpx.Response:
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(f"{app.url}/v1/audio/speech", content=content, headers={"Content-Type": "application/json"},
                      timeout=30)


def decoded_samples(data: bytes) -> tuple[np.ndarray, int]:
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
        return np.concatenate(frames), container.streams.audio[0].codec_context.sample_rate


GOOD = {"model": "tts-1", "input": "Hello there.", "voice": "ryan"}


@pytest.mark.parametrize("body, status, param, code", [
    ({**GOOD, "model": None}, 400, "model", "missing_required_parameter"),
    ({k: v for k, v in GOOD.items() if k != "input"}, 400, "input", "missing_required_parameter"),
    ({k: v for k, v in GOOD.items() if k != "voice"}, 400, "voice", "missing_required_parameter"),
    ({**GOOD, "input": 42}, 400, "input", "invalid_type"),
    ({**GOOD, "model": "whisper-1"}, 404, "model", "model_not_found"),
    ({**GOOD, "input": ""}, 400, "input", "empty_string"),
    ({**GOOD, "input": " \n\t "}, 400, "input", "empty_string"),
    ({**GOOD, "input": "a" * 5001}, 400, "input", "string_above_max_length"),
    ({**GOOD, "voice": "alloy"}, 400, "voice", "invalid_value"),
    ({**GOOD, "voice": {"id": 7}}, 400, "voice", "invalid_type"),
    ({**GOOD, "response_format": "ogg"}, 400, "response_format", "invalid_value"),
    ({**GOOD, "stream_format": "websocket"}, 400, "stream_format", "invalid_value"),
    ({**GOOD, "speed": 1.25}, 400, "speed", "unsupported_value"),
    ({**GOOD, "speed": "fast"}, 400, "speed", "invalid_type"),
    ({**GOOD, "instructions": "Speak softly."}, 400, "instructions", "unsupported_parameter"),
])
def test_bad_requests_get_openai_errors(app, backend, body, status, param, code):
    response = post(app, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")
    assert backend.jobs == []  # nothing reached the engine


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe", b""])
def test_a_body_that_is_not_a_json_object(app, raw):
    response = post(app, None, raw)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"


def test_an_oversized_body_is_refused_unread(app, backend):
    response = post(app, {**GOOD, "input": "a" * 200_000})
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    assert backend.jobs == []


def test_the_error_names_the_voices(app):
    message = post(app, {**GOOD, "voice": "alloy"}).json()["error"]["message"]
    assert "'alloy'" in message and "'ryan'" in message and "'vivian'" in message


def test_accepted_forms(app, backend):
    """A voice object, any case of a voice or the served model's id, OpenAI's model names,
    speed 1.0, empty instructions, unknown extra fields."""
    for body in ({**GOOD, "voice": {"id": "vivian"}}, {**GOOD, "voice": "RYAN"},
                 {**GOOD, "model": "Qwen3-TTS-0.6B-CustomVoice"}, {**GOOD, "model": "gpt-4o-mini-tts"},
                 {**GOOD, "speed": 1}, {**GOOD, "instructions": ""}, {**GOOD, "stream": True, "user": "x"}):
        response = post(app, body)
        assert response.status_code == 200, (body, response.text)
    assert [j.voice.name for j in backend.jobs[:2]] == ["vivian", "ryan"]
    assert all(j.format.name == "mp3" and not j.sse for j in backend.jobs)  # OpenAI's default format


def test_instructions_reach_a_model_that_takes_them():
    backend = FakeBackend(voices=catalogue("1b7"))
    server = App(backend)
    try:
        assert post(server, {**GOOD, "instructions": "  Whisper it.  "}).status_code == 200
    finally:
        server.close()
    (job,) = backend.jobs
    assert job.instructions == "Whisper it." and job.voice.styled(job.instructions).instruct == "Whisper it."


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_streams_through_the_openai_client(app, backend, name):
    with client(app).audio.speech.with_streaming_response.create(
            model="tts-1", voice="ryan", input="Hello there.", response_format=name) as response:
        assert response.headers["content-type"] == FORMATS[name].content_type
        assert response.headers.get("transfer-encoding") == "chunked"
        data = b"".join(response.iter_bytes())
    expected = backend.chunks * CHUNK / RATE
    if name == "pcm":
        assert data == backend.pcm_all.tobytes()
        return
    samples, rate = decoded_samples(data)
    assert 0 <= samples.size / rate - expected <= FORMATS[name].extra_s + 1e-9
    if name in ("wav", "flac"):
        assert np.array_equal(samples, backend.pcm_all)


def test_sse_events_as_openai_defines_them(app, backend):
    response = post(app, {**GOOD, "response_format": "wav", "stream_format": "sse"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in response.text.split("\n\n") if b]
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks)
    events = [json.loads(b[len("data: "):]) for b in blocks]
    *deltas, done = events
    assert deltas and all(set(e) == {"type", "audio"} and e["type"] == "speech.audio.delta" for e in deltas)
    assert done == {"type": "speech.audio.done",
                    "usage": {"input_tokens": 2, "output_tokens": backend.chunks, "total_tokens": 2 + backend.chunks}}
    wav = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    samples, _ = decoded_samples(wav)
    assert np.array_equal(samples, backend.pcm_all)


def test_refused_before_audio_is_an_error_status():
    backend = FakeBackend(refuse=SpeechError("the model is still loading", "NotReady"))
    server = App(backend)
    try:
        response = post(server, GOOD)
    finally:
        server.close()
    assert response.status_code == 503
    assert response.json()["error"] == {"message": "the model is still loading", "type": "server_error",
                                        "param": None, "code": "NotReady"}


def test_a_failure_mid_stream_cuts_the_response():
    backend = FakeBackend(fail_after=3)
    server = App(backend)
    try:
        with pytest.raises(httpx.RemoteProtocolError):  # the chunked body never ends: not taken as whole
            post(server, {**GOOD, "response_format": "pcm"})
        response = post(server, {**GOOD, "response_format": "pcm", "stream_format": "sse"})
    finally:
        server.close()
    last = json.loads(response.text.strip().split("\n\n")[-1][len("data: "):])
    assert last["error"]["type"] == "server_error" and "engine broke" in last["error"]["message"]


def wait_for(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("delay_s", [0.02, 3.0])
def test_a_client_that_leaves_mid_stream_withdraws_the_response(delay_s):
    """Withdrawn within a poll, not at the next chunk's write (which a slow engine makes late)."""
    backend = FakeBackend(chunks=200, delay_s=delay_s)
    server = App(backend)
    try:
        with httpx.stream("POST", f"{server.url}/v1/audio/speech", json={**GOOD, "response_format": "wav"},
                          timeout=30) as response:
            next(response.iter_raw())
        assert wait_for(lambda: backend.closed_early == [True], 1.5)
    finally:
        server.close()


def test_a_client_that_leaves_before_the_first_audio_withdraws_the_response():
    backend = FakeBackend(chunks=3, delay_s=1.0)
    server = App(backend)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            body = json.dumps(GOOD).encode()
            sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            assert wait_for(lambda: len(backend.closed_early) == 1)
        assert wait_for(lambda: backend.closed_early == [True], 3.0) and not backend.started.is_set()
    finally:
        server.close()


def test_model_and_voice_lists(app):
    models = httpx.get(f"{app.url}/v1/models").json()
    assert models["object"] == "list"
    (model,) = models["data"]
    assert model["id"] == "qwen3-tts-0.6b-customvoice" and model["object"] == "model"
    assert isinstance(model["created"], int) and model["owned_by"]
    assert httpx.get(f"{app.url}/v1/models/tts-1").json()["id"] == "tts-1"
    missing = httpx.get(f"{app.url}/v1/models/whisper-1")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert client(app).models.list().data[0].id == model["id"]
    voices = httpx.get(f"{app.url}/v1/audio/voices").json()
    assert [v["id"] for v in voices["voices"]] == ["ryan", "vivian"] and all(v["name"] for v in voices["voices"])
    assert voices["default"] == "ryan" and voices["instructions"] is False
    assert httpx.get(f"{app.url}/v1/audio/models").json()["models"][0]["id"] == model["id"]


def test_lists_before_the_voices_are_known():
    server = App(FakeBackend(voices=None))
    try:
        for path in ("/v1/models", "/v1/audio/voices"):
            response = httpx.get(f"{server.url}{path}")
            assert response.status_code == 503 and response.json()["error"]["type"] == "server_error"
        assert post(server, GOOD).status_code == 503
    finally:
        server.close()


def test_an_unknown_path_or_method_under_v1_gets_openai_errors(app):
    missing = httpx.get(f"{app.url}/v1/audio/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = httpx.get(f"{app.url}/v1/audio/speech")
    assert wrong.status_code == 405 and set(wrong.json()["error"]) == {"message", "type", "param", "code"}


def test_a_failure_before_the_first_audio_keeps_its_status():
    """The engine's queue full when the first sentence is submitted: 503, as OpenAI's overload."""
    backend = FakeBackend(fail_after=0, failure=StreamFailed("busy: 9 requests are already waiting", "Busy"))
    server = App(backend)
    try:
        response = post(server, GOOD)
    finally:
        server.close()
    assert response.status_code == 503 and response.json()["error"]["code"] == "Busy"


def raw_request(port: int, pieces: list[bytes], pause_s: float) -> bytes:
    """A request written in pieces with pauses; the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for piece in pieces:
            sock.sendall(piece)
            time.sleep(pause_s)
        answer = b""
        while chunk := sock.recv(65536):  # Connection: close: to the server's end
            answer += chunk
    return answer


def http_request(body: bytes, length: int | None = None) -> bytes:
    return (b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length)) + body


def test_a_body_that_arrives_in_pieces(app, backend):
    body = json.dumps({**GOOD, "response_format": "pcm"}).encode()
    answer = raw_request(app.port, [http_request(body)[:-20], body[-20:-7], body[-7:]], 0.2)
    assert answer.startswith(b"HTTP/1.1 200") and len(backend.jobs) == 1


def test_a_body_too_slow_is_refused(app, backend, monkeypatch):
    monkeypatch.setattr(openai_api, "BODY_TIMEOUT_S", 0.5)
    body = json.dumps(GOOD).encode()
    answer = raw_request(app.port, [http_request(body)[:-5], body[-5:]], 1.0)
    assert answer.startswith(b"HTTP/1.1 408") and b'"code": "timeout"' in answer and backend.jobs == []
