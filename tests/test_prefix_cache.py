"""The prefix cache (engine/runner.py): a request whose voice prefix (instruct, role, codec
prefix) was computed before starts with a copy of its keys and values and feeds only its text
positions, in both runners; its codes do not depend on whether the prefix was cached, and with
an f32 KV cache they are exactly those without the cache; voices, languages and speaker
vectors get entries of their own; the pinned blocks are taken back whenever a request needs
them, and every other block returns when the engine is idle."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from wyoming_qwen3tts.engine.blocks import BlockPool
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler, open_batch
from wyoming_qwen3tts.engine.step import ChunkSchedule
from wyoming_qwen3tts.model.prompt import VoiceRequest

RUNNERS = ("python", "auto")
CONFIG = EngineConfig(kv_blocks=64, first_chunk=1, steady_chunk=8, max_frames=16)
RYAN = VoiceRequest("Hello there, how are you today?", "english", "ryan")
TEXTS = ("Hello there, how are you today?", "Turn on the kitchen lights.", "Short.")


@pytest.fixture(scope="module")
def exact(converted_factory):
    """The exact path: f32 inference and an f32 KV cache."""
    return LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="f32")


@pytest.fixture(scope="module")
def u8(converted_factory):
    """The default KV cache (u8), one thread: a sequence's numbers do not depend on its batch."""
    return LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8", threads=1)


def greedy(model: LoadedModel, seed: int | None = None) -> SamplingParams:
    params = SamplingParams.from_defaults(model.spec.generation, seed=seed)
    return params.greedy() if seed is None else params


class Engine:
    """A scheduler driven by hand that records, for each sequence it starts, the prompt
    tokens already cached when it was added (the prefix copied from the cache, or 0), and
    with the Python runner every talker call's logits (codes hide last-bit differences)."""

    def __init__(self, model: LoadedModel, runner: str, config: EngineConfig = CONFIG) -> None:
        self.sched = Scheduler(model, replace(config, backend=runner))
        self.started: list[tuple[int, int]] = []  # (cached at admission, prompt tokens)
        self.logits: list[np.ndarray] = []  # Python runner: the sampled rows of each talker call
        add = self.sched.batch.add

        def spy(embeds, *args, **kwargs):
            seq = add(embeds, *args, **kwargs)
            self.started.append((seq.cached, embeds.prefill.shape[0]))
            return seq

        self.sched.batch.add = spy
        if runner == "python":
            talker = self.sched.runner.talker

            def logits(plan):
                rows, hidden = talker(plan)
                if plan.sampling:
                    self.logits.append(rows.copy())
                return rows, hidden

            self.sched.runner.talker = logits

    @property
    def pool(self):
        return self.sched.batch.pool

    def speak(self, voice: VoiceRequest, seed: int | None = None,
              max_frames: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Codes and PCM of one request, alone."""
        stream = self.sched.submit(voice, greedy(self.sched.model, seed), max_frames=max_frames)
        for _ in range(300):
            if stream.done:
                break
            self.sched.tick()
        pcm = np.concatenate([c.pcm for c in stream])
        self.assert_idle()
        return stream.result.codes, pcm

    def assert_idle(self) -> None:
        """No sequence holds a block; the cache pins whole blocks of whole prefixes."""
        pool = self.pool
        assert pool.free == pool.num_blocks and pool.used == 0 and not pool.tables and not self.sched.batch.active
        assert 0 <= pool.prefixes <= pool.pinned <= pool.num_blocks

    def close(self) -> None:
        self.sched.close()


def prefix_len(model: LoadedModel, voice: VoiceRequest) -> int:
    return model.prompt(voice).prefix_len


# --- the prompt ------------------------------------------------------------------------------


def test_prefix_len_ends_where_the_text_begins(u8):
    """9 positions for a speaker with a named language (role 3 + think, think_bos, lang,
    think_eos, speaker, pad), 8 with auto; the prefix's rows are the same in every request of
    the voice and layout, the next row is not."""
    assert prefix_len(u8, RYAN) == 9 and prefix_len(u8, replace(RYAN, language="auto")) == 8
    rows = []
    for text in TEXTS:
        for non_streaming in (True, False):
            prompt = u8.prompt(replace(RYAN, text=text, non_streaming=non_streaming))
            rows.append(u8.embed_prompt(prompt).prefill[:prompt.prefix_len + 1])
    for other in rows[1:]:
        np.testing.assert_array_equal(other[:-1], rows[0][:-1])
    assert len({r[-1].tobytes() for r in rows}) == len(rows)


def test_prefix_len_of_instructs_and_clones(converted_factory):
    instructed = LoadedModel(converted_factory("tiny-1.7b", "custom_voice", "int8"))
    voice = VoiceRequest("Hi there.", "english", "ryan", instruct="Speak slowly.")
    prompt = instructed.prompt(voice)
    instruct = len(instructed.tokenizer.encode("<|im_start|>user\nSpeak slowly.<|im_end|>\n"))
    assert prompt.prefix_len == instruct + 9 and prompt.text_ids[prompt.prefix_len] >= 0
    base = LoadedModel(converted_factory("tiny", "base", "int8"))
    vector = np.ones(64, np.float32)
    assert base.prompt(VoiceRequest("Hi.", "english", speaker_vector=vector)).prefix_len == 9
    icl = base.prompt(VoiceRequest("Hi.", "english", speaker_vector=vector, ref_text="Reference words.",
                                   ref_codes=np.zeros((5, 16), np.int64)))
    assert icl.prefix_len == 9 and icl.text_ids[9] >= 0  # the reference transcript starts there


# --- the runners -----------------------------------------------------------------------------


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_second_request_of_a_voice_prefills_only_its_text(u8, runner):
    engine = Engine(u8, runner)
    try:
        first = engine.speak(RYAN)
        assert engine.pool.prefixes == 1 and engine.pool.pinned == 1
        for text in TEXTS[1:]:
            engine.speak(replace(RYAN, text=text))
        open_text = engine.sched.open(RYAN, greedy(u8))  # a growing text, in the streaming layout
        open_text.append("Hello there,")
        open_text.finish()
        for _ in range(300):
            if open_text.stream.done:
                break
            engine.sched.tick()
        list(open_text.stream)
        engine.assert_idle()
        again = engine.speak(RYAN)
        k = prefix_len(u8, RYAN) - 1  # the last prefix position is fed with the text (runner.py)
        assert [cached for cached, _ in engine.started] == [0, k, k, k, k]
        assert engine.pool.prefixes == 1
        np.testing.assert_array_equal(again[0], first[0])  # a request's numbers do not depend on the cache
        np.testing.assert_array_equal(again[1], first[1])
    finally:
        engine.close()


def run_all(model: LoadedModel, runner: str, cache: bool, voices: list[VoiceRequest],
            config: EngineConfig = CONFIG) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each request's (codes, PCM), one after another; with the Python runner, last the
    logits of every step of them all."""
    engine = Engine(model, runner, replace(config, prefix_cache=cache))
    try:
        out = [engine.speak(v, seed) for v, seed in voices]
        hits = [cached > 0 for cached, _ in engine.started]
        assert any(hits) == cache
        return out + ([np.concatenate(engine.logits)] if runner == "python" else [])
    finally:
        engine.close()


def assert_same(got: list, expected: list) -> None:
    """(codes, PCM) pairs, and the Python runner's logits, bit for bit."""
    for a, b in zip(got, expected):
        for x, y in zip(a, b) if isinstance(a, tuple) else [(a, b)]:
            np.testing.assert_array_equal(x, y)


VOICES = [(RYAN, None), (replace(RYAN, text=TEXTS[1]), 3),  # non-streaming layout: text over pads
          (replace(RYAN, text=TEXTS[2], non_streaming=False), None),  # streaming layout: one text position
          (replace(RYAN, text=TEXTS[1], non_streaming=False), 5), (RYAN, None),
          (VoiceRequest(TEXTS[1], "auto", "vivian"), None), (VoiceRequest(TEXTS[1], "auto", "vivian"), None)]


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_exact_path_gives_the_same_codes_and_pcm_with_the_cache(exact, runner):
    """With an f32 KV cache the rows fed after a cached prefix compute the bits one call over
    the whole prompt computes, so cold, warm and no cache agree bit for bit (the streaming
    layout too: the last prefix position goes with its single text position)."""
    assert_same(run_all(exact, runner, True, VOICES), run_all(exact, runner, False, VOICES))


def test_the_exact_path_in_prefill_chunks(exact):
    """Chunks of 7 rows, the prefix of 8 cached: no chunk leaves a single prompt row behind
    (one row over cached positions takes another kernel), so the prompt computes the bits of
    one call, with the cache or without, cold or warm, in both runners."""
    voices = [(replace(RYAN, text=t, non_streaming=ns), None)
              for t, ns in (("Turn on the kitchen lights.", True), ("Good night!", True), ("Short.", False))]
    assert {len(exact.prompt(v)) % 7 for v, _ in voices} == {1, 3}  # 29, 22: a last row alone; 10
    one_call = run_all(exact, "python", False, voices + voices)
    chunked = replace(CONFIG, prefill_chunk=7)
    for runner, cache in (("python", False), ("python", True), ("auto", False), ("auto", True)):
        assert_same(run_all(exact, runner, cache, voices + voices, chunked), one_call)


def test_with_a_u8_cache_the_prefix_is_a_prefill_chunk(u8):
    """With a u8 KV cache the text positions see the prefix quantized, as every later frame
    does (without the cache, one call sees it exact): the codes are those of a prefill chunked
    at the cached prefix, in both runners, cold or warm."""
    k = prefix_len(u8, RYAN) - 1
    ryan = [(v, seed) for v, seed in VOICES if v.speaker == "ryan"]
    chunked = run_all(u8, "python", False, ryan, replace(CONFIG, prefill_chunk=k))
    for runner in RUNNERS:
        assert_same(run_all(u8, runner, True, ryan, replace(CONFIG, prefill_chunk=k)), chunked)


@pytest.mark.parametrize("runner", RUNNERS)
def test_voices_languages_and_speaker_vectors_have_entries_of_their_own(u8, converted_factory, runner):
    engine = Engine(u8, runner)
    try:
        voices = [RYAN, replace(RYAN, language="german"), replace(RYAN, language="auto"),
                  replace(RYAN, speaker="vivian"), replace(RYAN, text=TEXTS[1])]
        for voice in voices + voices:
            engine.speak(voice)
        assert engine.pool.prefixes == 4
        assert [cached > 0 for cached, _ in engine.started] == [False] * 4 + [True] * 6
    finally:
        engine.close()
    base = LoadedModel(converted_factory("tiny", "base", "int8"), precision="f32", kv_precision="u8")
    engine = Engine(base, runner)
    try:
        rng = np.random.default_rng(0)
        vectors = [rng.standard_normal(64).astype(np.float32) for _ in range(2)]
        for vector in vectors + vectors:
            engine.speak(VoiceRequest("Hello there.", "english", speaker_vector=vector))
        assert engine.pool.prefixes == 2
        assert [cached > 0 for cached, _ in engine.started] == [False, False, True, True]
    finally:
        engine.close()


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_tiny_pool_evicts_prefixes_and_never_refuses_a_request(u8, runner):
    """Four blocks: a short request (2 blocks) leaves room to pin its prefix, a long one
    (all 4) takes the pinned block back; two at once wait for each other as without the
    cache. At most 16 prefixes."""
    speakers = ["ryan", "vivian", "serena", "dylan"]
    engine = Engine(u8, runner, replace(CONFIG, kv_blocks=4, max_frames=100, min_frames=100))
    vivian = replace(RYAN, speaker="vivian")
    try:
        engine.speak(RYAN, max_frames=20)
        assert engine.pool.pinned == 1
        codes, _ = engine.speak(vivian)  # reserves every block: evicts ryan's prefix
        assert codes.shape[0] > 0 and engine.pool.pinned == 0
        engine.speak(RYAN, max_frames=20)
        engine.speak(RYAN, max_frames=20)
        assert [cached > 0 for cached, _ in engine.started] == [False, False, False, True]
        streams = [engine.sched.submit(RYAN, greedy(u8), max_frames=20), engine.sched.submit(vivian, greedy(u8))]
        for _ in range(600):
            if all(s.done for s in streams):
                break
            engine.sched.tick()
        assert [s.result.reason for s in streams] == ["length"] * 2 and engine.pool.pinned == 0
        assert [cached > 0 for cached, _ in engine.started[-2:]] == [True, False]
        engine.assert_idle()
    finally:
        engine.close()
    engine = Engine(u8, runner, replace(CONFIG, max_frames=1))
    try:
        languages = ["english", "german", "auto", "french", "spanish"]
        voices = [VoiceRequest("Hi.", lang, speaker) for speaker in speakers for lang in languages]
        for voice in voices:
            engine.speak(voice)
        assert engine.pool.prefixes == 16 and engine.pool.pinned == 16
        engine.speak(voices[-1])
        engine.speak(voices[0])  # evicted (least recently used)
        assert [cached > 0 for cached, _ in engine.started[-2:]] == [True, False]
    finally:
        engine.close()


def test_the_cache_is_only_on_a_cpu_talker_and_when_asked(u8):
    schedule = ChunkSchedule(1, 8)
    assert open_batch(u8, replace(CONFIG, backend="python"), schedule).prefix_cache
    assert not open_batch(u8, replace(CONFIG, backend="python", prefix_cache=False), schedule).prefix_cache
    native = open_batch(u8, replace(CONFIG, backend="auto", prefix_cache=False), schedule)
    try:
        assert not native.prefix_cache
    finally:
        native.runner.close()


# --- the pool --------------------------------------------------------------------------------


def test_pinned_blocks_are_free_able():
    pool = BlockPool(4, 32, prefix_entries=2)
    assert pool.pin(b"a", 1) == [0] and pool.pin(b"a", 1) is None and pool.pin(b"b", 2) == [1, 2]
    assert pool.free == 4 and pool.pinned == 3 and pool.used == 0 and pool.available == 4
    pool.reserve(1, 64)  # 2 blocks: the free list has 1, so the least recent prefix goes
    assert pool.lookup(b"a") is None and pool.lookup(b"b") == [1, 2] and pool.pinned == 2
    assert pool.pin(b"c", 3) is None  # promised to sequence 1
    assert pool.grow(1, 64) == [0, 3] and pool.used == 2
    pool.reserve(2, 32)  # evicts b
    assert pool.pinned == 0 and pool.prefixes == 0
    pool.release(1)
    pool.release(2)
    assert pool.pin(b"c", 1) and pool.pin(b"d", 1) and pool.lookup(b"c") and pool.pin(b"e", 1)
    assert pool.lookup(b"d") is None and pool.prefixes == 2  # two entries at most, least recent out
    pool.unpin_all()
    assert pool.free == 4 and pool.pinned == 0
