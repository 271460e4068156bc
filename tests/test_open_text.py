"""Text that grows while it is spoken (Scheduler.open → Utterance): fed piece by piece at any
pace, a request gives exactly the codes and PCM of the whole text in the streaming layout, in
both runners; it waits (without pads) for text that has not arrived, its frame cap and KV
reservation grow with the text, and every way of ending it returns its blocks."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.engine.stream import EngineBusy, EngineError, RequestAborted, RequestTimeout
from wyoming_qwen3tts.model.prompt import VoiceRequest

RUNNERS = ("python", "auto")
CONFIG = EngineConfig(kv_blocks=64, prefill_chunk=8, first_chunk=1, steady_chunk=8, max_frames=60, min_frames=4,
                      frames_per_token=3.0)  # a cap that grows with the text (4 + 3 per token)
TEXT = "Hello there, the kitchen lights are on now."
VOICE = VoiceRequest("", "english", "ryan")


@pytest.fixture(scope="module")
def model(converted_factory):
    """One inference thread: a sequence's numbers then do not depend on its batch."""
    return LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8", threads=1)


@pytest.fixture(scope="module")
def engines(model):
    """get(runner, config) -> a Scheduler driven by hand, one per runner and config for the
    module (a native runner compiles its graphs); each test leaves its pool full."""
    cache: dict = {}

    def get(runner: str, config: EngineConfig = CONFIG) -> Scheduler:
        config = replace(config, backend=runner)
        if config not in cache:
            cache[config] = Scheduler(model, config)
        return cache[config]

    yield get
    for sched in cache.values():
        sched.close()


def params(model: LoadedModel, seed: int | None) -> SamplingParams:
    p = SamplingParams.from_defaults(model.spec.generation, seed=seed)
    return p.greedy() if seed is None else p


def drain(sched: Scheduler, streams: list, ticks: int = 400) -> None:
    for _ in range(ticks):
        if all(s.done for s in streams):
            return
        sched.tick()
    raise AssertionError("requests did not end")


def assert_pool_full(sched: Scheduler) -> None:
    pool = sched.batch.pool
    assert pool.free == pool.num_blocks and not pool.tables


def whole(sched: Scheduler, text: str, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The whole text at once, in the streaming layout: what pieces must reproduce."""
    stream = sched.submit(replace(VOICE, text=text, non_streaming=False), params(sched.model, seed))
    drain(sched, [stream])
    return stream.result.codes, np.concatenate([c.pcm for c in stream])


def pieced(sched: Scheduler, pieces: list[str], pace: list[int],
           seed: int | None) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Feed piece i after pace[i] ticks (a pace of 0: with the previous one), then finish after
    as many ticks again as the last pace. Returns codes, PCM, and each sequence's frame cap
    after each piece (it grows with the text)."""
    utt = sched.open(VOICE, params(sched.model, seed))
    caps = []
    for piece, wait in zip(pieces, pace):
        for _ in range(wait):
            sched.tick()
        utt.append(piece)
        sched.tick()
        req = sched._running.get(utt.id)
        caps.append(req.seq.max_frames if req is not None else 0)
    for _ in range(pace[-1]):
        sched.tick()
    utt.finish()
    drain(sched, [utt.stream])
    assert_pool_full(sched)
    return utt.stream.result.codes, np.concatenate([c.pcm for c in utt.stream]), caps


def words(text: str) -> list[str]:
    out = text.split(" ")
    return [out[0]] + [" " + w for w in out[1:]]


PACINGS = {  # name -> (pieces, ticks before each piece)
    "word per tick": (words(TEXT), [1] * len(words(TEXT))),
    "characters": (list(TEXT), [0, 1] * (len(TEXT) // 2) + [0] * (len(TEXT) % 2)),
    "split words, slow": (["Hel", "lo th", "ere, the kit", "chen li", "ghts are on no", "w."], [3, 2, 5, 1, 4, 2]),
    "stall of 40 ticks": (words(TEXT)[:3] + ["".join(words(TEXT)[3:])], [1, 1, 1, 40]),
    "all before the first tick": ([TEXT], [0]),
}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("pacing", list(PACINGS))
def test_pieces_at_any_pace_give_the_whole_texts_codes_and_pcm(engines, runner, pacing):
    pieces, pace = PACINGS[pacing]
    codes, pcm = whole(engines(runner), TEXT, None)
    got_codes, got_pcm, caps = pieced(engines(runner), pieces, pace, None)
    assert codes.shape[0] > 5
    np.testing.assert_array_equal(got_codes, codes)
    np.testing.assert_array_equal(got_pcm, pcm)
    if len(pieces) > 3:
        running = [c for c in caps if c]
        assert running == sorted(running) and running[0] < running[-1]  # the cap grew with the text


@pytest.mark.parametrize("runner", RUNNERS)
def test_sampled_requests_continue_their_draws_as_the_cap_grows(engines, runner):
    codes, pcm = whole(engines(runner), TEXT, 5)
    got_codes, got_pcm, _ = pieced(engines(runner), words(TEXT), [2] * len(words(TEXT)), 5)
    np.testing.assert_array_equal(got_codes, codes)
    np.testing.assert_array_equal(got_pcm, pcm)


def test_multibyte_text_split_per_character(engines):
    text = "今天天气很好，我们去公园。"
    voice = VoiceRequest("", "chinese", "vivian")
    sched = engines("auto")
    stream = sched.submit(replace(voice, text=text, non_streaming=False), params(sched.model, None))
    utt = sched.open(voice, params(sched.model, None))
    for ch in text:
        utt.append(ch)
        sched.tick()
    utt.finish()
    drain(sched, [stream, utt.stream])
    np.testing.assert_array_equal(utt.stream.result.codes, stream.result.codes)
    assert_pool_full(sched)


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_sequence_without_its_next_text_sits_out(engines, runner):
    """While the text stops, the sequence makes no frame beyond what its text allows (a pad
    would say the text is over), and the other sequence in the batch keeps going."""
    sched = engines(runner)
    utt = sched.open(VOICE, params(sched.model, None))
    utt.append("Hello there, the")
    other = sched.submit(replace(VOICE, text="Good morning to you all."), params(sched.model, None))
    for _ in range(30):
        sched.tick()
    seq = sched._running[utt.id].seq
    fed = len(sched._running[utt.id].text)
    assert 0 < seq.num_frames <= fed  # frame k needs text token k + 1 (the first is in the prompt)
    assert other.done or sched._running[other.id].seq.num_frames > seq.num_frames
    frames = seq.num_frames
    for _ in range(5):
        sched.tick()
    assert seq.num_frames == frames and not seq.finished
    utt.append(" lights are on.")
    utt.finish()
    drain(sched, [utt.stream, other])
    assert utt.stream.result.frames > frames and utt.stream.result.reason in ("eos", "length")
    assert_pool_full(sched)


@pytest.mark.parametrize("runner", RUNNERS)
def test_cancel_anywhere_returns_every_block(engines, runner):
    sched = engines(runner)
    before = sched.open(VOICE, params(sched.model, None))  # no text yet: waiting, not admitted
    waiting = sched.open(VOICE, params(sched.model, None))
    waiting.append("Hello there")
    for _ in range(8):
        sched.tick()
    assert before.id not in sched._running and sched._running[waiting.id].seq.pending is None  # sitting out
    before.cancel()
    waiting.cancel()
    sched.tick()
    for utt in (before, waiting):
        with pytest.raises(RequestAborted):
            utt.stream.read_all(timeout=5)
    assert_pool_full(sched)


def test_an_empty_text_ends_with_an_error_and_a_bad_voice_fails_at_open(engines):
    sched = engines("python")
    utt = sched.open(VOICE, params(sched.model, None))
    utt.append("   ")
    utt.finish()
    sched.tick()
    with pytest.raises(EngineError, match="nothing to say"):
        utt.stream.read_all(timeout=5)
    assert_pool_full(sched)
    with pytest.raises(ValueError, match="speaker"):
        sched.open(VoiceRequest("", "english", "nobody"))


@pytest.mark.parametrize("runner", RUNNERS)
def test_text_waits_for_blocks_and_a_full_pool_ends_the_newest(engines, runner):
    """Three blocks: two open requests start with one each; the older grows into the third, so
    the newer's text waits for blocks; when the older outgrows the pool too, neither can go
    on, so the newer ends with EngineBusy and the older finishes."""
    sched = engines(runner, replace(CONFIG, kv_blocks=3, max_frames=200, min_frames=4, frames_per_token=2.0))
    pool = sched.batch.pool
    first, second = sched.open(VOICE, params(sched.model, None)), sched.open(VOICE, params(sched.model, None))
    first.append("Hello there,")
    second.append("Good morning,")
    sched.tick()
    assert len(sched._running) == 2 and pool.available == 1
    longer = " the kitchen lights are on and the door"
    first.append(longer)
    sched.tick()
    assert pool.available == 0  # the older one's cap grew into the last block
    second.append(longer)
    for _ in range(30):
        sched.tick()
    assert sched._running[second.id].starved and not sched._running[first.id].starved
    first.append(" is locked now, and the heating is set to twenty one degrees for the night")
    for _ in range(60):
        sched.tick()
        if second.stream.done:
            break
    with pytest.raises(EngineBusy, match="KV cache is full"):
        second.stream.read_all(timeout=5)
    first.finish()
    drain(sched, [first.stream])
    assert first.stream.result.reason in ("eos", "length") and first.stream.result.frames > 20
    assert_pool_full(sched)


def test_a_request_waiting_for_text_times_out(engines):
    sched = engines("python", replace(CONFIG, request_timeout=0.3))
    utt = sched.open(VOICE, params(sched.model, None))
    utt.append("Hello there")
    sched.tick()
    time.sleep(0.35)
    sched.tick()
    with pytest.raises(RequestTimeout):
        utt.stream.read_all(timeout=5)
    assert_pool_full(sched)


def test_the_engine_thread_sleeps_while_text_is_missing_and_wakes_for_it(model):
    with Scheduler(model, replace(CONFIG, backend="python")) as sched:
        utt = sched.open(VOICE, params(model, None))
        utt.append("Hello there, the")
        deadline = time.monotonic() + 30
        while sched.batch.times.steps < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # the sequence now waits for text
        steps = sched.batch.times.steps
        time.sleep(0.3)
        assert sched.batch.times.steps == steps  # no busy loop
        utt.append(" lights are on.")
        utt.finish()
        pcm = utt.stream.read_all(timeout=60)
        assert pcm.size > 0 and sched.batch.times.steps > steps
