"""The voice catalogue (server/voices.py) on real specs of synthetic checkpoints."""
from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest
from wyoming.info import Info

from wyoming_qwen3tts.clone.cloner import ClonePrompt
from wyoming_qwen3tts.config import VoiceConfig
from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.prompt import VoiceRequest, build_prompt
from wyoming_qwen3tts.model.tokenizer import TextTokenizer
from wyoming_qwen3tts.server.voices import (
    LANGUAGE_TAGS,
    Catalogue,
    CatalogueError,
    LanguageNotSupported,
    VoiceNotFound,
    build_info,
    model_language,
)

ALL_TAGS = {"zh", "en", "ja", "ko", "de", "fr", "ru", "pt", "es", "it"}
NATIVE = {"aiden": "en", "ryan": "en", "ono_anna": "ja", "sohee": "ko", "vivian": "zh", "serena": "zh",
          "uncle_fu": "zh", "eric": "zh", "dylan": "zh"}
DESIGN = VoiceConfig(name="narrator", description="Narrator", language="de-DE", instruct="A calm, deep male voice.")
CLONE = VoiceConfig(name="anna", ref_audio="/voices/anna.wav", ref_text="Hello, this is Anna.")


@pytest.fixture(scope="module")
def models(checkpoint_factory):
    """(spec, tokenizer) by (preset, variant)."""
    out = {}
    for key in [("tiny", "custom_voice"), ("tiny-1.7b", "custom_voice"), ("tiny", "voice_design"), ("tiny", "base")]:
        directory = checkpoint_factory(*key)
        out[key] = (Checkpoint(directory).spec, TextTokenizer.from_dir(directory))
    return out


@pytest.fixture
def custom(models):
    return models[("tiny", "custom_voice")][0]


@pytest.fixture
def design(models):
    return models[("tiny", "voice_design")][0]


def test_every_preset_speaker_is_a_voice(custom):
    catalogue = Catalogue(custom)
    names = [v.name for v in catalogue.voices]
    assert names == sorted(s.name for s in custom.speakers) and len(names) == 9
    for voice in catalogue.voices:
        assert voice.speaker == voice.name and voice.instruct is None
        assert voice.languages[0] == NATIVE[voice.name]
        assert set(voice.languages) == ALL_TAGS and len(voice.languages) == len(ALL_TAGS)
        assert voice.default_language == "auto"
        assert all(re.fullmatch(r"[a-z]{2}", tag) for tag in voice.languages)
    assert catalogue.errors == ()


def test_descriptions_name_the_language_and_dialect(custom):
    by_name = {v.name: v for v in Catalogue(custom).voices}
    assert by_name["eric"].description.startswith("Eric (Sichuan Chinese")
    assert by_name["dylan"].description.startswith("Dylan (Beijing Chinese")
    assert by_name["uncle_fu"].description.startswith("Uncle Fu (Chinese")
    assert by_name["ono_anna"].description.startswith("Ono Anna (Japanese")
    assert by_name["ryan"].description.startswith("Ryan (English")
    assert len({v.description for v in by_name.values()}) == 9


def test_the_language_table_covers_the_model(custom):
    assert set(LANGUAGE_TAGS) == set(custom.supported_languages) - {"auto"}


def test_info_is_a_streaming_program_with_every_voice(custom):
    catalogue = Catalogue(custom, [VoiceConfig(name="ryan-de", speaker="Ryan", language="de")])
    info = build_info(catalogue, "1.2.3")
    (program,) = info.tts
    assert program.name == "qwen3tts" and program.installed and program.version == "1.2.3"
    assert program.supports_synthesize_streaming is True
    assert program.description == "Qwen3-TTS 0.6B CustomVoice on OpenVINO"
    assert program.attribution.url == "https://github.com/QwenLM/Qwen3-TTS"
    assert "Qwen" in program.attribution.name
    assert [v.name for v in program.voices] == [v.name for v in catalogue.voices]
    assert program.voices[-1].name == "ryan-de" and program.voices[-1].languages[0] == "de"
    assert all(v.installed and v.languages and v.description for v in program.voices)
    # the wire form round-trips and is byte-identical on every build (HA compares Info objects)
    event = info.event()
    assert Info.from_event(event) == info
    again = build_info(Catalogue(custom, [VoiceConfig(name="ryan-de", speaker="Ryan", language="de")]), "1.2.3")
    assert json.dumps(again.event().to_dict(), sort_keys=False) == json.dumps(event.to_dict(), sort_keys=False)
    assert info.asr == [] and info.wake == []


def test_resolve_voice(custom):
    catalogue = Catalogue(custom)
    assert catalogue.resolve(None)[0].name == "aiden"  # no default configured: the first voice
    assert catalogue.resolve("")[0].name == "aiden"
    assert catalogue.resolve("Ryan") == (catalogue.resolve("ryan")[0], "auto")
    assert Catalogue(custom, default_voice="Sohee").resolve(None)[0].name == "sohee"
    with pytest.raises(VoiceNotFound) as err:
        catalogue.resolve("en_US-lessac-medium")
    assert err.value.code == "VoiceNotFound"
    assert "en_US-lessac-medium" in str(err.value) and "ryan" in str(err.value)


@pytest.mark.parametrize("asked,expected", [
    ("en", "english"), ("en-US", "english"), ("en_us", "english"), ("English", "english"), ("DE", "german"),
    ("zh-Hans-CN", "chinese"), ("pt-BR", "portuguese"), ("ja", "japanese"), ("auto", "auto"), (None, "auto"),
    ("", "auto"),
])
def test_resolve_language(custom, asked, expected):
    assert Catalogue(custom).resolve("ryan", asked)[1] == expected


def test_language_precedence_request_then_voice_then_auto(custom):
    catalogue = Catalogue(custom, [VoiceConfig(name="vivian-en", speaker="vivian", language="en-GB")])
    assert catalogue.resolve("vivian-en") == (catalogue.voices[-1], "english")
    assert catalogue.resolve("vivian-en", "fr")[1] == "french"
    assert catalogue.resolve("vivian")[1] == "auto"


@pytest.mark.parametrize("language", ["xx", "klingon", "sichuan_dialect", "yue"])
def test_unknown_language(custom, language):
    with pytest.raises(LanguageNotSupported) as err:
        Catalogue(custom).resolve("ryan", language)
    assert err.value.code == "LanguageNotSupported"
    assert language in str(err.value) and "en" in str(err.value)


def test_model_language_every_tag():
    names = tuple(LANGUAGE_TAGS)
    for name, tag in LANGUAGE_TAGS.items():
        assert model_language(tag, names) == name
        assert model_language(f"{tag}-XX", names) == name
    with pytest.raises(LanguageNotSupported):
        model_language("en", ("chinese",))  # a model without English


def test_resolved_voices_make_valid_prompts(models):
    """What resolve() returns is exactly what the prompt builder accepts, for every voice."""
    for key, voices in [(("tiny", "custom_voice"), []), (("tiny", "voice_design"), [DESIGN]),
                        (("tiny-1.7b", "custom_voice"), [VoiceConfig(name="soft", speaker="ryan",
                                                                     instruct="Whisper.")])]:
        spec, tokenizer = models[key]
        catalogue = Catalogue(spec, voices)
        for voice in catalogue.voices:
            for language in (None, "en", "zh"):
                entry, model_lang = catalogue.resolve(voice.name, language)
                prompt = build_prompt(spec, tokenizer, VoiceRequest("Hello there.", model_lang, entry.speaker,
                                                                    entry.instruct))
                assert len(prompt) > 0


def test_voice_design_model_serves_only_configured_voices(design):
    catalogue = Catalogue(design, [DESIGN, VoiceConfig(name="plain", instruct="A bright young voice.")])
    assert [v.name for v in catalogue.voices] == ["narrator", "plain"]
    narrator, plain = catalogue.voices
    assert narrator.languages[0] == "de" and narrator.default_language == "german"
    assert narrator.instruct == "A calm, deep male voice." and narrator.speaker is None
    assert narrator.description == "Narrator" and plain.description == "plain"
    assert plain.languages[0] == "zh" and plain.default_language == "auto"  # no native language: model order
    assert catalogue.resolve(None)[0] is narrator
    assert build_info(catalogue, "0").tts[0].description == "Qwen3-TTS 0.6B VoiceDesign on OpenVINO"


def test_voice_design_model_without_voices_is_an_error(design):
    with pytest.raises(CatalogueError, match="no voice"):
        Catalogue(design)


def test_unservable_voices_are_skipped_and_reported(custom, design, caplog):
    bad = [
        (custom, CLONE, "Base model"),  # clone support needs a Base model
        (custom, DESIGN, "VoiceDesign model"),  # instruct without a speaker
        (custom, VoiceConfig(name="x", speaker="nobody"), "nobody"),
        (custom, VoiceConfig(name="x", speaker="ryan", instruct="Shout."), "0.6B"),
        (custom, VoiceConfig(name="x", speaker="ryan", language="klingon"), "klingon"),
        (custom, VoiceConfig(name="RYAN", speaker="ryan"), "taken"),
        (design, VoiceConfig(name="x", speaker="ryan"), "no preset speakers"),
        (design, CLONE, "Base model"),
    ]
    for spec, voice, reason in bad:
        keep = VoiceConfig(name="keep", speaker="ryan") if spec is custom else VoiceConfig(name="keep", instruct="Hi.")
        with caplog.at_level(logging.ERROR, logger="wyoming_qwen3tts.server.voices"):
            caplog.clear()
            catalogue = Catalogue(spec, [voice, keep])
        assert len(catalogue.errors) == 1, voice
        assert repr(voice.name) in catalogue.errors[0] and reason in catalogue.errors[0]
        assert catalogue.errors[0] in caplog.text
        names = [v.name for v in catalogue.voices]
        assert "keep" in names and voice.name not in names
    with pytest.raises(CatalogueError, match="anna"):
        Catalogue(design, [CLONE])  # nothing left: the reason names the voice


def test_speaker_voice_with_style_on_1_7b(models):
    spec = models[("tiny-1.7b", "custom_voice")][0]
    catalogue = Catalogue(spec, [VoiceConfig(name="ryan-soft", speaker="Ryan", instruct="Whisper.", language="ja")])
    entry, language = catalogue.resolve("ryan-soft")
    assert (entry.speaker, entry.instruct, language) == ("ryan", "Whisper.", "japanese")
    assert entry.languages[0] == "ja"
    assert catalogue.label == "Qwen3-TTS 1.7B CustomVoice"


def test_base_model_takes_clone_voices(models):
    spec = models[("tiny", "base")][0]
    xvec = VoiceConfig(name="bob", ref_audio="/v/bob.wav", x_vector_only=True, language="en")
    asked = []

    def clone(voice: VoiceConfig) -> ClonePrompt:  # the real encoders are tested in test_clone.py
        asked.append((voice.ref_audio, voice.ref_text, voice.x_vector_only))
        codes = None if voice.x_vector_only else np.zeros((3, 16), np.int64)
        return ClonePrompt(np.full(spec.talker.stack.hidden_size, len(asked), np.float32), codes, voice.ref_text)

    catalogue = Catalogue(spec, [CLONE, xvec, DESIGN], clone=clone)
    assert asked == [("/voices/anna.wav", "Hello, this is Anna.", False), ("/v/bob.wav", None, True)]
    assert [v.name for v in catalogue.voices] == ["anna", "bob"]
    anna, bob = (e.request("Hi.", e.default_language) for e in catalogue.voices)
    assert anna.ref_text == "Hello, this is Anna." and anna.ref_codes.shape == (3, 16) and anna.speaker_vector[0] == 1
    assert bob.ref_codes is None and bob.ref_text is None and bob.speaker_vector[0] == 2 and bob.language == "english"
    assert catalogue.voices[1].languages[0] == "en"
    assert len(catalogue.errors) == 1 and "'narrator'" in catalogue.errors[0]
    with pytest.raises(CatalogueError, match="no model is loaded to clone it with"):
        Catalogue(spec, [CLONE])  # nothing to clone with: the only voice is skipped


def test_default_voice_must_exist(custom):
    with pytest.raises(CatalogueError, match="'nobody'"):
        Catalogue(custom, default_voice="nobody")
    with pytest.raises(CatalogueError, match="'anna'"):
        Catalogue(custom, [CLONE], default_voice="anna")  # skipped voices are not available either
