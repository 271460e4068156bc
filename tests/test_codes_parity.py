"""Greedy codes through our OpenVINO graphs equal the official generate() (f32).

Each checkpoint is converted with fp32 weights and run with f32 inference and an f32 KV
cache; the official model runs the same checkpoint in float32. Codes must be identical,
for every voice mode, streaming and non-streaming text, both code-predictor paths,
up to 60 frames and until EOS; a batch of different prompts in one paged call must give
each prompt's codes alone.
"""
from __future__ import annotations

import numpy as np
import oracle  # (first: registers stand-ins before qwen_tts is imported)
import pytest
import torch
from generate import generate_codes
from qwen_tts.inference.qwen3_tts_model import VoiceClonePromptItem

from wyoming_qwen3tts.convert.pipeline import convert
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.model.prompt import VoiceRequest

FRAMES = 60


class OfficialCodes(oracle.CodeCapture):
    def run(self, method: str, max_new_tokens: int = FRAMES + 1, **kwargs) -> np.ndarray:
        getattr(self.wrapper, method)(**kwargs, do_sample=False, subtalker_dosample=False,
                                      max_new_tokens=max_new_tokens)
        (codes,) = self.codes
        return codes


@pytest.fixture(scope="module")
def models(checkpoint_factory, tmp_path_factory):
    cache = {}

    def get(preset: str, variant: str):
        if (preset, variant) not in cache:
            src = checkpoint_factory(preset, variant, dtype="float32")
            out = convert(src, tmp_path_factory.mktemp("ov") / f"{preset}-{variant}", weights="fp32")
            cache[(preset, variant)] = (OfficialCodes(src), LoadedModel(out, precision="f32", kv_precision="f32"))
        return cache[(preset, variant)]

    return get


def ours(model: LoadedModel, requests: list[VoiceRequest], max_new_tokens: int = FRAMES + 1) -> list[np.ndarray]:
    params = SamplingParams.from_defaults(model.spec.generation, max_new_tokens=max_new_tokens).greedy()
    embeds = [model.embed_prompt(model.prompt(r)) for r in requests]
    return [s.codes for s in generate_codes(model, embeds, [params] * len(requests))]


def assert_codes_equal(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape, f"{got.shape} frames vs official {expected.shape}"
    mismatch = np.argwhere(got != expected)
    assert mismatch.size == 0, f"first mismatch at frame/group {mismatch[0]}: {got[mismatch[0][0]]} vs " \
                               f"{expected[mismatch[0][0]]}"


PRESETS = ("tiny", "tiny-1.7b")
TEXT = "Hello world, this is a parity test of the speech generator."
ZH = "今天天气很好，我们一起去公园散步吧。"

CUSTOM = [("ryan", "english", True, TEXT), ("ryan", "auto", False, TEXT), ("eric", "chinese", True, ZH),
          ("vivian", "auto", False, ZH)]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("speaker,language,non_streaming,text", CUSTOM,
                         ids=[f"{c[0]}-{c[1]}-{'ns' if c[2] else 's'}" for c in CUSTOM])
def test_custom_voice(models, preset, speaker, language, non_streaming, text):
    official, model = models(preset, "custom_voice")
    expected = official.run("generate_custom_voice", text=text, speaker=speaker, language=language,
                            non_streaming_mode=non_streaming)
    (got,) = ours(model, [VoiceRequest(text, language, speaker, non_streaming=non_streaming)])
    assert expected.shape[0] == FRAMES
    assert_codes_equal(got, expected)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("non_streaming", [True, False])
def test_voice_design(models, preset, non_streaming):
    official, model = models(preset, "voice_design")
    instruct = "A calm, low voice."
    expected = official.run("generate_voice_design", text=TEXT, instruct=instruct, language="english",
                            non_streaming_mode=non_streaming)
    (got,) = ours(model, [VoiceRequest(TEXT, "english", instruct=instruct, non_streaming=non_streaming)])
    assert_codes_equal(got, expected)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("non_streaming", [False, True])
def test_voice_clone_xvector(models, preset, non_streaming):
    official, model = models(preset, "base")
    xvec = np.random.default_rng(3).standard_normal(model.spec.talker.stack.hidden_size).astype(np.float32)
    item = VoiceClonePromptItem(ref_code=None, ref_spk_embedding=torch.from_numpy(xvec), x_vector_only_mode=True,
                                icl_mode=False, ref_text=None)
    expected = official.run("generate_voice_clone", text=TEXT, language="english", voice_clone_prompt=[item],
                            non_streaming_mode=non_streaming)
    (got,) = ours(model, [VoiceRequest(TEXT, "english", speaker_vector=xvec, non_streaming=non_streaming)])
    assert_codes_equal(got, expected)


def test_batch_equals_alone(models):
    _, model = models("tiny-1.7b", "custom_voice")
    requests = [VoiceRequest(TEXT, "english", "ryan"), VoiceRequest("Short one.", "auto", "aiden", non_streaming=False),
                VoiceRequest(ZH * 3, "chinese", "dylan")]
    together = ours(model, requests, max_new_tokens=25)
    for req, got in zip(requests, together):
        (alone,) = ours(model, [req], max_new_tokens=25)
        assert_codes_equal(got, alone)
    assert len({r.shape[0] for r in together}) >= 1 and len({int(c[0, 0]) for c in together}) > 1


@pytest.mark.parametrize("runner", ["python", "auto"])
def test_voice_prefix_from_the_cache(models, runner):
    """The prefix cache on the exact path (engine/runner.py): a voice's later requests start
    from its cached instruct, role and codec prefix, and still give the official codes, in
    both layouts (the streaming one feeds a single text position after the prefix)."""
    from wyoming_qwen3tts.engine.config import EngineConfig
    from wyoming_qwen3tts.engine.scheduler import Scheduler
    from wyoming_qwen3tts.engine.step import ChunkSchedule

    official, model = models("tiny-1.7b", "custom_voice")
    sched = Scheduler(model, EngineConfig(kv_blocks=64, backend=runner), schedule=ChunkSchedule(offline=True))
    started, add = [], sched.batch.add

    def spy(*args, **kwargs):  # the prompt tokens each sequence starts with cached
        seq = add(*args, **kwargs)
        started.append(seq.cached)
        return seq

    sched.batch.add = spy
    params = SamplingParams.from_defaults(model.spec.generation, max_new_tokens=FRAMES + 1).greedy()
    try:
        for text, non_streaming in ((TEXT, True), ("Short one.", False), (TEXT, False)):
            expected = official.run("generate_custom_voice", text=text, speaker="ryan", language="english",
                                    instruct="Speak slowly.", non_streaming_mode=non_streaming)
            stream = sched.submit(VoiceRequest(text, "english", "ryan", instruct="Speak slowly.",
                                               non_streaming=non_streaming), params)
            while not stream.done:
                sched.tick()
            assert_codes_equal(stream.result.codes, expected)
    finally:
        sched.close()
    assert started[0] == 0 and started[1] == started[2] > 0 and sched.batch.pool.prefixes == 1


@pytest.fixture(scope="module")
def eos_pair(checkpoint_factory, tmp_path_factory):
    """A tiny checkpoint whose EOS row of the codec head is scaled up, so greedy decoding
    ends with EOS after about 20 frames (the official model decides where)."""
    import shutil

    from tensor_files import write_safetensors

    from wyoming_qwen3tts.model.safetensors import SafetensorsFile

    src = tmp_path_factory.mktemp("eos") / "ckpt"
    shutil.copytree(checkpoint_factory("tiny", "custom_voice", dtype="float32"), src)
    f = SafetensorsFile(src / "model.safetensors")
    tensors = {n: np.array(f.raw(n)) for n in f.names()}
    del f
    tensors["talker.codec_head.weight"][2150] *= 2.5
    write_safetensors(src / "model.safetensors", tensors)
    out = convert(src, tmp_path_factory.mktemp("eos-ov") / "ov", weights="fp32")
    return OfficialCodes(src), LoadedModel(out, precision="f32", kv_precision="f32")


def test_until_eos(eos_pair):
    official, model = eos_pair
    text = "Hello world, this is a test."
    expected = official.run("generate_custom_voice", text=text, speaker="ryan", language="english",
                            non_streaming_mode=True)
    assert 2 < expected.shape[0] < FRAMES, "the modified checkpoint should stop on EOS"
    params = SamplingParams.from_defaults(model.spec.generation, max_new_tokens=FRAMES + 1).greedy()
    (seq,) = generate_codes(model, [model.embed_prompt(model.prompt(VoiceRequest(text, "english", "ryan")))],
                            [params])
    assert seq.reason == "eos"
    assert_codes_equal(seq.codes, expected)
