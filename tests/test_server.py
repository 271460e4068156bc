"""The Wyoming server over real TCP, driven like Home Assistant drives it
(docs/ARCHITECTURE.md, "What Home Assistant expects")."""
from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from wyoming.client import AsyncClient
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.ping import Ping
from wyoming.server import AsyncTcpServer
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

from wyoming_qwen3tts.client import ClientError, Reply, pieces, synthesize
from wyoming_qwen3tts.config import ServerConfig, apply_overrides
from wyoming_qwen3tts.engine.audio import to_int16
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.server.app import build_service
from wyoming_qwen3tts.server.handler import ServiceSlot, TtsHandler
from wyoming_qwen3tts.server.text import normalize, split_sentences

FRAME = 1920  # samples per 80 ms frame at 24 kHz
THREE = "The first sentence is here. A second one follows it! And a third, to finish?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The server's handler on its own event loop thread, as `wyoming-qwen3tts` runs it."""

    def __init__(self, service, slot: ServiceSlot | None = None) -> None:
        self.service = service
        self.slot = slot or ServiceSlot(service=service, settings=service.settings)
        self.port = free_port()
        self.uri = f"tcp://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self._server = AsyncTcpServer("127.0.0.1", self.port)
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self._server.start(partial(TtsHandler, self.slot)))
            started.set()
            self.loop.run_forever()
            try:  # stopped: no thread of its executor (the listener's address lookup) outlives it
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
            finally:
                self.loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert started.wait(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def tiny_server(converted_factory, tmp_path_factory) -> Iterator[Server]:
    """The tiny model served over loopback TCP (a module-scoped fixture's body)."""
    config = apply_overrides(ServerConfig(engine=EngineConfig(max_frames=24, steady_chunk=8, kv_blocks=64)),
                             model=str(converted_factory("tiny", "custom_voice", "int8")),
                             data_dir=str(tmp_path_factory.mktemp("data")), greedy=True, threads=1,
                             samples_per_chunk=100_000, precision="f32")  # batch-independent numbers
    service = build_service(config)
    try:
        server = Server(service)
        try:
            yield server
        finally:
            server.close()
    finally:
        service.engine.close()


@pytest.fixture(scope="module")
def server(converted_factory, tmp_path_factory):
    yield from tiny_server(converted_factory, tmp_path_factory)


def same_samples(a: bytes, b: bytes) -> bool:
    """The same s16 audio: equal length, and no sample more than 1 apart. A streamed response
    may be decoded in other chunk sizes than a one-shot one (paced: 1-frame chunks while barely
    ahead), which the codec decodes to the same audio up to the last bits of the floats
    (MODEL.md §8.3); a lost, repeated or misplaced chunk is thousands apart."""
    x, y = np.frombuffer(a, np.int16).astype(np.int32), np.frombuffer(b, np.int16).astype(np.int32)
    return x.shape == y.shape and bool(np.abs(x - y).max(initial=0) <= 1)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_describe_lists_every_speaker_with_streaming(server):
    async def describe() -> tuple[Info, float]:
        async with AsyncClient.from_uri(server.uri) as client:
            start = time.monotonic()
            await client.write_event(Describe().event())
            event = await client.read_event()
            return Info.from_event(event), time.monotonic() - start

    (info, took), (again, _) = run(describe()), run(describe())
    (program,) = info.tts
    assert program.supports_synthesize_streaming and program.installed and program.version
    names = [v.name for v in program.voices]
    assert set(names) == {s.name for s in server.service.engine.model.spec.speakers}
    assert all(v.languages and v.description for v in program.voices)
    assert info.to_dict() == again.to_dict() and took < 1.0


def test_one_shot_streams_frames_as_they_decode(server):
    """One-shot responses are never held back (Home Assistant's one-shot reader plays nothing
    before audio-stop): each codec call goes out as it is decoded, whatever server.holdback_s."""
    assert server.service.settings.holdback_s > 0
    reply = run(synthesize(server.uri, "Hello there, how are you?", voice="ryan"))
    assert reply.events.count("audio-start") == 1 and reply.events.count("audio-stop") == 1
    assert reply.events[0] == "audio-start" and reply.events[-1] == "audio-stop"
    assert reply.rate == 24000 and reply.width == 2 and reply.channels == 1
    assert len(reply.audio) == 24 * FRAME * 2  # the frame cap of this server: 24 frames
    assert reply.events.count("audio-chunk") == len(reply.chunk_bytes)
    # samples_per_chunk is large here, so each audio-chunk is one codec call: 1 frame, then 8.
    # The codec lead (MODEL.md §8.3) may send the first frame's first 960 samples ahead, when
    # the measured decode keeps up; the rest of that frame then follows as its own chunk.
    first = [960 * 2, (FRAME - 960) * 2] if reply.chunk_bytes[0] == 960 * 2 else [FRAME * 2]
    assert reply.chunk_bytes == first + [8 * FRAME * 2] * 2 + [7 * FRAME * 2]


@pytest.fixture(scope="module")
def sentence_server(server):
    """The same engine behind a second port whose streamed text is fed sentence by sentence."""
    slot = ServiceSlot(service=server.service, settings=replace(server.service.settings, text_feeding="sentence"))
    other = Server(server.service, slot)
    yield other
    other.close()


def test_streaming_by_sentence_with_mid_word_pieces_gives_the_one_shot_audio(sentence_server):
    one_shot = run(synthesize(sentence_server.uri, THREE, voice="vivian"))
    streamed = run(synthesize(sentence_server.uri, THREE, voice="vivian", streaming=True, piece_chars=5))
    assert streamed.events[-1] == "synthesize-stopped" and streamed.events.count("synthesize-stopped") == 1
    assert streamed.events.count("audio-start") == 1 and streamed.events.count("audio-stop") == 1
    assert len(streamed.audio) == len(one_shot.audio) == 3 * 24 * FRAME * 2  # three sentences, no duplicate
    assert same_samples(streamed.audio, one_shot.audio)  # greedy, one thread: the same audio


def test_streaming_by_word_gives_each_sentence_in_the_streaming_layout(server):
    """Word feeding (the default) starts each sentence with its first words; its audio is that
    of the whole sentence in Qwen3-TTS's streaming-text layout, whatever the pieces."""
    service = server.service
    entry, language = service.catalogue.resolve("vivian", None)
    expected = b""
    for sentence in split_sentences(THREE):
        voice = replace(entry.request(normalize(sentence, 1000), language), non_streaming=False)
        expected += to_int16(service.engine.submit(voice, service.params).read_all(60)).tobytes()
    for piece_chars in (3, 17):
        streamed = run(synthesize(server.uri, THREE, voice="vivian", streaming=True, piece_chars=piece_chars))
        assert streamed.events[-1] == "synthesize-stopped" and streamed.events.count("audio-stop") == 1
        assert same_samples(streamed.audio, expected)


def test_a_long_sentence_written_word_by_word_is_heard_before_its_last_word(server):
    """An LLM writing a 30-word sentence, a word every 150 ms: with word feeding the first audio
    comes while the sentence is still being written (sentence feeding would wait for its end)."""
    text = ("So the weather later this afternoon looks rather pleasant with a light breeze from the west and "
            "temperatures climbing slowly toward twenty degrees before the clouds return by the evening.")
    assert len(text.split()) == 30

    async def session() -> tuple[float, float, list[str]]:
        async with AsyncClient.from_uri(server.uri) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="ryan")).event())
            events: list[str] = []
            first_audio: list[float] = []

            async def read() -> None:
                while not events or events[-1] != "synthesize-stopped":
                    events.append((await asyncio.wait_for(client.read_event(), 60)).type)
                    if events[-1] == "audio-chunk" and not first_audio:
                        first_audio.append(time.monotonic())

            reader = asyncio.create_task(read())
            start = time.monotonic()
            for i, word in enumerate(text.split()):
                await client.write_event(SynthesizeChunk(text=word if i == 0 else " " + word).event())
                await asyncio.sleep(0.15)
            last_word = time.monotonic()
            await client.write_event(SynthesizeStop().event())
            await reader
            return first_audio[0] - start, last_word - start, events

    first, last, events = run(session())
    assert first < last - 1.0, f"first audio {first:.2f} s after the first word, the last word at {last:.2f} s"
    assert events[-2:] == ["audio-stop", "synthesize-stopped"] and events.count("audio-start") == 1


def test_first_audio_of_a_stream_arrives_before_synthesize_stop(server):
    async def session() -> tuple[list[str], bool]:
        async with AsyncClient.from_uri(server.uri) as client:
            await client.write_event(SynthesizeStart().event())
            for piece in pieces("The first sentence is here. A sec", 6):
                await client.write_event(SynthesizeChunk(text=piece).event())
            seen = []
            while "audio-chunk" not in seen:  # no stop sent yet: audio must come anyway
                seen.append((await asyncio.wait_for(client.read_event(), 30)).type)
            for piece in pieces("ond one follows it! And a third.", 6):
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(Synthesize(text=THREE).event())
            await client.write_event(SynthesizeStop().event())
            while seen[-1] != "synthesize-stopped":
                seen.append((await asyncio.wait_for(client.read_event(), 30)).type)
            return seen

    seen = run(session())
    assert seen[0] == "audio-start" and seen.count("audio-start") == 1 and seen[-2:] == ["audio-stop",
                                                                                         "synthesize-stopped"]


def test_describe_answers_fast_while_four_syntheses_run(server):
    async def load() -> tuple[float, list[Reply]]:
        long_text = " ".join([THREE] * 3)
        jobs = [asyncio.create_task(synthesize(server.uri, long_text, voice=v)) for v in ("ryan", "vivian",
                                                                                          "serena", "eric")]
        await asyncio.sleep(0.3)
        async with AsyncClient.from_uri(server.uri) as client:
            start = time.monotonic()
            await client.write_event(Describe().event())
            assert Info.is_type((await client.read_event()).type)
            took = time.monotonic() - start
        running = sum(not j.done() for j in jobs)
        return took, running, await asyncio.gather(*jobs)

    took, running, replies = run(load())
    assert running >= 1, "the syntheses must still be running while describe is answered"
    assert took < 1.0
    assert all(len(r.audio) == 9 * 24 * FRAME * 2 for r in replies)


def test_unknown_voice_is_an_error_and_the_connection_stays_usable(server):
    async def session() -> tuple[Event, Event, list[str]]:
        async with AsyncClient.from_uri(server.uri) as client:
            await client.write_event(Synthesize(text="Hi.", voice=None).event())
            await client.write_event(Event("synthesize", {"text": "Hi.", "voice": {"name": "nobody"}}))
            events = []
            while "error" not in events:
                events.append((await client.read_event()).type)
            while events[-1] != "audio-stop":  # the failed one-shot still ends: start, stop
                events.append((await client.read_event()).type)
            await client.write_event(Event("select-program", {"name": "x"}))  # unknown: ignored
            await client.write_event(Ping(text="still there?").event())
            pong = await client.read_event()
            await client.write_event(Describe().event())
            return pong, await client.read_event(), events

    pong, info, events = run(session())
    assert pong.type == "pong" and pong.data["text"] == "still there?" and info.type == "info"
    assert events.count("audio-stop") == 2  # the first request completed before the bad one failed
    assert events[events.index("error"):] == ["error", "audio-start", "audio-stop"]
    with pytest.raises(ClientError) as error:
        run(synthesize(server.uri, "Hi.", voice="nobody"))
    assert error.value.code == "VoiceNotFound" and "nobody" in str(error.value)


def test_language_from_the_raw_voice_data(server):
    reply = run(synthesize(server.uri, "Guten Tag.", voice="vivian", language="de"))
    assert reply.audio
    with pytest.raises(ClientError) as error:
        run(synthesize(server.uri, "Hi.", voice="vivian", language="tlh"))
    assert error.value.code == "LanguageNotSupported"


@pytest.mark.parametrize("text", ["", "   \n\t ", "😀🎉👍", "```\ncode only\n```", "?!...", "— …"])
def test_text_with_nothing_to_say_gets_a_short_silence(server, text, caplog):
    from wyoming_qwen3tts.server.speech import SILENCE_SAMPLES

    assert SILENCE_SAMPLES == 4800  # 200 ms at 24 kHz
    with caplog.at_level(logging.INFO, logger="wyoming_qwen3tts.server.speech"):
        one_shot = run(synthesize(server.uri, text, voice="ryan"))
        streamed = run(synthesize(server.uri, text, voice="ryan", streaming=True))
    assert one_shot.events == ["audio-start", "audio-chunk", "audio-stop"]
    assert streamed.events == ["audio-start", "audio-chunk", "audio-stop", "synthesize-stopped"]
    for reply in (one_shot, streamed):
        assert reply.rate == 24000 and reply.width == 2 and reply.channels == 1
        assert reply.audio == bytes(2 * SILENCE_SAMPLES)
    assert caplog.text.count("the text had nothing speakable; sending 200 ms of silence") == 2


def test_text_too_long_is_a_clear_error(server):
    with pytest.raises(ClientError) as error:
        run(synthesize(server.uri, "word " * 2000, voice="ryan"))
    assert error.value.code == "TextTooLong"
    with pytest.raises(ClientError) as error:
        run(synthesize(server.uri, "word " * 2000, voice="ryan", streaming=True, piece_chars=500))
    assert error.value.code == "TextTooLong"


def wait_until_idle(engine, aborted_at_least: int = 0, timeout: float = 20.0) -> None:
    """Idle for a while (a response between two sentences is idle for an instant)."""
    deadline, quiet_since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        m = engine.metrics()
        if m.active == 0 and m.queue_depth == 0 and m.blocks_used == 0 and m.ends.get("aborted", 0) >= aborted_at_least:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.5:
                return
        else:
            quiet_since = None
        time.sleep(0.02)
    raise AssertionError(f"the engine did not go idle: {engine.metrics()}")


def test_disconnect_mid_stream_frees_the_blocks(server):
    """Nine sentences streamed, the client gone after the first audio: the engine goes idle
    with every block back, having run only the sentences in flight when the failed write was
    seen (whether one was still running, and so counts as aborted, depends on the host's pace)."""
    engine = server.service.engine
    done_before = engine.metrics().requests_done

    async def vanish() -> None:
        async with AsyncClient.from_uri(server.uri) as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text=" ".join([THREE] * 3)).event())
            while (await client.read_event()).type != "audio-chunk":
                pass
        # the connection closes here, mid-stream

    run(vanish())
    wait_until_idle(engine)
    assert engine.metrics().requests_done - done_before < 9  # the rest were withdrawn, not synthesized
    assert run(synthesize(server.uri, "Still working?", voice="ryan")).audio


async def send_raw(port: int, data: bytes) -> list[dict]:
    """Raw bytes in; the events the server answers with until it closes (no payloads expected)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    lines = []
    while line := await asyncio.wait_for(reader.readline(), 10):
        lines.append(json.loads(line))
        if lines[-1].get("data_length"):
            lines[-1]["data"] = json.loads(await reader.readexactly(lines[-1]["data_length"]))
    writer.close()
    return lines


def test_oversized_or_malformed_events_close_only_that_connection(server):
    send = partial(send_raw, server.port)
    huge = run(send(b'{"type": "synthesize", "data_length": 999999999}\n'))
    assert huge[-1]["type"] == "error" and huge[-1]["data"]["code"] == "BadEvent"
    garbage = run(send(b"this is not json\n"))
    assert garbage[-1]["data"]["code"] == "BadEvent"
    inline = run(send(b'{"type": "describe", "data": {}}\n{"type": "ping", "data": {"text": "x"}}\n'
                          b'{"type": "nonsense\n'))
    assert [e["type"] for e in inline] == ["info", "pong", "error"]
    assert run(synthesize(server.uri, "Fine.", voice="ryan")).audio


def test_the_cli_client_against_the_server(server, sentence_server, tmp_path):
    from signals import read_wav

    from wyoming_qwen3tts.say import main as say

    out = tmp_path / "remote.wav"
    assert say(["Hello over the wire.", "--uri", server.uri, "--voice", "ryan", "-o", str(out)]) == 0
    # streamed sentence by sentence, the one-shot layout: the same samples
    assert say(["Hello over the wire.", "--uri", sentence_server.uri, "--voice", "ryan", "--stream",
                "-o", str(tmp_path / "streamed.wav")]) == 0
    samples, rate = read_wav(out)
    assert rate == 24000 and samples.size == 24 * FRAME and np.abs(samples).max() > 0
    assert np.array_equal(samples, read_wav(tmp_path / "streamed.wav")[0])
    assert say(["Hi.", "--uri", server.uri, "--voice", "nobody", "-o", str(tmp_path / "x.wav")]) == 1


class FakeZeroconf:
    """Stands in for zeroconf's AsyncZeroconf: tests send no multicast traffic."""

    registered: list = []

    async def async_register_service(self, info) -> None:
        FakeZeroconf.registered.append(info)


def test_zeroconf_announces_a_real_address(monkeypatch):
    import wyoming.zeroconf

    from wyoming_qwen3tts.config import ConfigError
    from wyoming_qwen3tts.server.app import announce

    monkeypatch.setattr(wyoming.zeroconf, "AsyncZeroconf", FakeZeroconf)
    asyncio.run(announce("tcp://192.168.1.20:10300", "kitchen"))
    info = FakeZeroconf.registered[-1]
    assert info.name == "kitchen._wyoming._tcp.local." and info.port == 10300
    assert info.addresses == [socket.inet_aton("192.168.1.20")]
    try:  # every interface: the library detects the LAN address (or there is none to detect here)
        asyncio.run(announce("tcp://0.0.0.0:10200", "hall"))
    except ConfigError as e:
        assert "LAN address" in str(e)
    else:
        assert FakeZeroconf.registered[-1].addresses != [socket.inet_aton("0.0.0.0")]
    with pytest.raises(ConfigError, match="tcp://"):
        asyncio.run(announce("unix:///tmp/x.sock", "hall"))


def test_a_queued_response_of_a_client_that_leaves_never_runs(server):
    engine = server.service.engine
    before = engine.metrics()

    async def leave_early() -> None:
        async with AsyncClient.from_uri(server.uri) as client:
            await client.write_event(Synthesize(text=THREE).event())
            await client.write_event(Synthesize(text=THREE).event())  # queued behind the first
            while (await client.read_event()).type != "audio-chunk":
                pass

    run(leave_early())
    wait_until_idle(engine, aborted_at_least=before.ends.get("aborted", 0) + 1)
    after = engine.metrics()
    ran = after.requests_done - before.requests_done
    aborted = after.ends.get("aborted", 0) - before.ends.get("aborted", 0)
    assert ran <= 3 and aborted >= 1  # only the first response's sentences ever reached the engine


def test_one_connection_cannot_flood_the_engine(server):
    engine = server.service.engine

    async def flood() -> tuple[int, Reply]:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        body = json.dumps({"text": THREE}).encode()
        for _ in range(40):  # pipelined requests, never reading the replies
            writer.write(json.dumps({"type": "synthesize", "data_length": len(body)}).encode() + b"\n" + body)
        await writer.drain()
        await asyncio.sleep(0.5)
        m = engine.metrics()
        other = await synthesize(server.uri, "Another satellite.", voice="ryan")
        writer.close()
        return m.active + m.queue_depth, other

    in_engine, other = run(flood())
    assert in_engine <= 2  # the response being written, and its next sentence
    assert len(other.audio) == 24 * FRAME * 2
    wait_until_idle(engine)


def test_a_client_that_half_closes_still_gets_its_audio(server):
    sock = socket.create_connection(("127.0.0.1", server.port))
    body = json.dumps({"text": "Hello there. How are you?", "voice": {"name": "ryan"}}).encode()
    sock.sendall(json.dumps({"type": "synthesize", "data_length": len(body)}).encode() + b"\n" + body)
    sock.shutdown(socket.SHUT_WR)  # like `printf ... | nc -N host 10200`
    sock.settimeout(60)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    sock.close()
    types, at = [], 0
    while at < len(received):  # header line, then data and payload bytes
        end = received.index(b"\n", at)
        header = json.loads(received[at:end])
        types.append(header["type"])
        at = end + 1 + header.get("data_length", 0) + header.get("payload_length", 0)
    assert types[0] == "audio-start" and types[-1] == "audio-stop" and types.count("audio-chunk") >= 2


def test_a_failure_mid_answer_is_reported_before_the_audio_stop(server, monkeypatch):
    from wyoming_qwen3tts.engine.stream import EngineBusy

    engine = server.service.engine
    real, calls = engine.submit, []

    def third_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise EngineBusy("busy: try again later")
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "submit", third_fails)
    with pytest.raises(ClientError) as error:  # a reader that stops at audio-stop still sees the error
        run(synthesize(server.uri, THREE, voice="ryan"))
    assert error.value.code == "Busy" and len(calls) == 3


def test_deeply_nested_json_is_a_bad_event(server):
    assert run(send_raw(server.port, b"[" * 30000 + b"\n"))[-1]["data"]["code"] == "BadEvent"
