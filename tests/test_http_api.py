"""The voice lab's API over real HTTP, next to Wyoming on one loop and engine, with a tiny Base
model (clones) and a tiny VoiceDesign model (designed voices): a saved voice is in `describe`
at once and speaks over Wyoming; bad input gets a clear 4xx, leaves no file and no KV block,
and Wyoming keeps serving."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from lab_server import FRAME_BYTES, MAX_FRAMES, REF_TEXT, LabServer, encode, lab_config, recording, voice_names
from signals import speech_like, write_float_wav

from wyoming_qwen3tts.client import ClientError, synthesize
from wyoming_qwen3tts.config import VoiceConfig
from wyoming_qwen3tts.server.upload import MAX_UPLOAD_BYTES

WAV_HEADER = 44
SENTENCE = f"{MAX_FRAMES} frames of this, please."


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def request(method: str, url: str, **kwargs) -> tuple[int, bytes, dict]:
    async with aiohttp.ClientSession() as session, session.request(method, url, **kwargs) as response:
        return response.status, await response.read(), dict(response.headers)


def call(method: str, url: str, **kwargs) -> tuple[int, bytes, dict]:
    return run(request(method, url, **kwargs))


def form(audio: bytes | None, filename: str = "clip.wav", **fields: str) -> aiohttp.FormData:
    data = aiohttp.FormData()
    for key, value in fields.items():
        data.add_field(key, value)
    if audio is not None:
        data.add_field("audio", audio, filename=filename, content_type="application/octet-stream")
    return data


def clip_wav(seconds: float = 4.0, seed: int = 1) -> bytes:
    return encode("wav", "pcm_s16le", recording(seconds, seed))


@pytest.fixture(scope="module")
def base_server(converted_factory, tmp_path_factory):
    ref = write_float_wav(tmp_path_factory.mktemp("ref") / "anna.wav", speech_like(3 * 24000, 0))
    config = lab_config(converted_factory("tiny", "base", "int8"), tmp_path_factory.mktemp("data"),
                        (VoiceConfig("anna", description="Anna", ref_audio=str(ref), ref_text=REF_TEXT),))
    changes: list[int] = []
    server = LabServer(config, on_change=lambda: changes.append(1))
    server.changes = changes  # type: ignore[attr-defined]
    yield server
    server.close()


def voices_dir(server: LabServer) -> Path:
    return server.config.model.data_path / "voices"


def folders(server: LabServer) -> set[str]:
    root = voices_dir(server)
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


def speaks_over_wyoming(server: LabServer, voice: str) -> bool:
    reply = run(synthesize(server.uri, SENTENCE, voice=voice))
    return len(reply.audio) == MAX_FRAMES * FRAME_BYTES


# ------------------------------------------------------------------------------ reading


def test_info_health_and_voices(base_server):
    status, body, _ = call("GET", f"{base_server.url}/api/info")
    info = json.loads(body)
    assert status == 200 and info["can_clone"] and not info["can_design"] and not info["asr"]
    assert info["limits"] == {"max_upload_mb": 20, "min_clip_s": 3, "max_clip_s": 30}
    assert "en" in info["languages"] and info["version"]
    assert call("GET", f"{base_server.url}/api/health")[:2] == (200, b'{"ready": true}')
    status, body, _ = call("GET", f"{base_server.url}/api/voices")
    anna = next(v for v in json.loads(body) if v["name"] == "anna")
    assert status == 200 and anna["kind"] == "config" and not anna["editable"] and anna["description"] == "Anna"


# ------------------------------------------------------------------------------ clone, speak, rename, delete


def test_a_saved_clone_is_described_at_once_and_speaks(base_server):
    changes = len(base_server.changes)
    status, body, _ = call("POST", f"{base_server.url}/api/voices", data=form(
        clip_wav(), name="Bob", transcript=REF_TEXT, language="en", description="Bob, warm"))
    assert status == 201, body
    voice = json.loads(body)
    assert voice["name"] == "Bob" and voice["kind"] == "saved" and voice["editable"]
    assert voice["description"] == "Bob, warm" and voice["languages"][0] == "en"
    assert "Bob" in voice_names(base_server.uri) and speaks_over_wyoming(base_server, "Bob")
    assert len(base_server.changes) == changes + 1  # Home Assistant is asked to refresh
    (folder,) = [voices_dir(base_server) / f for f in folders(base_server) if f.startswith("bob-")]
    saved = json.loads((folder / "voice.json").read_text())
    assert saved["transcript"] == REF_TEXT and (folder / "clip.wav").is_file()
    assert len(list(folder.glob("*.npz"))) == 1  # the encoders' features, kept (and deleted) with the voice
    # and over HTTP: a streamed WAV of unknown length
    status, audio, headers = call("POST", f"{base_server.url}/api/speak", json={"voice": "bob", "text": SENTENCE})
    assert status == 200 and headers["Content-Type"] == "audio/wav" and headers["Transfer-Encoding"] == "chunked"
    assert audio[:4] == b"RIFF" and audio[4:8] == b"\xff\xff\xff\xff" and audio[40:44] == b"\xff\xff\xff\xff"
    assert len(audio) == WAV_HEADER + MAX_FRAMES * FRAME_BYTES
    assert base_server.kv_idle()


def test_a_timbre_only_clone_needs_no_transcript(base_server):
    status, body, _ = call("POST", f"{base_server.url}/api/voices",
                           data=form(encode("mp3", "libmp3lame", recording(5.0, 2)), "clip.mp3", name="Timbre"))
    assert status == 201, body
    (folder,) = [voices_dir(base_server) / f for f in folders(base_server) if f.startswith("timbre-")]
    assert json.loads((folder / "voice.json").read_text())["transcript"] is None
    assert speaks_over_wyoming(base_server, "Timbre")


def test_a_preview_streams_and_saves_nothing(base_server):
    before = folders(base_server)
    for transcript in (REF_TEXT, ""):
        status, audio, headers = call("POST", f"{base_server.url}/api/preview", data=form(
            encode("ogg", "libopus", recording(4.0, 3)), "clip.ogg", transcript=transcript, text=SENTENCE))
        assert status == 200 and headers["Content-Type"] == "audio/wav", audio[:200]
        assert len(audio) == WAV_HEADER + MAX_FRAMES * FRAME_BYTES
    assert folders(base_server) == before and "(preview)" not in voice_names(base_server.uri)
    assert base_server.kv_idle()


def test_rename_and_delete(base_server):
    assert call("POST", f"{base_server.url}/api/voices", data=form(clip_wav(seed=4), name="Carol",
                                                                   transcript=REF_TEXT))[0] == 201
    status, body, _ = call("PATCH", f"{base_server.url}/api/voices/carol",
                           json={"name": "Caroline", "description": "Caroline, bright"})
    assert status == 200 and json.loads(body)["description"] == "Caroline, bright"
    names = voice_names(base_server.uri)
    assert "Caroline" in names and "Carol" not in names and speaks_over_wyoming(base_server, "Caroline")
    assert call("PATCH", f"{base_server.url}/api/voices/Caroline", json={"name": "ANNA"})[0] == 409
    assert call("PATCH", f"{base_server.url}/api/voices/Caroline", json={"name": "../x"})[0] == 422
    assert call("PATCH", f"{base_server.url}/api/voices/Caroline", json={"colour": "red"})[0] == 422
    assert call("PATCH", f"{base_server.url}/api/voices/anna", json={"description": "x"})[0] == 403
    assert call("DELETE", f"{base_server.url}/api/voices/anna")[0] == 403
    assert call("DELETE", f"{base_server.url}/api/voices/nobody")[0] == 404
    assert call("DELETE", f"{base_server.url}/api/voices/caroline")[0] == 204
    assert "Caroline" not in voice_names(base_server.uri)
    assert not [f for f in folders(base_server) if f.startswith("carol")]
    with pytest.raises(ClientError, match="unknown voice 'Caroline'"):
        run(synthesize(base_server.uri, SENTENCE, voice="Caroline"))


def test_concurrent_saves_of_one_name(base_server):
    async def both() -> list[int]:
        async with aiohttp.ClientSession() as session:
            async def save(seed: int) -> int:
                async with session.post(f"{base_server.url}/api/voices",
                                        data=form(clip_wav(seed=seed), name="Twin", transcript=REF_TEXT)) as r:
                    return r.status
            return sorted(await asyncio.gather(save(5), save(6)))

    assert run(both()) == [201, 409]
    assert len([f for f in folders(base_server) if f.startswith("twin-")]) == 1
    assert voice_names(base_server.uri).count("Twin") == 1


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("audio,fields,status,words", [
    (b"RIFF" + bytes(MAX_UPLOAD_BYTES + 1), {"name": "Big"}, 413, "over 20 MB"),
    (b"just text, no audio\n" * 50, {"name": "Text"}, 415, "not an audio file"),
    (b"PK\x03\x04" + bytes(4096), {"name": "Zip"}, 415, "not an audio file"),
    (b"", {"name": "Empty"}, 422, "empty"),
    ("truncated", {"name": "Cut"}, 422, "cannot be decoded"),
    ("short", {"name": "Short"}, 422, "at least 3 s"),
    ("long", {"name": "Long"}, 422, "at most 30 s"),
    ("ok", {"name": "../../etc/passwd"}, 422, "a name starts with"),
    ("ok", {"name": "a/b"}, 422, "a name starts with"),
    ("ok", {"name": ".."}, 422, "a name starts with"),
    ("ok", {"name": "x" * 41}, 422, "at most 40"),
    ("ok", {"name": ""}, 422, "give the voice a name"),
    ("ok", {"name": "ANNA"}, 409, "taken"),
    ("ok", {"name": "Lang", "language": "klingon"}, 422, "not supported"),
    (None, {"name": "NoAudio"}, 422, "send a recording"),
], ids=["oversized", "text", "zip", "empty", "truncated", "short", "long", "traversal", "slash", "dots",
        "long-name", "no-name", "taken", "language", "no-audio"])
def test_bad_saves_are_refused_and_leave_nothing(base_server, audio, fields, status, words):
    files = {"truncated": lambda: encode("ipod", "aac", recording(5.0))[:3000],
             "short": lambda: clip_wav(2.0), "long": lambda: encode("flac", "flac", recording(40.0)),
             "ok": lambda: clip_wav()}
    data = files[audio]() if isinstance(audio, str) else audio
    before, names = folders(base_server), voice_names(base_server.uri)
    got, body, _ = call("POST", f"{base_server.url}/api/voices", data=form(data, **fields))
    assert got == status and words in json.loads(body)["error"], body
    assert folders(base_server) == before and voice_names(base_server.uri) == names
    assert speaks_over_wyoming(base_server, "anna") and base_server.kv_idle()


@pytest.mark.parametrize("body,status", [
    ({"voice": "nobody", "text": "Hello."}, 404),
    ({"voice": "anna", "text": "x " * 5001}, 413),
    ({"voice": "anna", "text": "  "}, 422),
    ({"voice": "anna", "text": "Hello.", "language": "klingon"}, 422),
    ({"voice": 3, "text": "Hello."}, 422),
], ids=["unknown-voice", "too-long", "no-text", "language", "not-a-string"])
def test_bad_speak_requests_get_json_errors(base_server, body, status):
    got, answer, headers = call("POST", f"{base_server.url}/api/speak", json=body)
    assert got == status and headers["Content-Type"].startswith("application/json") and json.loads(answer)["error"]
    assert call("POST", f"{base_server.url}/api/speak", data=b"{not json",
                headers={"Content-Type": "application/json"})[0] == 400
    assert call("POST", f"{base_server.url}/api/speak", data=b"x" * 70_000,
                headers={"Content-Type": "application/json"})[0] == 413


def test_a_delete_during_a_synthesis_lets_it_finish(base_server):
    assert call("POST", f"{base_server.url}/api/voices", data=form(clip_wav(seed=7), name="Dora",
                                                                   transcript=REF_TEXT))[0] == 201
    text = " ".join(f"Sentence number {i} is here." for i in range(4))

    async def speak_and_delete() -> tuple[int, int]:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{base_server.url}/api/speak", json={"voice": "Dora", "text": text}) as r:
                received = len(await r.content.readexactly(WAV_HEADER + 100))
                async with session.delete(f"{base_server.url}/api/voices/Dora") as d:
                    deleted = d.status
                received += len(await r.read())
                return deleted, received

    deleted, received = run(speak_and_delete())
    assert deleted == 204 and received == WAV_HEADER + 4 * MAX_FRAMES * FRAME_BYTES
    assert "Dora" not in voice_names(base_server.uri) and not [f for f in folders(base_server) if "dora" in f]
    assert base_server.kv_idle()


def test_a_client_gone_mid_stream_frees_its_kv_blocks(base_server):
    text = " ".join(f"Sentence number {i} is here." for i in range(12))

    async def leave_early() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{base_server.url}/api/speak", json={"voice": "anna", "text": text}) as r:
                await r.content.readexactly(WAV_HEADER + 100)
                r.close()  # the connection goes

    aborted = base_server.engine.metrics().ends.get("aborted", 0)
    run(leave_early())
    assert base_server.kv_idle()
    assert base_server.engine.metrics().ends.get("aborted", 0) > aborted  # withdrawn, not spoken to the end
    assert speaks_over_wyoming(base_server, "anna")


# ------------------------------------------------------------------------------ restart


def test_saved_voices_load_at_start_and_half_written_ones_are_swept(converted_factory, tmp_path):
    ref = write_float_wav(tmp_path / "anna.wav", speech_like(3 * 24000, 0))
    config = lab_config(converted_factory("tiny", "base", "int8"), tmp_path / "data",
                        (VoiceConfig("anna", ref_audio=str(ref), ref_text=REF_TEXT),))
    first = LabServer(config)
    try:
        assert call("POST", f"{first.url}/api/voices", data=form(clip_wav(), name="Eve", transcript=REF_TEXT))[0] == 201
    finally:
        first.close()
    root = config.model.data_path / "voices"
    (root / ".partial-0badf00d").mkdir()
    (root / ".partial-0badf00d" / "clip.wav").write_bytes(b"half")
    second = LabServer(config)
    try:
        assert voice_names(second.uri) == ["anna", "Eve"] and speaks_over_wyoming(second, "Eve")
        assert not (root / ".partial-0badf00d").exists()
        eve = next(v for v in json.loads(call("GET", f"{second.url}/api/voices")[1]) if v["name"] == "Eve")
        assert eve["kind"] == "saved" and eve["editable"]
    finally:
        second.close()


# ------------------------------------------------------------------------------ designed voices


def test_designed_voices_with_a_voice_design_model(converted_factory, tmp_path):
    config = lab_config(converted_factory("tiny", "voice_design", "int8"), tmp_path / "data",
                        (VoiceConfig("calm", instruct="A calm, low voice."),))
    server = LabServer(config)
    try:
        info = json.loads(call("GET", f"{server.url}/api/info")[1])
        assert info["can_design"] and not info["can_clone"]
        status, audio, _ = call("POST", f"{server.url}/api/preview",
                                json={"instruct": "A warm voice, late thirties.", "text": SENTENCE})
        assert status == 200 and len(audio) == WAV_HEADER + MAX_FRAMES * FRAME_BYTES
        assert call("POST", f"{server.url}/api/voices", json={"name": "Warm"})[0] == 422  # no description
        status, body, _ = call("POST", f"{server.url}/api/voices", json={
            "name": "Warm", "instruct": "A warm voice, late thirties.", "language": "en", "description": "Warm"})
        assert status == 201 and json.loads(body)["kind"] == "designed", body
        assert voice_names(server.uri) == ["calm", "Warm"] and speaks_over_wyoming(server, "Warm")
        folder = next((config.model.data_path / "voices").glob("warm-*"))
        assert json.loads((folder / "voice.json").read_text())["instruct"] == "A warm voice, late thirties."
        assert call("DELETE", f"{server.url}/api/voices/warm")[0] == 204
        assert voice_names(server.uri) == ["calm"] and not folder.exists()
        assert server.kv_idle()
    finally:
        server.close()


def test_wyoming_keeps_serving_while_a_voice_is_cloned(base_server, monkeypatch):
    """The encoders run on a worker thread: made to take 3 s here, they hold no Wyoming request."""
    import threading
    import time

    real = base_server.lab._encoders
    started = threading.Event()

    def slow(service):
        started.set()
        time.sleep(3.0)
        return real(service)

    monkeypatch.setattr(base_server.lab, "_encoders", slow)
    result: list[int] = []
    saving = threading.Thread(target=lambda: result.append(call("POST", f"{base_server.url}/api/voices", data=form(
        clip_wav(seed=8), name="Slow", transcript=REF_TEXT))[0]))
    saving.start()
    assert started.wait(30)
    begin = time.monotonic()
    assert speaks_over_wyoming(base_server, "anna") and "Slow" not in voice_names(base_server.uri)
    assert call("GET", f"{base_server.url}/api/health")[0] == 200
    assert time.monotonic() - begin < 2.0 and saving.is_alive()
    saving.join(60)
    assert result == [201] and "Slow" in voice_names(base_server.uri)
