"""Prompt layouts against the official implementation.

For every voice mode, the per-position input embeddings our numpy code computes from our
prompt layout and the checkpoint must equal the `inputs_embeds` the official `generate()`
feeds the talker — captured with a forward pre-hook on the official talker model — and
our trailing text must equal the `trailing_text_hidden` it feeds per frame. Both a
0.6B-like code path (`tiny`) and a 1.7B-like one (`tiny-1.7b`, with the code predictor
projection) are covered. The official wrapper tokenizes the text itself, so this also
checks our tokenizer and string layout end to end.
"""
from __future__ import annotations

import numpy as np
import oracle  # noqa: F401  (registers stand-ins before qwen_tts is imported)
import pytest
import torch
from parity import Official, Ours, assert_same
from qwen_tts.inference.qwen3_tts_model import VoiceClonePromptItem

from wyoming_qwen3tts.model.prompt import VoiceRequest

PRESETS = ("tiny", "tiny-1.7b")


@pytest.fixture(scope="module")
def pair(checkpoint_factory):
    cache: dict[tuple[str, str], tuple[Official, Ours]] = {}

    def get(preset: str, variant: str) -> tuple[Official, Ours]:
        if (preset, variant) not in cache:
            d = checkpoint_factory(preset, variant)
            cache[(preset, variant)] = (Official(d), Ours(d))
        return cache[(preset, variant)]

    return get


TEXTS = ("Hello world, this is a test of the speaker. GitHub's iPhone WiFi costs $1,299.50!",
         "你好，今天天气很好。我们去公园吧！")

CUSTOM_CASES = [
    # (text, speaker, language, instruct, non_streaming)
    (TEXTS[0], "ryan", "english", None, True),
    (TEXTS[0], "ryan", "english", None, False),
    (TEXTS[1], "vivian", "auto", None, True),
    (TEXTS[1], "vivian", "auto", None, False),
    (TEXTS[1], "eric", "chinese", None, True),  # dialect speaker: sichuan id replaces chinese
    (TEXTS[1], "dylan", "auto", None, False),  # dialect speaker with auto
    (TEXTS[0], "eric", "english", None, True),  # dialect speaker, other language: no dialect
    (TEXTS[0], "aiden", "english", "Speak slowly and warmly.", True),  # instruct: 1.7B only
    ("A", "sohee", "korean", "Whisper.", False),  # one-token text, streaming layout
]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", CUSTOM_CASES, ids=[f"{c[1]}-{c[2]}-{'ns' if c[4] else 's'}{'-instr' if c[3] else ''}"
                                                    for c in CUSTOM_CASES])
def test_custom_voice(pair, preset, case):
    text, speaker, language, instruct, non_streaming = case
    official, ours = pair(preset, "custom_voice")
    expected = official.run("generate_custom_voice", text=text, speaker=speaker, language=language,
                            instruct=instruct, non_streaming_mode=non_streaming)
    got = ours.run(VoiceRequest(text=text, speaker=speaker, language=language, instruct=instruct,
                                non_streaming=non_streaming))
    assert_same(got, expected)


DESIGN_CASES = [
    (TEXTS[0], "english", "A deep, calm male voice with a slight rasp.", True),
    (TEXTS[0], "english", "A bright young female voice.", False),
    (TEXTS[1], "auto", "温柔的女声", True),
    (TEXTS[1], "chinese", "", False),  # empty instruct = no instruct
]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", DESIGN_CASES,
                         ids=[f"{c[1]}-{'ns' if c[3] else 's'}-{len(c[2])}" for c in DESIGN_CASES])
def test_voice_design(pair, preset, case):
    text, language, instruct, non_streaming = case
    official, ours = pair(preset, "voice_design")
    expected = official.run("generate_voice_design", text=text, instruct=instruct, language=language,
                            non_streaming_mode=non_streaming)
    got = ours.run(VoiceRequest(text=text, language=language, instruct=instruct, non_streaming=non_streaming))
    assert_same(got, expected)


CLONE_CASES = [
    # (text, language, ref_text or None for x-vector only, reference frames, non_streaming)
    (TEXTS[0], "english", None, 0, False),
    (TEXTS[0], "english", None, 0, True),
    (TEXTS[0], "english", "This is the reference.", 5, False),  # text longer than the reference codes
    (TEXTS[0], "auto", "Short.", 60, False),  # reference codes longer than the text
    (TEXTS[1], "chinese", "参考音频的文本。", 12, True),
]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", CLONE_CASES, ids=[f"{c[1]}-{'icl' if c[2] else 'xvec'}{c[3]}-{'ns' if c[4] else 's'}"
                                                   for c in CLONE_CASES])
def test_voice_clone(pair, preset, case):
    text, language, ref_text, frames, non_streaming = case
    official, ours = pair(preset, "base")
    rng = np.random.default_rng(frames)
    hidden = ours.ckpt.spec.talker.stack.hidden_size
    xvec = rng.standard_normal(hidden).astype(np.float32)
    codes = rng.integers(0, 2048, (frames, 16)) if ref_text else None
    item = VoiceClonePromptItem(
        ref_code=None if codes is None else torch.from_numpy(codes),
        ref_spk_embedding=torch.from_numpy(xvec),
        x_vector_only_mode=ref_text is None, icl_mode=ref_text is not None, ref_text=ref_text)
    expected = official.run("generate_voice_clone", text=text, language=language, voice_clone_prompt=[item],
                            non_streaming_mode=non_streaming)
    got = ours.run(VoiceRequest(text=text, language=language, speaker_vector=xvec, ref_text=ref_text,
                                ref_codes=codes, non_streaming=non_streaming))
    assert_same(got, expected)
