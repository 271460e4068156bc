"""Saved voices on disk (server/voice_store.py): names, folders, atomic writes, the sweep."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from wyoming_qwen3tts.server.api_error import ApiError
from wyoming_qwen3tts.server.voice_store import SavedVoice, VoiceStore, check_name, slug

CLIP = np.zeros(24000 * 3, np.float32)


@pytest.mark.parametrize("name", ["Anna", "Frau Müller", "小明", "O'Brien-2", "v1.0", "a"])
def test_good_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", " Anna", "Anna ", "../x", "a/b", "a\\b", "..", ".hidden", "-x", "_x",
                                  "x" * 41, "tab\tname", "nul\x00", "emoji 🎙"])
def test_bad_names(name):
    with pytest.raises(ApiError) as caught:
        check_name(name)
    assert caught.value.status == 422


def test_folders_are_slugs_with_random_hex(tmp_path):
    store = VoiceStore(tmp_path / "voices")
    assert slug("Frau Müller") == "frau-muller" and slug("小明") == "voice"
    a = store.add(SavedVoice("小明", "Xiaoming", "zh", transcript="你好"), CLIP, 0)
    b = store.add(SavedVoice("Frau Müller", "", None), CLIP, 1)
    assert a.folder.parent == b.folder.parent == tmp_path / "voices"
    assert a.folder.name.startswith("voice-") and b.folder.name.startswith("frau-muller-")
    assert json.loads((a.folder / "voice.json").read_text())["name"] == "小明"
    assert [v.name for v in store.load()] == ["小明", "Frau Müller"]  # oldest first
    assert b.config().x_vector_only and a.config().ref_text == "你好"


def test_the_cap(tmp_path):
    store = VoiceStore(tmp_path / "voices", cap=1)
    store.add(SavedVoice("One", "", None), CLIP, 0)
    with pytest.raises(ApiError, match="1 voices are saved already") as caught:
        store.add(SavedVoice("Two", "", None), CLIP, 1)
    assert caught.value.status == 409 and len(os.listdir(tmp_path / "voices")) == 1


def test_update_and_remove(tmp_path):
    store = VoiceStore(tmp_path / "voices")
    voice = store.add(SavedVoice("Calm", "", None, instruct="A calm voice."), None, 0)
    assert not (voice.folder / "clip.wav").exists()
    store.update(SavedVoice("Calmer", "Calmer", "en", instruct="A calm voice.", created=voice.created,
                            folder=voice.folder))
    (loaded,) = store.load()
    assert (loaded.name, loaded.language, loaded.kind) == ("Calmer", "en", "designed")
    assert [p.name for p in voice.folder.iterdir()] == ["voice.json"]  # no temporary file left
    store.remove(loaded)
    assert os.listdir(tmp_path / "voices") == []


def test_the_sweep_and_unreadable_voices(tmp_path, caplog):
    root = tmp_path / "voices"
    store = VoiceStore(root)
    good = store.add(SavedVoice("Good", "", None), CLIP, 0)
    for name in (".partial-00000000", ".trash-00000000"):
        (root / name).mkdir()
        (root / name / "clip.wav").write_bytes(b"x")
    (root / "broken-1234").mkdir()
    (root / "broken-1234" / "voice.json").write_text("{not json")
    (root / "nameless-1234").mkdir()
    (root / "nameless-1234" / "voice.json").write_text(json.dumps({"name": "../../etc"}))
    (root / "noclip-1234").mkdir()
    (root / "noclip-1234" / "voice.json").write_text(json.dumps({"name": "NoClip"}))
    assert [v.folder for v in store.load()] == [good.folder]
    assert sorted(os.listdir(root)) == sorted([good.folder.name, "broken-1234", "nameless-1234", "noclip-1234"])
    assert caplog.text.count("cannot be read") == 3


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    root = tmp_path / "voices"
    store = VoiceStore(root)
    store.add(SavedVoice("Kept", "", None), CLIP, 0)
    before = sorted(os.listdir(root))

    def disk_full(path, pcm, rate):
        path.write_bytes(b"RIFF half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("wyoming_qwen3tts.server.voice_store.write_wav", disk_full)
    with pytest.raises(ApiError, match="No space left") as caught:
        store.add(SavedVoice("Lost", "", None), CLIP, 1)
    assert caught.value.status == 507 and sorted(os.listdir(root)) == before
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ApiError) as caught:  # the voices folder cannot even be made
        VoiceStore(tmp_path / "file" / "voices").add(SavedVoice("Any", "", None), CLIP, 0)
    assert caught.value.status == 507


def test_a_styled_voice_is_a_speaker_and_its_style(tmp_path):
    store = VoiceStore(tmp_path / "voices")
    voice = store.add(SavedVoice("Calm Ryan", "", "en", instruct="Speak calmly.", speaker="ryan"), None, 0)
    (loaded,) = store.load()
    assert loaded.kind == "styled" and not (voice.folder / "clip.wav").exists()
    config = loaded.config()
    assert (config.speaker, config.instruct, config.ref_audio) == ("ryan", "Speak calmly.", None)
    data = json.loads((voice.folder / "voice.json").read_text())
    (voice.folder / "voice.json").write_text(json.dumps({**data, "instruct": None}))  # a style lost: not served
    assert store.load() == []


@pytest.mark.parametrize("fields", [
    {"speaker": 5, "instruct": "Calm."},
    {"speaker": "ryan", "instruct": ["Calm."]},
    {"speaker": "ryan", "instruct": "x" * 501},
    {"speaker": "ryan", "instruct": "Calm.\x07"},
    {"speaker": "", "instruct": "Calm."},
    {"instruct": ""},
    {"instruct": "A calm voice.", "language": 7},
    {"instruct": "A calm voice.", "description": {"text": "calm"}},
    {"instruct": "A calm voice.", "description": "x" * 201},
    {"transcript": 12},
], ids=["speaker-number", "instruct-list", "instruct-too-long", "instruct-control", "speaker-empty",
        "instruct-empty", "language-number", "description-object", "description-too-long", "transcript-number"])
def test_a_voice_json_is_read_with_the_bounds_of_a_save(tmp_path, caplog, fields):
    """A voice.json edited by hand (or restored from an old backup) is read as a save checks its
    fields: one that is not text, too long, with control characters or without its style is
    not served, logged, and does not take the server's start down with it (a number as speaker
    or language used to escape as AttributeError from the catalogue)."""
    store = VoiceStore(tmp_path / "voices")
    good = store.add(SavedVoice("Good", "", "en", instruct="Calm.", speaker="ryan"), None, 0)
    folder = tmp_path / "voices" / "bad-1234"
    folder.mkdir()
    (folder / "voice.json").write_text(json.dumps({"name": "Bad", **fields}))
    if "transcript" in fields:
        (folder / "clip.wav").write_bytes(b"RIFF")
    assert [v.folder for v in store.load()] == [good.folder]
    assert "bad-1234 cannot be read" in caplog.text


def test_what_a_save_took_is_read_back(tmp_path):
    """The read's bounds are a save's, no stricter: a language a save took (the lab checks it
    against the model's, "en-..." is English whatever follows) and a full-length style."""
    store = VoiceStore(tmp_path / "voices")
    voice = store.add(SavedVoice("Long", "d" * 200, "en-" + "x" * 60, instruct="s" * 500, speaker="ryan"), None, 0)
    assert [v.folder for v in store.load()] == [voice.folder]
