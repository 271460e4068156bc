"""The voice list before the model is loaded: from config.json alone (a converted directory,
a checkpoint directory, an earlier conversion, or a hub checkpoint's config.json downloaded by
itself — mocked here: no network)."""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil

import huggingface_hub
import pytest

from wyoming_qwen3tts import __version__
from wyoming_qwen3tts.config import ServerConfig, VoiceConfig, apply_overrides
from wyoming_qwen3tts.model.manifest import read_converted
from wyoming_qwen3tts.server import loading
from wyoming_qwen3tts.server.models import ModelSourceError, conversion_dir
from wyoming_qwen3tts.server.voices import Catalogue, CatalogueError, build_info

REPO = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"


def config_for(source: str, data_dir, **settings) -> ServerConfig:
    config = apply_overrides(ServerConfig(), model=source, data_dir=str(data_dir))
    return dataclasses.replace(config, **settings)


def spec_of(config: ServerConfig):
    return loading.read_voice_spec(config.model_entries[0], config.model.data_path)


def preview_of(config: ServerConfig):
    return loading.preview_directory(config, loading.plan(config))


def voice_fields(spec) -> tuple:
    return spec.model_type, spec.model_size, dict(spec.languages), spec.speakers


@pytest.fixture
def no_download(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("config.json must not be downloaded here")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)


def test_a_converted_or_checkpoint_directory_gives_the_models_voices(converted_factory, checkpoint_factory,
                                                                     tmp_path, no_download):
    converted = converted_factory("tiny", "custom_voice", "int8")
    _, spec = read_converted(converted)
    for source in (converted, checkpoint_factory("tiny", "custom_voice")):
        assert voice_fields(spec_of(config_for(str(source), tmp_path))) == voice_fields(spec)


def test_the_preview_advertises_what_the_loaded_model_will(converted_factory, tmp_path, no_download):
    converted = converted_factory("tiny", "custom_voice", "int8")
    _, spec = read_converted(converted)
    voices = (VoiceConfig(name="narrator", speaker="ryan", language="en", description="Narrator"),)
    config = config_for(str(converted), tmp_path, voices=voices)
    preview = preview_of(config)
    assert preview is not None and preview.catalogues[0].preview
    assert build_info(preview, __version__) == build_info(Catalogue(spec, voices), __version__)
    assert len(preview.voices) == 10


@pytest.mark.parametrize("codec_weights", ["fp32", "int8"])
def test_a_hub_id_uses_an_earlier_conversion_without_downloading(converted_factory, tmp_path, no_download,
                                                                codec_weights):
    done = conversion_dir(REPO, tmp_path, "int8", codec_weights)  # (its codec does not change its voices)
    shutil.copytree(converted_factory("tiny", "custom_voice", "int8"), done)
    spec = spec_of(config_for(REPO, tmp_path))
    assert spec is not None and spec.model_type == "custom_voice" and len(spec.speakers) == 9


def test_a_hub_id_downloads_config_json_alone(checkpoint_factory, tmp_path, monkeypatch):
    asked = []

    def fake_download(repo, filename, revision=None, **kwargs):
        asked.append((repo, filename, revision))
        return str(checkpoint_factory("tiny", "custom_voice") / "config.json")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    spec = spec_of(config_for(f"{REPO}@abc123", tmp_path))
    assert asked == [(REPO, "config.json", "abc123")]
    assert spec.model_type == "custom_voice" and "english" in spec.supported_languages


def test_an_unreachable_hub_leaves_the_voice_list_unknown(tmp_path, monkeypatch, caplog):
    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with caplog.at_level(logging.WARNING, logger="wyoming-qwen3tts"):
        assert preview_of(config_for(REPO, tmp_path)) is None
    assert "not known before it is loaded" in caplog.text and "network unreachable" in caplog.text


def test_a_bad_source_or_default_voice_fails_before_any_download(tmp_path, converted_factory, no_download):
    with pytest.raises(ModelSourceError, match="neither a directory nor a hub repo id"):
        preview_of(config_for("not a model", tmp_path))
    config = config_for(str(converted_factory("tiny", "custom_voice", "int8")), tmp_path)
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, default_voice="nobody"))
    with pytest.raises(CatalogueError, match="nobody"):
        preview_of(config)


def test_a_base_model_lists_clone_voices_whose_recording_exists(checkpoint_factory, tmp_path, no_download):
    recording = tmp_path / "anna.wav"
    recording.write_bytes(b"RIFF")  # existence only: the recording is encoded when the model loads
    voices = (VoiceConfig(name="anna", ref_audio=str(recording), ref_text="Hello, this is Anna."),
              VoiceConfig(name="ghost", ref_audio=str(tmp_path / "missing.wav"), x_vector_only=True),
              VoiceConfig(name="designed", instruct="A calm voice."))
    config = config_for(str(checkpoint_factory("tiny", "base")), tmp_path, voices=voices)
    preview = preview_of(config)
    assert [v.name for v in preview.voices] == ["anna"]
    assert len(preview.errors) == 2
    info = build_info(preview, __version__).tts[0]
    assert [v.name for v in info.voices] == ["anna"] and info.voices[0].languages


def test_config_json_of_a_checkpoint_is_read_as_is(checkpoint_factory, tmp_path, no_download):
    """The spec parser is the model's own (model/spec.py): the preview and the loaded model
    cannot disagree on speakers or languages."""
    source = checkpoint_factory("tiny", "custom_voice")
    raw = json.loads((source / "config.json").read_text())
    spec = spec_of(config_for(str(source), tmp_path))
    assert {s.name for s in spec.speakers} == {n.lower() for n in raw["talker_config"]["spk_id"]}
