"""Prompt layout rules and bad requests (the official parity lives in test_prompt_parity)."""
from __future__ import annotations

import numpy as np
import pytest

from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.prompt import NO_CODEC, REF_FRAME, SPEAKER_SLOT, PromptError, VoiceRequest, build_prompt
from wyoming_qwen3tts.model.tokenizer import TextTokenizer


@pytest.fixture(scope="module")
def models(checkpoint_factory):
    out = {}
    for preset, variant in [("tiny", "custom_voice"), ("tiny-1.7b", "custom_voice"), ("tiny", "voice_design"),
                            ("tiny", "base")]:
        d = checkpoint_factory(preset, variant)
        out[(preset, variant)] = (Checkpoint(d).spec, TextTokenizer.from_dir(d))
    return out


def layout(models, key, **kw):
    spec, tok = models[key]
    return build_prompt(spec, tok, VoiceRequest(**kw))


def test_custom_voice_non_streaming_length(models):
    spec, tok = models[("tiny", "custom_voice")]
    n = len(tok.encode("Hello there."))
    p = layout(models, ("tiny", "custom_voice"), text="Hello there.", speaker="ryan", language="english")
    assert len(p) == n + 11  # role 3 + 6 prefix + (n+1) text + 1 (worked example, docs/MODEL.md §5.6)
    assert p.codec_ids[:3].tolist() == [NO_CODEC] * 3
    assert p.codec_ids[3:9].tolist() == [2154, 2156, 2050, 2157, 3061, 2148]
    assert p.codec_ids[-1] == 2149 and p.text_ids[-1] == 151671
    assert p.trailing_text_ids.tolist() == [151671]


def test_streaming_text_trickles(models):
    spec, tok = models[("tiny", "custom_voice")]
    text_ids = tok.encode("Hello there.")
    p = layout(models, ("tiny", "custom_voice"), text="Hello there.", speaker="ryan", non_streaming=False)
    assert p.codec_ids[3:6].tolist() == [2155, 2156, 2157]  # auto: nothink form
    assert p.text_ids[-1] == text_ids[0] and p.codec_ids[-1] == 2149
    assert p.trailing_text_ids.tolist() == text_ids[1:] + [151673]


def test_dialect_and_instruct_rules(models):
    p = layout(models, ("tiny", "custom_voice"), text="你好", speaker="dylan", language="chinese")
    assert 2074 in p.codec_ids.tolist() and 2055 not in p.codec_ids.tolist()
    small = layout(models, ("tiny", "custom_voice"), text="Hi", speaker="ryan", instruct="Whisper")
    big = layout(models, ("tiny-1.7b", "custom_voice"), text="Hi", speaker="ryan", instruct="Whisper")
    assert len(big) > len(small)  # 0.6B CustomVoice drops instruct, 1.7B keeps it


def test_clone_layouts(models):
    xvec = np.ones(64, np.float32)
    p = layout(models, ("tiny", "base"), text="Hello", speaker_vector=xvec)
    assert (p.codec_ids == SPEAKER_SLOT).sum() == 1 and p.ref_codes is None
    codes = np.zeros((7, 16), np.int64)
    p = layout(models, ("tiny", "base"), text="Hello", speaker_vector=xvec, ref_text="Ref.", ref_codes=codes)
    assert (p.codec_ids == REF_FRAME).sum() == 7


@pytest.mark.parametrize("key,kw,message", [
    (("tiny", "custom_voice"), dict(text="Hi", speaker="nobody"), "unknown speaker 'nobody'"),
    (("tiny", "custom_voice"), dict(text="Hi"), "needs a speaker"),
    (("tiny", "custom_voice"), dict(text="Hi", speaker="ryan", language="klingon"), "unsupported language"),
    (("tiny", "custom_voice"), dict(text="Hi", speaker="ryan", language="sichuan_dialect"), "unsupported language"),
    (("tiny", "custom_voice"), dict(text="", speaker="ryan"), "empty"),
    (("tiny", "voice_design"), dict(text="Hi", speaker="ryan"), "no preset speakers"),
    (("tiny", "base"), dict(text="Hi"), "speaker vector"),
    (("tiny", "base"), dict(text="Hi", speaker_vector=np.ones(3, np.float32)), r"shape \(3,\)"),
    (("tiny", "base"), dict(text="Hi", speaker_vector=np.ones(64, np.float32), ref_codes=np.zeros((3, 16), int)),
     "transcript"),
    (("tiny", "base"), dict(text="Hi", speaker_vector=np.ones(64, np.float32), ref_text="x",
                            ref_codes=np.full((3, 16), 4096)), "0..2047"),
    (("tiny", "base"), dict(text="Hi", speaker_vector=np.ones(64, np.float32), ref_text="x",
                            ref_codes=np.zeros((3, 8), int)), "expected"),
    (("tiny", "base"), dict(text="Hi", speaker_vector=np.ones(64, np.float32), instruct="calm"), "no instruct"),
])
def test_bad_requests_are_clear(models, key, kw, message):
    with pytest.raises(PromptError, match=message):
        layout(models, key, **kw)
