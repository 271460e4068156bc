"""The voice lab's third way over real HTTP (docs/HTTP.md, "Styled voices"): with a 1.7B
CustomVoice model served, a preset speaker and a style instruction make a voice that is
previewed (streamed), saved, listed, renamed and deleted, and is in Wyoming `describe` and
OpenAI's voice list at once; the engine is asked for that speaker with that instruct. Bad
input gets a clear 4xx and saves nothing; where only a 0.6B CustomVoice model is served,
styles are refused (409) and a saved styled voice is not served."""
from __future__ import annotations

import dataclasses
import json

import pytest
from lab_server import FRAME_BYTES, MAX_FRAMES, LabServer, encode, lab_config, recording, voice_names
from test_http_api import SENTENCE, WAV_HEADER, call, folders, form, speaks_over_wyoming, voices_dir

from wyoming_qwen3tts.config import ModelEntry, VoiceConfig
from wyoming_qwen3tts.server.loading import plan
from wyoming_qwen3tts.server.service import ServiceSlot
from wyoming_qwen3tts.server.voice_lab import VoiceLab
from wyoming_qwen3tts.server.voice_store import SavedVoice, VoiceStore

STYLE = "Whisper it, slowly and warmly."


def recorded(server: LabServer) -> list:
    """The voices the engine is asked to speak from now on (VoiceRequest)."""
    engine = server.engine
    asked, submit, open_utterance = [], engine.submit, engine.open

    def spy_submit(voice, *args, **kwargs):
        asked.append(voice)
        return submit(voice, *args, **kwargs)

    def spy_open(voice, *args, **kwargs):
        asked.append(voice)
        return open_utterance(voice, *args, **kwargs)

    engine.submit, engine.open = spy_submit, spy_open
    return asked


def listed(server: LabServer) -> dict[str, dict]:
    return {v["name"]: v for v in json.loads(call("GET", f"{server.url}/api/voices")[1])}


@pytest.fixture(scope="module")
def style_server(converted_factory, tmp_path_factory):
    """A tiny 1.7B CustomVoice model with a styled voice of its own in config.yaml."""
    config = lab_config(converted_factory("tiny-1.7b", "custom_voice", "int8"), tmp_path_factory.mktemp("data"),
                        (VoiceConfig("narrator", speaker="ryan", instruct="Speak slowly."),))
    server = LabServer(config)
    yield server
    server.close()


def test_info_offers_styles_and_the_speakers(style_server):
    info = json.loads(call("GET", f"{style_server.url}/api/info")[1])
    assert info["can_style"] and not info["can_clone"] and not info["can_design"]
    speakers = {s["speaker"]: s["description"] for s in info["speakers"]}
    assert "ryan" in speakers and speakers["ryan"].startswith("Ryan (English")
    assert listed(style_server)["narrator"]["kind"] == "config"


def test_a_styled_voice_previews_saves_speaks_and_is_listed_everywhere(style_server):
    asked = recorded(style_server)
    before = folders(style_server)
    status, audio, headers = call("POST", f"{style_server.url}/api/preview",
                                  json={"speaker": "Ryan", "instruct": STYLE, "text": SENTENCE})
    assert status == 200 and headers["Content-Type"] == "audio/wav", audio[:200]
    assert len(audio) == WAV_HEADER + MAX_FRAMES * FRAME_BYTES
    assert [(v.speaker, v.instruct) for v in asked] == [("ryan", STYLE)]
    assert folders(style_server) == before and "(preview)" not in voice_names(style_server.uri)

    status, body, _ = call("POST", f"{style_server.url}/api/voices", json={
        "name": "Soft Ryan", "speaker": "ryan", "instruct": STYLE, "language": "en", "description": "Ryan, softly"})
    assert status == 201, body
    voice = json.loads(body)
    assert (voice["kind"], voice["speaker"], voice["instruct"], voice["editable"]) == ("styled", "ryan", STYLE, True)
    assert voice["description"] == "Ryan, softly" and voice["languages"][0] == "en"
    assert "Soft Ryan" in voice_names(style_server.uri)  # Wyoming describe, at once
    openai = json.loads(call("GET", f"{style_server.url}/v1/audio/voices")[1])
    assert {"id": "Soft Ryan", "name": "Ryan, softly"}.items() <= next(
        v for v in openai["voices"] if v["id"] == "Soft Ryan").items()
    asked.clear()
    assert speaks_over_wyoming(style_server, "soft ryan")
    status, audio, _ = call("POST", f"{style_server.url}/api/speak", json={"voice": "Soft Ryan", "text": SENTENCE})
    assert status == 200 and len(audio) == WAV_HEADER + MAX_FRAMES * FRAME_BYTES
    assert {(v.speaker, v.instruct) for v in asked} == {("ryan", STYLE)}
    (folder,) = [voices_dir(style_server) / f for f in folders(style_server) - before]
    saved = json.loads((folder / "voice.json").read_text())
    assert (saved["speaker"], saved["instruct"]) == ("ryan", STYLE) and not (folder / "clip.wav").exists()
    assert style_server.kv_idle()


def test_a_styled_voice_is_renamed_and_deleted(style_server):
    assert call("POST", f"{style_server.url}/api/voices",
                json={"name": "Calm Aiden", "speaker": "aiden", "instruct": "Calm."})[0] == 201
    status, body, _ = call("PATCH", f"{style_server.url}/api/voices/calm aiden", json={"name": "Calmer Aiden"})
    assert status == 200 and json.loads(body)["kind"] == "styled"
    names = voice_names(style_server.uri)
    assert "Calmer Aiden" in names and "Calm Aiden" not in names and speaks_over_wyoming(style_server, "Calmer Aiden")
    assert call("DELETE", f"{style_server.url}/api/voices/narrator")[0] == 403  # config.yaml's
    assert call("DELETE", f"{style_server.url}/api/voices/Calmer Aiden")[0] == 204
    assert "Calmer Aiden" not in voice_names(style_server.uri) and "Calmer Aiden" not in listed(style_server)
    assert not [f for f in folders(style_server) if f.startswith("calm")]


@pytest.mark.parametrize("route", ["voices", "preview"])
@pytest.mark.parametrize("body,status,words", [
    ({"speaker": "ryan", "instruct": "   "}, 422, "give the style"),
    ({"speaker": "ryan"}, 422, "give the style"),
    ({"speaker": "ryan", "instruct": "x" * 501}, 422, "at most 500"),
    ({"speaker": "ryan", "instruct": "x" * 70_000}, 413, "over 64 KB"),
    ({"speaker": "ryan", "instruct": "Calm.\x07"}, 422, "control characters"),
    ({"speaker": "bob", "instruct": "Calm."}, 422, "unknown speaker 'bob'"),
    ({"speaker": 3, "instruct": "Calm."}, 422, "speaker must be a string"),
    ({"instruct": "Calm."}, 422, "name a preset speaker"),
    ({"speaker": "ryan", "instruct": "Calm.", "language": "klingon"}, 422, "not supported"),
], ids=["blank", "no-style", "oversized", "huge-body", "control", "unknown-speaker", "not-a-string",
        "no-speaker", "language"])
def test_bad_styles_are_refused_and_save_nothing(style_server, route, body, status, words):
    before, names = folders(style_server), voice_names(style_server.uri)
    got, answer, _ = call("POST", f"{style_server.url}/api/{route}",
                          json={"name": "Styled", "text": SENTENCE, **body})
    assert got == status and words in json.loads(answer)["error"], answer
    assert folders(style_server) == before and voice_names(style_server.uri) == names
    assert speaks_over_wyoming(style_server, "narrator") and style_server.kv_idle()


@pytest.mark.parametrize("fields,status,words", [
    ({"name": "ryan"}, 409, "taken"),  # a preset speaker's name
    ({"name": "Narrator"}, 409, "taken"),  # config.yaml's
    ({"name": "../x"}, 422, "a name starts with"),
    ({"name": ""}, 422, "give the voice a name"),
])
def test_styled_saves_with_bad_names(style_server, fields, status, words):
    before = folders(style_server)
    got, answer, _ = call("POST", f"{style_server.url}/api/voices",
                          json={"speaker": "ryan", "instruct": "Calm.", **fields})
    assert got == status and words in json.loads(answer)["error"], answer
    assert folders(style_server) == before


def test_a_speaker_and_a_recording_together_are_refused(style_server):
    before = folders(style_server)
    got, answer, _ = call("POST", f"{style_server.url}/api/voices", data=form(
        encode("wav", "pcm_s16le", recording(4.0)), name="Both", speaker="ryan", instruct="Calm."))
    assert got == 422 and "not both" in json.loads(answer)["error"]
    assert folders(style_server) == before


def test_styled_voices_at_start_and_on_a_0_6b_model(converted_factory, tmp_path):
    """Saved on a 1.7B model: served at the next start. The same data on a 0.6B CustomVoice
    model: styles are not offered and are refused (409), the saved voice is not served."""
    data = tmp_path / "data"
    first = LabServer(lab_config(converted_factory("tiny-1.7b", "custom_voice", "int8"), data, ()))
    try:
        assert call("POST", f"{first.url}/api/voices",
                    json={"name": "Eager Eric", "speaker": "eric", "instruct": "Eager and quick."})[0] == 201
    finally:
        first.close()
    again = LabServer(lab_config(converted_factory("tiny-1.7b", "custom_voice", "int8"), data, ()))
    try:
        asked = recorded(again)
        assert "Eager Eric" in voice_names(again.uri) and speaks_over_wyoming(again, "Eager Eric")
        assert {(v.speaker, v.instruct) for v in asked} == {("eric", "Eager and quick.")}
        assert listed(again)["Eager Eric"]["kind"] == "styled"
    finally:
        again.close()

    small = LabServer(lab_config(converted_factory("tiny", "custom_voice", "int8"), data, ()))
    try:
        info = json.loads(call("GET", f"{small.url}/api/info")[1])
        assert not info["can_style"] and info["speakers"] == []
        before = folders(small)
        for route in ("voices", "preview"):
            got, answer, _ = call("POST", f"{small.url}/api/{route}",
                                  json={"name": "Calm", "speaker": "ryan", "instruct": "Calm.", "text": SENTENCE})
            assert got == 409 and "1.7B CustomVoice" in json.loads(answer)["error"], answer
        got, answer, _ = call("POST", f"{small.url}/api/voices", json={"name": "Calm", "instruct": "Calm."})
        assert got == 422 and "no served model can make new voices" in json.loads(answer)["error"]
        assert folders(small) == before
        assert "Eager Eric" not in voice_names(small.uri) and "Eager Eric" not in listed(small)
        got, answer, _ = call("DELETE", f"{small.url}/api/voices/Eager Eric")
        assert got == 409 and "needs a 1.7B CustomVoice model" in json.loads(answer)["error"]
        assert folders(small) == before and speaks_over_wyoming(small, "ryan") and small.kv_idle()
    finally:
        small.close()


def test_with_both_sizes_styles_go_to_the_1_7b_model(converted_factory, tmp_path):
    """0.6B and 1.7B CustomVoice served together, both with Ryan: a configured voice with a
    style belongs to the 1.7B model alone (not "two models could serve it"), and the lab styles
    the 1.7B model's speakers, served there as ryan-1.7b."""
    small = converted_factory("tiny", "custom_voice", "int8")
    large = converted_factory("tiny-1.7b", "custom_voice", "int8")
    styled, plain = VoiceConfig("calm", speaker="ryan", instruct="Calm."), VoiceConfig("bob", speaker="ryan", model=0)
    config = dataclasses.replace(lab_config(small, tmp_path / "data", (styled, plain)),
                                 models=(ModelEntry(str(small)), ModelEntry(str(large))))
    config.validate()
    plans = plan(config)
    assert [p.voices for p in plans] == [(plain,), (styled,)] and plans[1].renames["ryan"] == "ryan-1.7b"
    slot = ServiceSlot(settings=config.server)
    lab = VoiceLab(slot, config)
    directory = lab.prepare(plans)
    assert directory is not None
    slot.publish(directory)
    assert slot.resolve("calm")[0] == 1
    info = lab.abilities()
    ryan = next(s for s in info["speakers"] if s["speaker"] == "ryan")
    assert info["can_style"] and "1.7B CustomVoice" in ryan["description"]


def test_a_damaged_styled_voice_does_not_stop_the_start(converted_factory, tmp_path):
    """A voice.json edited by hand with a number as its speaker: the server starts, serves the
    other saved voices and not that one (the catalogue used to raise AttributeError at start)."""
    data = tmp_path / "data"
    good = VoiceStore(data / "voices").add(SavedVoice("Calm Ryan", "", None, instruct="Calm.", speaker="ryan"),
                                           None, 0)
    bad = data / "voices" / "bad-1234"
    bad.mkdir()
    (bad / "voice.json").write_text(json.dumps({"name": "Bad", "speaker": 7, "instruct": "Calm."}))
    server = LabServer(lab_config(converted_factory("tiny-1.7b", "custom_voice", "int8"), data, ()))
    try:
        names = voice_names(server.uri)
        assert "Calm Ryan" in names and "Bad" not in names and "Bad" not in listed(server)
        assert speaks_over_wyoming(server, "Calm Ryan") and server.kv_idle()
        assert good.folder.is_dir() and bad.is_dir()  # left alone, for its owner to mend
    finally:
        server.close()
