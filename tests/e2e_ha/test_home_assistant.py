"""A real Home Assistant against the server, driven as a user drives it (issue 16, item 6).

Opt-in: `python -m pytest -m e2e tests/e2e_ha` (minutes). The first run installs Home
Assistant core (install_ha.py: its own Python 3.13 venv under /work/cache, HA's package
constraints); a failed install fails the tests. Everything runs on loopback with free ports:
our server (`wyoming-qwen3tts`, a tiny synthetic checkpoint, f32, greedy) as a subprocess, HA
as a subprocess with a fresh config directory, onboarded through its onboarding API (the
owner a new user creates), integrations added through config flows, audio fetched through
`/api/tts_get_url`, an assist pipeline run over the websocket API with a custom conversation
agent (custom_components/e2e_agent) that streams its reply through the chat log.

Two TTS entities point at the same server: one directly (HA sees
supports_synthesize_streaming and uses its streaming reader: synthesize-start/chunk/stop, up
to synthesize-stopped — also for plain tts_get_url), one through OneShotProxy, which hides
streaming support so HA uses its one-shot reader (`synthesize`, up to the first audio-stop),
the path of every HA before 2025.7 and of most other Wyoming clients.

The tests share one HA and one server and run in file order (a server restart and an HA
restart come last).
"""
from __future__ import annotations

import asyncio
import http.client
import itertools
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import install_ha
import pytest
from ha_harness import (
    FRAME_S,
    LOOPBACK,
    MAX_FRAMES,
    MAX_TEXT_CHARS,
    HomeAssistant,
    OneShotProxy,
    Server,
    decode_seconds,
    wait_until,
    wav_seconds,
)
from ha_harness import http as http_request

pytestmark = pytest.mark.e2e

FAST_S = 15.0  # "returns within seconds": HA answers a failed request well before this
FETCH_TIMEOUT_S = 45.0  # bounds every audio fetch (a hang shows up as a failure at this point)
SETUP_TIMEOUT_S = 300.0  # an entry set up while the model loads: HA's retry backoff included
LOADING_BOUND_S = 45.0  # a request made while the model loads ends by then (the server waits up to 30 s)
LANGUAGE = "en"
VOICE = "ryan"


# --- fixtures ---

@pytest.fixture(scope="module")
def workdir(request: pytest.FixtureRequest):
    """Our own directory, not pytest's numbered ones (other pytest sessions on the machine
    prune those while this module runs for minutes). Kept when a test failed, for its logs."""
    path = Path(tempfile.mkdtemp(prefix="qwen3tts-e2e-ha-"))
    failed = request.session.testsfailed

    def interrupted(signum, frame):  # SIGTERM (a timeout) tears down like ^C: HA and the servers stop
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        yield path
    finally:
        signal.signal(signal.SIGTERM, previous)
    if request.session.testsfailed == failed:
        shutil.rmtree(path, ignore_errors=True)
    else:
        print(f"\nlogs of the servers and of Home Assistant: {path}")


@pytest.fixture(scope="module")
def ha_install() -> install_ha.HaInstall:
    return install_ha.ensure()  # InstallError fails every test: no skip


@pytest.fixture(scope="module")
def checkpoint(workdir: Path) -> Path:
    from qwen3tts_tools.synthetic.writer import write_checkpoint
    return write_checkpoint(workdir / "checkpoint", "tiny", "custom_voice")


@pytest.fixture(scope="module")
def converted(checkpoint: Path, workdir: Path) -> Path:
    from wyoming_qwen3tts.convert.pipeline import convert
    return convert(checkpoint, workdir / "converted", weights="int8")


@pytest.fixture(scope="module")
def server(converted: Path, workdir: Path):
    srv = Server(converted, workdir / "server").start()
    try:
        srv.wait_loaded(240)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def home_assistant(ha_install, workdir: Path):
    ha = HomeAssistant(ha_install.python, ha_install.ffmpeg, workdir / "ha-config")
    try:
        ha.start()
        yield ha
    finally:
        ha.stop()


@dataclass
class Speaker:
    entry_id: str
    entity_id: str


def add_wyoming(ha: HomeAssistant, port: int, timeout: float = 60) -> Speaker:
    """Settings > Devices & services > Add integration > Wyoming Protocol, host and port;
    a user retries while the form says it cannot connect."""
    def attempt():
        result = ha.config_flow("wyoming", {"host": LOOPBACK, "port": port})
        return result if result["type"] == "create_entry" else None

    result = wait_until(attempt, timeout, f"the wyoming config flow for port {port}", interval=3)
    entry_id = result["result"]["entry_id"]
    entity = wait_until(lambda: ha.entity_of(entry_id, "tts"), 60, "the wyoming tts entity")
    return Speaker(entry_id, entity)


@pytest.fixture(scope="module")
def speaker(home_assistant, server) -> Speaker:
    return add_wyoming(home_assistant, server.port)


@dataclass
class OneShotSpeaker(Speaker):
    proxy: OneShotProxy


@pytest.fixture(scope="module")
def one_shot_speaker(home_assistant, server):
    proxy = OneShotProxy(server.port).start()
    try:
        speaker = add_wyoming(home_assistant, proxy.port)
        yield OneShotSpeaker(speaker.entry_id, speaker.entity_id, proxy)
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def agent(home_assistant) -> str:
    result = home_assistant.config_flow("e2e_agent", None)
    assert result["type"] == "create_entry", result
    return wait_until(lambda: home_assistant.entity_of(result["result"]["entry_id"], "conversation"), 60,
                      "the e2e agent's conversation entity")


# --- helpers ---

def fetch(ha: HomeAssistant, engine: str, message: str, options: dict | None = None,
          timeout: float = FETCH_TIMEOUT_S):
    """tts_get_url, then GET the URL as a media player does: (status, body, seconds from the
    tts_get_url call to the end of the GET, headers); status None when the GET timed out."""
    started = time.monotonic()
    reply = ha.tts_url(engine, message, options=options, language=LANGUAGE)
    assert reply.status == 200, f"tts_get_url: {reply.status} {reply.body[:300]!r}"
    path = reply.json()["path"]
    conn = http.client.HTTPConnection(LOOPBACK, ha.port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        return response.status, body, time.monotonic() - started, dict(response.getheaders())
    except TimeoutError:
        return None, b"", time.monotonic() - started, {}
    finally:
        conn.close()


def direct_seconds(server: Server, text: str, voice: str = VOICE) -> float:
    """Seconds of audio the server gives a Wyoming client directly (greedy: the same audio)."""
    from wyoming_qwen3tts.client import synthesize
    return asyncio.run(synthesize(server.uri, text, voice=voice, timeout=60)).seconds


TAKES = itertools.count(1)


def speaks(ha: HomeAssistant, engine: str, ffmpeg: Path, text: str) -> float:
    """Seconds of MP3 audio HA serves for `text` (0 if none). Each call says something new:
    HA keeps every result in its memory cache (also a failed one) and would serve it again."""
    text = f"{text} Take {next(TAKES)}."
    status, body, _, _ = fetch(ha, engine, text, {"voice": VOICE}, timeout=60)
    if status != 200 or not body:
        return 0.0
    try:
        return decode_seconds(ffmpeg, body)
    except ValueError:
        return 0.0


def entry_state(ha: HomeAssistant, entry_id: str) -> str:
    return ha.entry(entry_id)["state"]


# --- tests ---

def test_an_entry_set_up_while_the_model_loads_works_without_a_reload(home_assistant, checkpoint, ha_install,
                                                                      workdir):
    """A user adds the server while it still converts and compiles its model (a first start):
    the entry must end up speaking without the user reloading anything. (The server may make
    HA wait — the form's "cannot connect", a setup retry — but must not hand it an empty
    voice list, which breaks the entity for good.)"""
    ha = home_assistant
    slow = Server(checkpoint, workdir / "slow").start()  # a checkpoint: converted into a fresh data dir first
    entry_id = None
    try:
        wait_until(slow.listening, 60, "the loading server listening", alive=slow.alive)
        assert not slow.loaded(), "the model loaded before HA could be pointed at it: no race to test"
        attempts, created_while_loading = 0, False

        def attempt():
            nonlocal attempts, created_while_loading
            attempts += 1
            result = ha.config_flow("wyoming", {"host": LOOPBACK, "port": slow.port})
            if result["type"] == "create_entry":
                created_while_loading = not slow.loaded()
                return result
            assert result["type"] == "form" and result.get("errors") == {"base": "cannot_connect"}, result
            return None

        entry_id = wait_until(attempt, SETUP_TIMEOUT_S, "adding the integration", interval=3,
                              alive=slow.alive)["result"]["entry_id"]
        print(f"entry created after {attempts} attempt(s), while loading: {created_while_loading}")

        tries: list[tuple[float, bool]] = []  # (seconds, loaded when it ended) of each request HA made

        def works():
            entity = ha.entity_of(entry_id, "tts")
            if not entity:
                return False
            started = time.monotonic()
            seconds = speaks(ha, entity, ha_install.ffmpeg, "Hello from an entry added early.")
            tries.append((time.monotonic() - started, slow.loaded()))
            return seconds > 0.3

        wait_until(works, SETUP_TIMEOUT_S, "the early entry speaking (no reload)", interval=3, alive=slow.alive)
        print("requests while loading (s, loaded at the end): "
              + ", ".join(f"{t:.1f} {'loaded' if done else 'loading'}" for t, done in tries))
        # a request that comes while the model loads waits for it (bounded) or ends with an error
        assert all(t < LOADING_BOUND_S for t, _ in tries), tries
        entity = ha.entity_of(entry_id, "tts")
        ws = ha.ws()
        try:
            engine = ws.call({"type": "tts/engine/get", "engine_id": entity})["provider"]
        finally:
            ws.close()
        assert LANGUAGE in engine["supported_languages"], engine
        assert entry_state(ha, entry_id) == "loaded"
    finally:
        if entry_id is not None:  # the later tests use their own entries
            http_request("DELETE", f"{ha.url}/api/config/config_entries/entry/{entry_id}", token=ha.token)
        slow.stop()


def test_voices_are_listed_with_their_descriptions(home_assistant, speaker, server):
    info = server.info()
    (program,) = info["tts"]
    ws = home_assistant.ws()
    try:
        engine = ws.call({"type": "tts/engine/get", "engine_id": speaker.entity_id})["provider"]
        voices = ws.call({"type": "tts/engine/voices", "engine_id": speaker.entity_id, "language": LANGUAGE})
    finally:
        ws.close()
    languages = {lang for v in program["voices"] for lang in v["languages"]}
    assert set(engine["supported_languages"]) == languages
    expected = sorted(((v["name"], v["description"] or v["name"]) for v in program["voices"]
                       if LANGUAGE in v["languages"]), key=lambda nv: nv[1])
    assert [(v["voice_id"], v["name"]) for v in voices["voices"]] == expected
    assert (VOICE, next(d for n, d in expected if n == VOICE)) in expected


@pytest.mark.parametrize("path", ["streaming", "one-shot"])
def test_audio_through_tts_get_url(home_assistant, speaker, one_shot_speaker, server, ha_install, path):
    """MP3 (HA's default) and WAV come out, as long as the server's own audio for the text."""
    engine = speaker.entity_id if path == "streaming" else one_shot_speaker.entity_id
    text = "Hello from Home Assistant. This is the second sentence."
    expected = direct_seconds(server, text)
    assert 0.5 <= expected <= 2 * MAX_FRAMES * FRAME_S + 0.2, expected  # two sentences, each capped

    status, mp3, took, headers = fetch(home_assistant, engine, text, {"voice": VOICE})
    assert status == 200, (status, mp3[:200])
    assert headers.get("Content-Type") == "audio/mpeg"
    assert mp3[:3] == b"ID3" or (mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0), mp3[:16]
    assert abs(decode_seconds(ha_install.ffmpeg, mp3) - expected) < 0.15

    status, wav, _, headers = fetch(home_assistant, engine, text, {"voice": VOICE, "preferred_format": "wav"})
    assert status == 200, (status, wav[:200])
    seconds, rate = wav_seconds(wav)
    assert abs(seconds - expected) < 0.05, (seconds, expected, rate)
    assert abs(decode_seconds(ha_install.ffmpeg, wav) - expected) < 0.05
    if path == "one-shot":  # HA really took its one-shot path
        events = one_shot_speaker.proxy.client_events
        assert "synthesize" in events and "synthesize-start" not in events, events


def test_a_streamed_reply_is_spoken_before_the_agent_finishes(home_assistant, speaker, agent, ha_install):
    """An assist pipeline whose agent streams ~6 s of reply: HA starts streaming text to the
    server once more than 60 characters have come (assist_pipeline STREAM_RESPONSE_CHARS,
    HA >= 2025.7), and audio must flow to the listener before the agent has finished."""
    ha = home_assistant
    ws = ha.ws()
    try:
        pipeline = ws.call({"type": "assist_pipeline/pipeline/create", "name": "e2e streaming",
                            "language": LANGUAGE, "conversation_engine": agent, "conversation_language": LANGUAGE,
                            "stt_engine": None, "stt_language": None, "tts_engine": speaker.entity_id,
                            "tts_language": LANGUAGE, "tts_voice": VOICE, "wake_word_entity": None,
                            "wake_word_id": None})
        run = ws.send({"type": "assist_pipeline/run", "start_stage": "intent", "end_stage": "tts",
                       "input": {"text": "stream"}, "pipeline": pipeline["id"]})
        received: list[tuple[float, int]] = []  # (time, bytes so far) of the audio fetch
        chunks: list[bytes] = []
        times: dict[str, float] = {}
        events: list[dict] = []
        fetcher: threading.Thread | None = None
        deadline = time.monotonic() + 90
        while "run-end" not in times:
            assert time.monotonic() < deadline, f"the pipeline did not end; events: {[e['type'] for e in events]}"
            message = ws.ws.recv(deadline - time.monotonic())
            if message.get("id") != run:
                continue
            if message["type"] == "result":
                assert message["success"], message
                continue
            event = message["event"]
            events.append(event)
            times.setdefault(event["type"], time.monotonic())
            assert event["type"] != "error", event
            if event["type"] == "intent-progress" and (event.get("data") or {}).get("tts_start_streaming"):
                times["tts_start_streaming"] = time.monotonic()
            if event["type"] == "run-start":
                output = event["data"]["tts_output"]
                assert output["stream_response"] is True, output

                def read(url: str = output["url"]) -> None:  # a media player fetching the stream
                    conn = http.client.HTTPConnection(LOOPBACK, ha.port, timeout=60)
                    try:
                        conn.request("GET", url)
                        response = conn.getresponse()
                        while data := response.read1(65536):
                            chunks.append(data)
                            received.append((time.monotonic(), sum(map(len, chunks))))
                    finally:
                        conn.close()

                fetcher = threading.Thread(target=read, daemon=True)
                fetcher.start()
        assert fetcher is not None
        fetcher.join(60)
        assert not fetcher.is_alive(), "the audio stream did not end"
    finally:
        ws.close()
    agent_s = times["intent-end"] - times["intent-start"]
    assert agent_s > 4.5, f"the agent streamed for {agent_s:.1f} s only"
    assert "tts_start_streaming" in times, [e["type"] for e in events]
    audio = b"".join(chunks)
    total = decode_seconds(ha_install.ffmpeg, audio)
    assert total > 5 * 10 * FRAME_S, total  # six sentences were spoken
    before = max((n for t, n in received if t < times["intent-end"]), default=0)
    early = decode_seconds(ha_install.ffmpeg, audio[:before]) if before else 0.0
    first = min(t for t, n in received) - times["intent-start"] if received else None
    print(f"agent {agent_s:.1f} s; first audio bytes {first:.2f} s after intent-start; "
          f"{early:.2f} s of {total:.2f} s audio received before the agent finished")
    assert early >= 1.0, f"only {early:.2f} s of audio arrived before the agent finished ({agent_s:.1f} s)"


@pytest.mark.parametrize("path", ["one-shot", "streaming"])
@pytest.mark.parametrize("case", ["unknown voice", "text too long"])
def test_a_failed_request_ends_within_seconds(home_assistant, speaker, one_shot_speaker, server, path, case):
    """An unknown voice or a text over max_text_chars: HA must get an answer at once (the
    server's error, then the end of the response), not wait for a timeout."""
    engine = one_shot_speaker.entity_id if path == "one-shot" else speaker.entity_id
    text, options = "Nobody speaks this.", {"voice": VOICE}
    if case == "unknown voice":
        options = {"voice": "no_such_voice"}
    else:
        text = "Far too long. " * (MAX_TEXT_CHARS // 14 + 10)
    status, body, took, _ = fetch(home_assistant, engine, text, options, timeout=FETCH_TIMEOUT_S)
    print(f"{path} {case}: HTTP {status} after {took:.1f} s, {len(body)} bytes")
    assert status is not None and took < FAST_S, (
        f"{path} {case}: HA was still waiting after {took:.0f} s (the response never ended)")
    assert server.info() is not None  # the server is fine
    log = server.log_text().lower()
    reason = "VoiceNotFound" if case == "unknown voice" else "TextTooLong"
    assert reason.lower() in log, f"the server did not log why it refused the request ({reason})"


@pytest.mark.parametrize("path", ["one-shot", "streaming"])
@pytest.mark.parametrize("text", ["🙂", "..."])
def test_nothing_speakable_gives_playable_audio(home_assistant, speaker, one_shot_speaker, ha_install, path,
                                                text):
    engine = one_shot_speaker.entity_id if path == "one-shot" else speaker.entity_id
    status, body, took, _ = fetch(home_assistant, engine, text, {"voice": VOICE})
    assert took < FAST_S, took
    assert status == 200, f"{path} {text!r}: HTTP {status} {body[:200]!r}"
    seconds = decode_seconds(ha_install.ffmpeg, body)
    print(f"{path} {text!r}: {len(body)} bytes, {seconds:.3f} s of audio")
    assert 0.05 <= seconds <= 2.0, f"{path} {text!r}: {len(body)} bytes, {seconds:.3f} s of audio"


def test_a_streamed_reply_with_nothing_speakable_gives_playable_audio(home_assistant, speaker, agent, ha_install):
    """The pipeline's streaming path (70 emoji streamed by the agent)."""
    ha = home_assistant
    ws = ha.ws()
    try:
        pipelines = ws.call({"type": "assist_pipeline/pipeline/list"})["pipelines"]
        pipeline = next((p for p in pipelines if p["name"] == "e2e streaming"), None) or ws.call({
            "type": "assist_pipeline/pipeline/create", "name": "e2e streaming", "language": LANGUAGE,
            "conversation_engine": agent, "conversation_language": LANGUAGE, "stt_engine": None,
            "stt_language": None, "tts_engine": speaker.entity_id, "tts_language": LANGUAGE,
            "tts_voice": VOICE, "wake_word_entity": None, "wake_word_id": None})
        run = ws.send({"type": "assist_pipeline/run", "start_stage": "intent", "end_stage": "tts",
                       "input": {"text": "emoji-stream"}, "pipeline": pipeline["id"]})
        url, streamed, done = None, False, False
        deadline = time.monotonic() + 60
        while not done:
            assert time.monotonic() < deadline, "the pipeline did not end"
            message = ws.ws.recv(deadline - time.monotonic())
            if message.get("id") != run or message["type"] != "event":
                continue
            event = message["event"]
            assert event["type"] != "error", event
            if event["type"] == "run-start":
                url = event["data"]["tts_output"]["url"]
            streamed |= bool((event.get("data") or {}).get("tts_start_streaming"))
            done = event["type"] == "run-end"
    finally:
        ws.close()
    assert streamed and url
    conn = http.client.HTTPConnection(LOOPBACK, ha.port, timeout=FETCH_TIMEOUT_S)
    try:
        conn.request("GET", url)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 200
    seconds = decode_seconds(ha_install.ffmpeg, body) if body else 0.0
    assert 0.05 <= seconds <= 2.0, f"{len(body)} bytes, {seconds:.3f} s of audio"


def test_a_server_restart_is_survived(home_assistant, speaker, one_shot_speaker, server, ha_install):
    ha = home_assistant
    assert speaks(ha, speaker.entity_id, ha_install.ffmpeg, "Before the restart.") > 0.3
    assert server.stop() == 0, server.process.tail()
    for engine in (speaker.entity_id, one_shot_speaker.entity_id):  # server down: a quick failure
        status, _, took, _ = fetch(ha, engine, "While the server is down.", {"voice": VOICE})
        assert status is not None and status != 200 and took < FAST_S, (engine, status, took)
    stopped = server.process.tail(5).lower()
    assert "stopped" in stopped, f"the server did not log its shutdown:\n{stopped}"
    server.start()
    for engine in (speaker.entity_id, one_shot_speaker.entity_id):
        wait_until(lambda engine=engine: speaks(ha, engine, ha_install.ffmpeg, "After the restart.") > 0.3, 240,
                   f"{engine} speaking after the server's restart (no reload)", interval=2, alive=server.alive)
    assert entry_state(ha, speaker.entry_id) == "loaded"


def test_home_assistant_restarting_while_the_server_loads(home_assistant, speaker, server, checkpoint, ha_install):
    """HA restarts while the server restarts too (an add-on update, a host reboot), and the
    server is slower: HA sets the existing entry up while the model loads. It must speak
    afterwards without a reload."""
    ha = home_assistant
    assert ha.stop() == 0, ha.process.tail()
    server.stop()
    server.model = checkpoint  # the server's first start after an update: convert, then compile (~1 min)
    server.data_dir = server.workdir / "data-after-update"
    server.start()
    ha.start()
    loaded_before_ha = server.loaded()
    state = entry_state(ha, speaker.entry_id)
    print(f"after HA's start: entry {state}, server loaded: {loaded_before_ha}")
    if loaded_before_ha:
        pytest.fail("the server loaded before HA set the entry up: the race was not reproduced")
    wait_until(lambda: speaks(ha, speaker.entity_id, ha_install.ffmpeg, "After both restarts.") > 0.3,
               SETUP_TIMEOUT_S, "the entry speaking after HA's restart (no reload)", interval=3, alive=server.alive)
    ws = ha.ws()
    try:
        engine = ws.call({"type": "tts/engine/get", "engine_id": speaker.entity_id})["provider"]
    finally:
        ws.close()
    assert LANGUAGE in engine["supported_languages"], engine
