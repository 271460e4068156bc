"""OpenAI's speech API on the real server (the tiny CustomVoice model, greedy f32 with a seed),
driven by the official `openai` client beside a Wyoming client: every format and SSE decode
(PyAV) to the duration the server reports, the WAV is Wyoming's audio, both protocols' requests
are generated in the same engine steps, bad input gets OpenAI's errors, a client that leaves
frees its KV blocks (docs/OPENAI.md)."""
from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
from dataclasses import replace
from functools import partial

import av
import httpx
import numpy as np
import openai
import pytest
from test_server import FRAME, free_port, run, same_samples, wait_until_idle
from wyoming.server import AsyncTcpServer

from wyoming_qwen3tts.client import synthesize
from wyoming_qwen3tts.config import ServerConfig, apply_overrides
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.server.audio_encoding import FORMATS
from wyoming_qwen3tts.server.handler import ServiceSlot, TtsHandler
from wyoming_qwen3tts.server.http_api import build_app, start_http
from wyoming_qwen3tts.server.loading import build_service
from wyoming_qwen3tts.server.voice_lab import VoiceLab

TOKEN = "test-token"
TWO = "The first sentence is here. A second one follows it!"
MAX_FRAMES = 24  # the tiny model never ends by itself: every sentence is this long


class BothServer:
    """Wyoming at self.uri and the HTTP side at self.url on one loop thread, over one ServiceSlot,
    as `wyoming-qwen3tts --http HOST:PORT --http-token TOKEN` runs them."""

    def __init__(self, config: ServerConfig) -> None:
        self.service = build_service(config)
        self.slot = ServiceSlot(service=self.service, settings=config.server)
        self.port, self.loop = free_port(), asyncio.new_event_loop()
        self.uri, self.url = f"tcp://127.0.0.1:{self.port}", f"http://{config.server.http}"
        self._wyoming = AsyncTcpServer("127.0.0.1", self.port)
        lab = VoiceLab(self.slot, config)
        started = threading.Event()

        async def start() -> None:
            await self._wyoming.start(partial(TtsHandler, self.slot))
            self._http = await start_http(build_app(self.slot, config.server, lab), config.server.http)

        def loop() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(start())
            started.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self._http.stop())
            self.loop.run_until_complete(self._wyoming.stop())
            self.loop.close()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        assert started.wait(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.service.engine.close()


@pytest.fixture(scope="module")
def server(converted_factory, tmp_path_factory):
    config = apply_overrides(ServerConfig(engine=EngineConfig(max_frames=MAX_FRAMES, steady_chunk=8, kv_blocks=64)),
                             model=str(converted_factory("tiny", "custom_voice", "int8")),
                             data_dir=str(tmp_path_factory.mktemp("data")), greedy=True, seed=7, threads=1,
                             samples_per_chunk=100_000, precision="f32")
    config = replace(config, server=replace(config.server, http=f"127.0.0.1:{free_port()}", http_token=TOKEN))
    both = BothServer(config)
    try:
        yield both
    finally:
        both.close()


def client(server: BothServer, token: str = TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0, timeout=120)


def decoded(data: bytes) -> tuple[np.ndarray, int]:
    with av.open(io.BytesIO(data)) as container:
        samples = [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
        return np.concatenate(samples), container.streams.audio[0].codec_context.sample_rate


def sse_audio(text: str) -> tuple[bytes, dict]:
    """The audio of an SSE response's deltas, and its done event."""
    events = [json.loads(block.removeprefix("data: ")) for block in text.split("\n\n") if block]
    *deltas, done = events
    assert all(e["type"] == "speech.audio.delta" for e in deltas) and done["type"] == "speech.audio.done", events[-1]
    return b"".join(base64.b64decode(e["audio"]) for e in deltas), done


def duration_ok(name: str, data: bytes, reported_s: float) -> None:
    if name == "pcm":
        assert len(data) / 2 / 24_000 == pytest.approx(reported_s)
        return
    samples, rate = decoded(data)
    extra = samples.size / rate - reported_s
    assert -1e-9 <= extra <= FORMATS[name].extra_s + 1e-9, (name, samples.size, rate, reported_s)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_and_sse_decode_to_the_reported_duration(server, name):
    """The official client streams each format; its SSE twin's done event reports the audio as
    80 ms frames (usage.output_tokens), and both decode to that duration."""
    with client(server).audio.speech.with_streaming_response.create(
            model="tts-1", voice="ryan", input=TWO, response_format=name, stream_format="sse") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        audio, done = sse_audio(response.read().decode())
    usage = done["usage"]
    assert usage["output_tokens"] == 2 * MAX_FRAMES and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    reported_s = usage["output_tokens"] * FRAME / 24_000
    duration_ok(name, audio, reported_s)
    with client(server).audio.speech.with_streaming_response.create(
            model="tts-1", voice="ryan", input=TWO, response_format=name) as response:
        assert response.headers["content-type"] == FORMATS[name].content_type
        assert response.headers["transfer-encoding"] == "chunked"
        parts = list(response.iter_bytes())
    duration_ok(name, b"".join(parts), reported_s)
    if FORMATS[name].exact:  # the same request twice, greedy: the same audio
        assert b"".join(parts) == audio


def test_the_wav_is_what_wyoming_returns(server):
    """Same voice, text and seed: the WAV's samples are Wyoming's (up to the last bit of the
    float decode in other chunk sizes, as test_server.same_samples says)."""
    with client(server).audio.speech.with_streaming_response.create(
            model="qwen3-tts-0.6b-customvoice", voice="ryan", input=TWO, response_format="wav") as response:
        wav = response.read()
    wyoming = run(synthesize(server.uri, TWO, voice="ryan"))
    assert wav[:4] == b"RIFF" and len(wav) - 44 == len(wyoming.audio) == 2 * MAX_FRAMES * FRAME * 2
    assert same_samples(wav[44:], bytes(wyoming.audio))


def test_both_protocols_share_engine_steps(server):
    """A Wyoming and an OpenAI request at once: some engine step generates a sentence of each.
    Each sentence's request id is known from its voice (engine.submit; Wyoming's in the default
    voice, OpenAI's in vivian), each step's requests from the scheduler as the step starts."""
    engine = server.service.engine
    ids: dict[str, set[int]] = {"wyoming": set(), "openai": set()}
    steps: list[frozenset[int]] = []
    submit, step = engine.submit, engine.batch.step

    def recording_submit(voice, *args, **kwargs):
        stream = submit(voice, *args, **kwargs)
        ids["openai" if voice.speaker == "vivian" else "wyoming"].add(stream.id)
        return stream

    def recording_step():
        steps.append(frozenset(engine._running))
        return step()

    async def both() -> bytes:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0) as api:
            async def speak() -> bytes:
                async with api.audio.speech.with_streaming_response.create(
                        model="tts-1", voice="vivian", input="Hello from OpenAI. It speaks too.",
                        response_format="pcm") as response:
                    return await response.read()
            wyoming, pcm = await asyncio.gather(synthesize(server.uri, "Hello from Wyoming. It speaks too."),
                                                speak())
        assert len(wyoming.audio) == len(pcm) == 2 * MAX_FRAMES * FRAME * 2
        return pcm

    engine.submit, engine.batch.step = recording_submit, recording_step
    try:
        run(both())
    finally:
        del engine.submit, engine.batch.step  # the class's methods again
    assert len(ids["wyoming"]) == len(ids["openai"]) == 2
    shared = [s for s in steps if s & ids["wyoming"] and s & ids["openai"]]
    assert shared, (ids, steps)


@pytest.mark.parametrize("body, status, param", [
    ({"model": "tts-1", "input": "Hi.", "voice": "alloy"}, 400, "voice"),
    ({"model": "eleven_turbo", "input": "Hi.", "voice": "ryan"}, 404, "model"),
    ({"model": "tts-1", "input": "", "voice": "ryan"}, 400, "input"),
    ({"model": "tts-1", "input": "word " * 1500, "voice": "ryan"}, 400, "input"),  # 7500 > max_text_chars
    ({"model": "tts-1", "input": "x" * 100_000, "voice": "ryan"}, 413, None),  # refused by its size, unread
    ({"model": "tts-1", "input": "Hi.", "voice": "ryan", "response_format": "ogg"}, 400, "response_format"),
    ({"model": "tts-1", "input": "Hi.", "voice": "ryan", "speed": 2.0}, 400, "speed"),
    ({"model": "tts-1", "input": "Hi.", "voice": "ryan", "instructions": "Shout."}, 400, "instructions"),
    ({"input": "Hi.", "voice": "ryan"}, 400, "model"),
])
def test_bad_input_gets_openai_errors_and_never_reaches_the_engine(server, body, status, param):
    engine = server.service.engine
    before = engine.metrics().requests_done
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]
    assert engine.metrics().requests_done == before and engine.metrics().active == 0


def test_bad_json_and_the_clients_exceptions(server):
    response = httpx.post(f"{server.url}/v1/audio/speech", content=b"{oops", timeout=60,
                          headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    with pytest.raises(openai.BadRequestError) as bad:
        client(server).audio.speech.create(model="tts-1", voice="nobody", input="Hi.")
    assert bad.value.param == "voice" and "'ryan'" in bad.value.message
    with pytest.raises(openai.NotFoundError):
        client(server).audio.speech.create(model="whisper-1", voice="ryan", input="Hi.")


def test_the_token_is_required(server):
    with pytest.raises(openai.AuthenticationError) as refused:
        client(server, "wrong").audio.speech.create(model="tts-1", voice="ryan", input="Hi.")
    assert refused.value.code == "invalid_api_key"
    response = httpx.get(f"{server.url}/v1/models", timeout=30)
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"


def test_models_and_voices(server):
    (model,) = client(server).models.list().data
    assert model.id == "qwen3-tts-0.6b-customvoice"
    assert client(server).models.retrieve("tts-1").id == "tts-1"
    voices = httpx.get(f"{server.url}/v1/audio/voices", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert {"ryan", "vivian"} <= {v["id"] for v in voices["voices"]}


def test_a_client_that_leaves_mid_stream_frees_its_blocks(server):
    """Six sentences asked for, the connection closed after the first audio: the engine goes
    idle with every KV block back, having made only the sentences in flight."""
    engine = server.service.engine
    done_before = engine.metrics().requests_done
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", headers={"Authorization": f"Bearer {TOKEN}"},
                      json={"model": "tts-1", "voice": "ryan", "input": " ".join([TWO] * 3), "response_format": "wav"},
                      timeout=60) as response:
        assert response.status_code == 200
        next(response.iter_raw())
    wait_until_idle(engine)
    assert engine.metrics().requests_done - done_before < 6
    assert client(server).audio.speech.create(model="tts-1", voice="ryan", input="Still here?",
                                              response_format="pcm").content


def test_instructions_reach_the_engine_on_a_1_7b_model(converted_factory, tmp_path_factory):
    """A 1.7B CustomVoice speaker takes a style: the engine is asked for the speaker with the
    request's instructions as its instruct, and the audio streams."""
    config = apply_overrides(ServerConfig(engine=EngineConfig(max_frames=8, kv_blocks=64)),
                             model=str(converted_factory("tiny-1.7b", "custom_voice", "int8")),
                             data_dir=str(tmp_path_factory.mktemp("data17")), greedy=True, threads=1, precision="f32")
    config = replace(config, server=replace(config.server, http=f"127.0.0.1:{free_port()}", http_token=TOKEN))
    both = BothServer(config)
    asked = []
    submit = both.service.engine.submit

    def recording_submit(voice, *args, **kwargs):
        asked.append(voice)
        return submit(voice, *args, **kwargs)

    both.service.engine.submit = recording_submit
    try:
        audio = client(both).audio.speech.create(model="tts-1", voice="ryan", input="Hello there.",
                                                 instructions="Whisper it.", response_format="pcm").content
        voices = httpx.get(f"{both.url}/v1/audio/voices", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    finally:
        both.close()
    assert len(audio) == 8 * FRAME * 2 and voices["instructions"] is True
    assert [(v.speaker, v.instruct) for v in asked] == [("ryan", "Whisper it.")]
