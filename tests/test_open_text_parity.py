"""Text that grows while it is spoken, against the official implementation (f32, greedy).

An utterance opened with `Scheduler.open` and fed piece by piece, at any pace, must give
exactly the codes the official `generate()` gives for the whole text in the streaming layout
(`non_streaming_mode=False`, docs/MODEL.md §5.3, §5.4), and PCM within float rounding of the
official decode of those codes, in both runners. Pacings: a word per tick, a character per tick
(a Chinese character alone is three UTF-8 bytes), pieces cut inside words at an uneven pace
with the text's end withheld for many frames, a stall of many frames before the sentence's last
word, and every piece before the first tick; the pacings that should make the sequence sit out
steps waiting for text (rather than feed a pad early) check that it did. Voices: CustomVoice
(English, Chinese), and an in-context clone whose prompt must wait until the reference
transcript and the text cover the reference frames.

Each checkpoint is converted once with fp32 weights and run with f32 inference and KV cache;
each official result is computed once and compared with every pacing and runner. The frame
limit is the same on both sides (max_new_tokens = FRAMES + 1 allows FRAMES frames, §6.5), and
FRAMES exceeds the text, so its end token and the pads that follow it are fed too.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import oracle  # (first: registers stand-ins before qwen_tts is imported)
import pytest
import torch
from qwen_tts.inference.qwen3_tts_model import VoiceClonePromptItem

from wyoming_qwen3tts.convert.pipeline import convert
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.model.prompt import VoiceRequest, assistant_ids, build_open_prompt, ref_text_string

FRAMES = 20
RATE = 24000
PCM_TOLERANCE = 1e-4  # our codec against the official decoder (tests/test_codec.py, test_clone.py)
RUNNERS = ("python", "auto")
# The engine's runaway cap starts small and grows with the text (4 + 3 per token): it must not
# bind before FRAMES once the whole text is in, so both sides stop at the same frame.
CONFIG = EngineConfig(kv_blocks=64, first_chunk=1, steady_chunk=8, min_frames=4, frames_per_token=3.0)

EN = "Hello there, lights on."  # 15 ids with the synthetic vocabulary
ZH = "今天天气很好，我们去。"  # 13 ids, some of them spanning two characters' bytes
REF_TEXT = "The reference."
REF_FRAMES = 16  # more than the transcript's ids: an ICL prompt waits for some of the text


def _clone_voice(hidden: int) -> tuple[VoiceRequest, VoiceClonePromptItem]:
    """An in-context clone (random x-vector and reference codes), ours and the official one."""
    rng = np.random.default_rng(11)
    xvec = rng.standard_normal(hidden).astype(np.float32)
    codes = rng.integers(0, 2048, (REF_FRAMES, 16))
    item = VoiceClonePromptItem(ref_code=torch.from_numpy(codes), ref_spk_embedding=torch.from_numpy(xvec),
                                x_vector_only_mode=False, icl_mode=True, ref_text=REF_TEXT)
    return VoiceRequest("", "english", speaker_vector=xvec, ref_text=REF_TEXT, ref_codes=codes), item


CASES = {  # name -> (variant, text)
    "custom-en": ("custom_voice", EN),
    "custom-zh": ("custom_voice", ZH),
    "clone-icl": ("base", EN),
}


class Official(oracle.CodeCapture):
    def run(self, method: str, **kwargs) -> tuple[np.ndarray, np.ndarray]:
        """(codes [T, 16], audio) of a greedy run in the streaming layout, the official decode
        included (for a clone: reference + codes decoded, the reference's share cut off)."""
        wavs, rate = getattr(self.wrapper, method)(**kwargs, non_streaming_mode=False, do_sample=False,
                                                   subtalker_dosample=False, max_new_tokens=FRAMES + 1)
        assert rate == RATE
        (codes,) = self.codes
        return codes, np.asarray(wavs[0], np.float32)


@pytest.fixture(scope="module")
def models(checkpoint_factory, tmp_path_factory):
    """get(variant) -> (official wrapper, LoadedModel), each converted and loaded once."""
    cache: dict = {}

    def get(variant: str) -> tuple[Official, LoadedModel]:
        if variant not in cache:
            src = checkpoint_factory("tiny", variant, dtype="float32")
            out = convert(src, tmp_path_factory.mktemp("ov") / f"tiny-{variant}", weights="fp32")
            cache[variant] = (Official(src), LoadedModel(out, precision="f32", kv_precision="f32"))
        return cache[variant]

    return get


@pytest.fixture(scope="module")
def cases(models):
    """get(name) -> (our voice, our model, official codes, official audio): the official run once per case."""
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            variant, text = CASES[name]
            official, model = models(variant)
            if variant == "base":
                voice, item = _clone_voice(model.spec.talker.stack.hidden_size)
                codes, audio = official.run("generate_voice_clone", text=text, language="english",
                                            voice_clone_prompt=[item])
            else:
                speaker, language = ("ryan", "english") if text == EN else ("vivian", "chinese")
                voice = VoiceRequest("", language, speaker)
                codes, audio = official.run("generate_custom_voice", text=text, speaker=speaker, language=language)
            assert codes.shape == (FRAMES, 16), "the synthetic checkpoint should run to the frame limit"
            assert audio.shape == (FRAMES * 1920,) and np.abs(audio).max() > 0.05
            cache[name] = (voice, model, codes, audio)
        return cache[name]

    return get


@pytest.fixture(scope="module")
def engines(models):
    """get(variant, runner) -> a Scheduler driven by hand, one per model and runner (a native
    runner compiles its own graphs)."""
    cache: dict = {}

    def get(variant: str, runner: str) -> Scheduler:
        if (variant, runner) not in cache:
            cache[(variant, runner)] = Scheduler(models(variant)[1], replace(CONFIG, backend=runner))
        return cache[(variant, runner)]

    yield get
    for sched in cache.values():
        sched.close()


def words(text: str) -> list[str]:
    """Words with their leading space; a text without spaces (Chinese) in pairs of characters."""
    if " " not in text:
        return [text[i:i + 2] for i in range(0, len(text), 2)]
    out = text.split(" ")
    return [out[0]] + [" " + w for w in out[1:]]


def odd_cuts(text: str) -> list[str]:
    """Pieces of 3, 1, 4, 1, 5, 9, 2, 6 characters, cycling: cuts inside words."""
    pieces, i = [], 0
    for n in itertools.cycle((3, 1, 4, 1, 5, 9, 2, 6)):
        if i >= len(text):
            return pieces
        pieces.append(text[i:i + n])
        i += n
    raise AssertionError


def stall(pieces: list[str], ticks: int) -> list[int]:
    """A tick between pieces, and `ticks` before the last one: the sequence has run out of
    ids by then (a piece's last pre-token is final only once the next piece comes)."""
    return [0] + [1] * (len(pieces) - 2) + [ticks]


# name -> text -> (pieces, ticks before each piece, ticks before finish(), fewest steps the
# sequence must sit out waiting for text)
PACINGS = {
    "word per tick": lambda t: (words(t), [0] + [1] * (len(words(t)) - 1), 1, 0),
    "character per tick": lambda t: (list(t), [0] + [1] * (len(t) - 1), 1, 0),
    "odd cuts, uneven pace, end withheld 40 ticks": lambda t: (
        odd_cuts(t), list(itertools.islice(itertools.cycle((2, 0, 3, 1, 0, 5)), len(odd_cuts(t)))), 40, 30),
    "stall of 45 ticks before the last word": lambda t: (words(t), stall(words(t), 45), 0, 40),
    "all before the first tick": lambda t: (list(t), [0] * len(t), 0, 0),
}


def pieced(sched: Scheduler, voice: VoiceRequest, pieces: list[str], waits: list[int],
           finish_wait: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Codes and streamed PCM of an utterance fed piece i after waits[i] ticks, finished after
    finish_wait more ticks; and after how many ticks its sequence had no input for the next
    step (it sits out until its next text row comes: feeding a pad instead would be a bug)."""
    params = SamplingParams.from_defaults(sched.model.spec.generation, max_new_tokens=FRAMES + 1).greedy()
    utt = sched.open(voice, params)
    sat_out = 0

    def tick() -> None:
        nonlocal sat_out
        sched.tick()
        req = sched._running.get(utt.id)
        sat_out += req is not None and req.seq.pending is None  # its next input waits for a text row

    for piece, wait in zip(pieces, waits):
        for _ in range(wait):
            tick()
        utt.append(piece)
    for _ in range(finish_wait):
        tick()
    utt.finish()
    for _ in range(10 * FRAMES):
        if utt.stream.done:
            break
        tick()
    assert utt.stream.done, "the utterance did not end"
    pcm = np.concatenate([c.pcm for c in utt.stream])  # raises if it ended with an error
    pool = sched.batch.pool
    assert pool.free == pool.num_blocks and not pool.tables
    assert utt.stream.result.reason == "length"
    return utt.stream.result.codes, pcm, sat_out


def assert_codes_equal(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape, f"{got.shape} frames vs official {expected.shape}"
    mismatch = np.argwhere(got != expected)
    assert mismatch.size == 0, f"first mismatch at frame/group {mismatch[0]}: {got[mismatch[0][0]]} vs " \
                               f"{expected[mismatch[0][0]]}"


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("pacing", list(PACINGS))
@pytest.mark.parametrize("case", list(CASES))
def test_pieces_at_any_pace_give_the_official_codes_and_pcm(cases, engines, case, pacing, runner):
    voice, model, expected_codes, expected_pcm = cases(case)
    pieces, waits, finish_wait, min_sat_out = PACINGS[pacing](CASES[case][1])
    assert "".join(pieces) == CASES[case][1]
    codes, pcm, sat_out = pieced(engines(CASES[case][0], runner), voice, pieces, waits, finish_wait)
    assert sat_out >= min_sat_out, f"the sequence sat out {sat_out} steps"
    assert_codes_equal(codes, expected_codes)
    assert pcm.shape == expected_pcm.shape
    err = float(np.abs(pcm - expected_pcm).max())
    assert err <= PCM_TOLERANCE, f"PCM differs from the official decode by up to {err:.3g}"


@pytest.mark.parametrize("case", list(CASES))
def test_the_cases_cover_what_they_claim(cases, case):
    """The text ends well within FRAMES (its end token and pads are fed too); Chinese
    characters are three bytes each and some ids span two of them, so a character alone is
    not a whole id; the clone's prompt cannot start on the first text id."""
    voice, model, _, _ = cases(case)
    text = CASES[case][1]
    ids = assistant_ids(model.tokenizer, text)[1]
    assert 4 < len(ids) < FRAMES - 4
    if case == "custom-zh":
        assert all(len(ch.encode()) == 3 for ch in text)
        assert ids != [i for ch in text for i in assistant_ids(model.tokenizer, ch)[1]]
    if case == "clone-icl":
        ref_ids = model.tokenizer.encode(ref_text_string(REF_TEXT))[3:-2]
        start = REF_FRAMES + 1 - len(ref_ids)  # text ids the prompt needs: codec bos + one per reference frame
        assert 1 < start < len(ids)
        assert build_open_prompt(model.spec, model.tokenizer, voice, ids[:start - 1], closed=False) is None
        prompt = build_open_prompt(model.spec, model.tokenizer, voice, ids[:start], closed=False)
        assert prompt is not None and len(prompt.trailing_text_ids) == 0
