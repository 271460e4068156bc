"""A 1.7B CustomVoice voice with a style instruction gives the official
`generate_custom_voice(..., instruct=...)` greedy codes (issue 38, item 5), reached the way a
user's voice is reached: written in config.yaml (or saved by the voice lab), read by
load_config, put in the catalogue by build_service, resolved by ServiceSlot.synth and
spoken by the engine. The exact path (fp32 weights, f32 compute and KV cache) on a tiny
checkpoint of the 1.7B shape; both text layouts (engine.text_layout), and the streaming
layout fed word by word as Wyoming's streamed text is.
"""
from __future__ import annotations

import asyncio

import numpy as np
import oracle  # (first: registers stand-ins before qwen_tts is imported)
import pytest

from wyoming_qwen3tts.config import load_config
from wyoming_qwen3tts.convert.pipeline import convert
from wyoming_qwen3tts.engine.stream import AudioStream
from wyoming_qwen3tts.server.loading import build_service, plan
from wyoming_qwen3tts.server.service import ServiceSlot
from wyoming_qwen3tts.server.voice_lab import VoiceLab
from wyoming_qwen3tts.server.voice_store import SavedVoice, VoiceStore

FRAMES = 60
TEXT = "Hello world, this is a parity test of the speech generator."
CONFIGURED = ("Calm Ryan", "ryan", "Speak slowly and calmly, like a narrator.")  # name, speaker, style
SAVED = ("Bright Aiden", "aiden", "Excited and fast, almost shouting!")  # saved in the lab's store


class OfficialCodes(oracle.CodeCapture):
    def run(self, **kwargs) -> np.ndarray:
        self.wrapper.generate_custom_voice(text=TEXT, language="english", do_sample=False,
                                           subtalker_dosample=False, max_new_tokens=FRAMES + 1, **kwargs)
        (codes,) = self.codes
        return codes


@pytest.fixture(scope="module")
def checkpoint(checkpoint_factory, tmp_path_factory):
    """The tiny 1.7B-shaped CustomVoice checkpoint (f32) and its fp32 conversion."""
    src = checkpoint_factory("tiny-1.7b", "custom_voice", dtype="float32")
    return src, convert(src, tmp_path_factory.mktemp("ov") / "tiny-1.7b-custom_voice", weights="fp32")


@pytest.fixture(scope="module")
def official(checkpoint):
    """The official codes of both styled voices in both layouts, and of the plain speakers."""
    model = OfficialCodes(checkpoint[0])
    out = {}
    for non_streaming in (True, False):
        for _, speaker, style in (CONFIGURED, SAVED):
            out[speaker, style, non_streaming] = model.run(speaker=speaker, instruct=style,
                                                           non_streaming_mode=non_streaming)
            out[speaker, None, non_streaming] = model.run(speaker=speaker, non_streaming_mode=non_streaming)
    return out


def start(checkpoint, tmp_path, layout: str):
    """The server's start-up on a config.yaml with the styled voice: a slot with the loaded
    model, the voice lab's saved voices attached as at every start."""
    name, speaker, style = CONFIGURED
    data = tmp_path / "data"
    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        f"model:\n  source: {checkpoint[1]}\n  data_dir: {data}\n"
        f"precision:\n  inference: f32\n  kv_cache: f32\n"
        f"engine:\n  max_frames: {FRAMES}\n  kv_blocks: 64\n  text_layout: {layout}\n"
        f"server:\n  greedy: true\n"
        f"voices:\n  - name: {name}\n    speaker: {speaker}\n    language: en\n    instruct: \"{style}\"\n",
        encoding="utf-8")
    config = load_config(config_file)
    saved_name, saved_speaker, saved_style = SAVED
    VoiceStore(data / "voices").add(SavedVoice(saved_name, "", "en", instruct=saved_style, speaker=saved_speaker),
                                    None, 0)
    slot = ServiceSlot(settings=config.server)
    lab = VoiceLab(slot, config)
    lab.prepare(plan(config))
    slot.load(lab.attach(build_service(config)))
    return slot


def spoken_codes(slot: ServiceSlot, voice: str, words: bool) -> np.ndarray:
    """The codes of TEXT in `voice`, through ServiceSlot.synth as every protocol asks: a whole
    sentence submitted, or (words) an utterance fed one word at a time."""
    async def run() -> AudioStream:
        synth = await slot.synth("parity", voice, None, words=words, paced=False)
        try:
            if not words:
                return synth.submit(TEXT, False)
            assert synth.open is not None
            utterance = synth.open(False)
            for i, word in enumerate(TEXT.split(" ")):
                utterance.append(word if i == 0 else " " + word)
            utterance.finish()
            return utterance.stream
        finally:
            synth.release()

    stream = asyncio.run(run())
    stream.read_all(120)
    assert stream.result is not None
    return stream.result.codes


@pytest.mark.parametrize("layout,words", [("non_streaming", False), ("streaming", False), ("streaming", True)],
                         ids=["non-streaming", "streaming", "streaming-word-by-word"])
def test_a_styled_voice_gives_the_official_instruct_codes(checkpoint, official, tmp_path, layout, words):
    slot = start(checkpoint, tmp_path, layout)
    try:
        for name, speaker, style in (CONFIGURED, SAVED):
            entry = slot.resolve(name)[1]
            assert (entry.speaker, entry.instruct) == (speaker, style)  # from config.yaml / voice.json
            got = spoken_codes(slot, name, words)
            expected = official[speaker, style, layout == "non_streaming"]
            assert expected.shape == (FRAMES, 16)
            assert got.shape == expected.shape, f"{name}: {got.shape} frames vs official {expected.shape}"
            mismatch = np.argwhere(got != expected)
            assert mismatch.size == 0, f"{name}: first mismatch at frame/group {mismatch[0]}"
            # the style reached the model: the plain speaker speaks other codes
            assert not np.array_equal(got, official[speaker, None, layout == "non_streaming"]), name
    finally:
        for service in slot.services.values():
            service.engine.close()
