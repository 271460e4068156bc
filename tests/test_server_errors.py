"""Every response ends: each way a request can fail, read as released Home Assistant reads a
reply (one-shot: events until the first audio-stop, ignoring `error`; streaming: until
synthesize-stopped), with a short timeout so that a hang fails at once."""
from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest
from test_server import THREE, Server, run, tiny_server, wait_until_idle
from wyoming.client import AsyncClient
from wyoming.event import Event
from wyoming.info import Describe

from wyoming_qwen3tts.config import ServerSettings
from wyoming_qwen3tts.engine.stream import EngineBusy
from wyoming_qwen3tts.server import handler as handler_module
from wyoming_qwen3tts.server.handler import ServiceSlot

READ_S = 10.0  # any one event; the tiny model answers in well under a second


async def ha_reply(port: int, data: dict, streaming: bool = False) -> list[Event]:
    """The events of one request, read until its end marker, as Home Assistant reads them."""
    async with AsyncClient.from_uri(f"tcp://127.0.0.1:{port}") as client:
        if streaming:
            voice = {"voice": data["voice"]} if "voice" in data else {}
            await client.write_event(Event("synthesize-start", voice))
            await client.write_event(Event("synthesize-chunk", {"text": data["text"]}))
            await client.write_event(Event("synthesize", data))  # the compat copy: ignored
            await client.write_event(Event("synthesize-stop"))
        else:
            await client.write_event(Event("synthesize", data))
        end = "synthesize-stopped" if streaming else "audio-stop"
        events: list[Event] = []
        while not events or events[-1].type != end:
            event = await asyncio.wait_for(client.read_event(), READ_S)
            assert event is not None, f"connection closed after {[e.type for e in events]}"
            events.append(event)
        return events


def assert_failed(events: list[Event], code: str, streaming: bool = False) -> None:
    """One error with `code`, then the response's end (nothing after it)."""
    kinds = [e.type for e in events]
    errors = [e for e in events if e.type == "error"]
    assert len(errors) == 1 and errors[0].data["code"] == code, kinds
    assert errors[0].data["text"]
    tail = kinds[kinds.index("error"):]
    if streaming:
        assert tail in (["error", "synthesize-stopped"], ["error", "audio-stop", "synthesize-stopped"]), kinds
    else:
        # before any audio: error, audio-start, audio-stop; mid-answer: ..., error, audio-stop
        assert tail in (["error", "audio-start", "audio-stop"], ["error", "audio-stop"]), kinds
        assert kinds.count("audio-start") == 1 and kinds.count("audio-stop") == 1, kinds


@pytest.fixture(scope="module")
def server(converted_factory, tmp_path_factory):
    yield from tiny_server(converted_factory, tmp_path_factory)


def both(port: int, data: dict, code: str) -> None:
    assert_failed(run(ha_reply(port, data)), code)
    assert_failed(run(ha_reply(port, data, streaming=True)), code, streaming=True)


@pytest.mark.parametrize(("data", "code"), [
    ({"text": "Hi.", "voice": {"name": "nobody"}}, "VoiceNotFound"),
    ({"text": "Hi.", "voice": {"name": "ryan", "language": "tlh"}}, "LanguageNotSupported"),
    ({"text": "word " * 2000, "voice": {"name": "ryan"}}, "TextTooLong"),
])
def test_refused_requests_end(server, data, code):
    both(server.port, data, code)


def test_a_text_that_is_not_a_string_ends(server):
    assert_failed(run(ha_reply(server.port, {"text": 42})), "BadRequest")


def test_engine_busy_before_any_audio_ends(server, monkeypatch):
    def busy(*args, **kwargs):
        raise EngineBusy("busy: 64 requests are already waiting, try again later")

    monkeypatch.setattr(server.service.engine, "submit", busy)
    monkeypatch.setattr(server.service.engine, "open", busy)  # streamed text, fed by the word
    both(server.port, {"text": THREE, "voice": {"name": "ryan"}}, "Busy")


def test_a_request_past_its_deadline_ends(server, monkeypatch):
    engine = server.service.engine
    for name in ("submit", "open"):  # one-shot, and streamed text fed by the word
        real = getattr(engine, name)
        monkeypatch.setattr(engine, name, lambda *a, real=real, **k: real(*a, **{**k, "timeout": 1e-6}))
    both(server.port, {"text": THREE, "voice": {"name": "ryan"}}, "Timeout")
    wait_until_idle(engine)


def test_a_failure_inside_the_runner_ends_and_frees_the_blocks(server, monkeypatch):
    engine = server.service.engine
    real, failed = engine.runner.forward, []

    def step_fails_once(*args, **kwargs):
        if not failed:
            failed.append(1)
            raise RuntimeError("the native runner failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(engine.runner, "forward", step_fails_once)
    assert_failed(run(ha_reply(server.port, {"text": THREE, "voice": {"name": "ryan"}})), "SynthesisFailed")
    wait_until_idle(engine)  # the failed request's KV blocks are back
    assert engine.metrics().blocks_used == 0
    events = run(ha_reply(server.port, {"text": "Still fine.", "voice": {"name": "ryan"}}))
    assert "error" not in [e.type for e in events] and any(e.type == "audio-chunk" for e in events)


def test_an_unexpected_error_while_speaking_ends(server, monkeypatch):
    def bug(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(server.service.engine, "submit", bug)
    monkeypatch.setattr(server.service.engine, "open", bug)
    both(server.port, {"text": THREE, "voice": {"name": "ryan"}}, "SynthesisFailed")


def test_an_unexpected_error_reading_the_text_ends(server, monkeypatch):
    def bug(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(handler_module, "split_sentences", bug)
    assert_failed(run(ha_reply(server.port, {"text": THREE})), "InternalError")


@pytest.fixture
def loading(server):
    """A server whose model is still loading: its voice list is known (published), its
    service not yet; requests wait 0.5 s for it."""
    settings = dataclasses.replace(server.service.settings, loading_wait=0.5)
    slot = ServiceSlot(settings=settings)
    slot.publish(server.service.catalogue)
    loading = Server(server.service, slot)
    yield loading
    loading.close()


def test_a_request_while_the_model_loads_waits_then_ends_not_ready(loading, caplog):
    with caplog.at_level(logging.WARNING, logger="wyoming_qwen3tts.server.speech"):
        both(loading.port, {"text": "Too early.", "voice": {"name": "ryan"}}, "NotReady")
    # one reply per failure, and one log line naming the client and the request
    failures = [r.getMessage() for r in caplog.records if "NotReady" in r.getMessage()]
    assert len(failures) == 2 and all(m.startswith("request ") and "127.0.0.1:" in m for m in failures)


def test_an_unknown_voice_is_refused_at_once_while_the_model_loads(loading):
    loading.slot.settings = dataclasses.replace(loading.slot.settings, loading_wait=60.0)
    both(loading.port, {"text": "Hi.", "voice": {"name": "nobody"}}, "VoiceNotFound")


def test_a_request_while_the_model_loads_is_served_once_it_has_loaded(loading, server):
    loading.slot.settings = dataclasses.replace(loading.slot.settings, loading_wait=30.0)

    async def early() -> list[Event]:
        request = asyncio.create_task(ha_reply(loading.port, {"text": "Just in time.", "voice": {"name": "ryan"}}))
        await asyncio.sleep(0.5)
        assert not request.done()  # waiting for the model
        loading.loop.call_soon_threadsafe(loading.slot.load, server.service)
        return await request

    kinds = [e.type for e in run(early())]
    assert "error" not in kinds and kinds[0] == "audio-start" and "audio-chunk" in kinds


def test_describe_while_loading_lists_the_voices_of_the_loaded_model(loading, server):
    async def describe(port: int) -> Event:
        async with AsyncClient.from_uri(f"tcp://127.0.0.1:{port}") as client:
            await client.write_event(Describe().event())
            return await asyncio.wait_for(client.read_event(), READ_S)

    early = run(describe(loading.port))
    assert early.type == "info" and early.data == run(describe(server.port)).data
    assert early.data["tts"][0]["voices"]


def test_describe_before_the_voice_list_is_known_gets_no_answer(server):
    """Home Assistant's setup (wyoming/data.py load_wyoming_info) then raises and retries the
    entry with backoff, instead of building an entity from an empty program."""
    unknown = Server(server.service, ServiceSlot(settings=ServerSettings()))
    try:
        async def describe() -> Event | None:
            async with AsyncClient.from_uri(unknown.uri) as client:
                await client.write_event(Describe().event())
                return await asyncio.wait_for(client.read_event(), READ_S)

        assert run(describe()) is None  # closed without an info
    finally:
        unknown.close()


def test_requests_while_stopping_end_with_shutting_down(server):
    stopping = Server(server.service, ServiceSlot(service=server.service, settings=server.service.settings))
    stopping.slot.stopping = True
    try:
        both(stopping.port, {"text": "Too late.", "voice": {"name": "ryan"}}, "ShuttingDown")
    finally:
        stopping.close()
