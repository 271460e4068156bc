"""The native runner against the Python reference runner: the same codes and PCM."""
from __future__ import annotations

import gc
import threading
from dataclasses import replace

import numpy as np
import pytest

from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.engine.stream import EngineError
from wyoming_qwen3tts.model.prompt import VoiceRequest

REQUESTS = [  # (text, language, speaker, seed or None for greedy, abort at tick or None)
    ("Hello there, how are you today?", "english", "ryan", None, None),
    ("The weather will be sunny.", "english", "vivian", 3, None),
    ("Turn on the kitchen lights.", "auto", "serena", 7, 6),
    ("A longer sentence, with a clause or two, to make a longer prompt.", "english", "ryan", 11, None),
    ("Short.", "english", "uncle_fu", None, 2),
    ("Guten Morgen, wie geht es dir?", "german", "vivian", 5, None),
    ("Timer set for ten minutes.", "english", "dylan", None, None),
    ("Good night!", "auto", "eric", 13, 9),
]
# without the codec lead, whose use follows measured timings (tests/test_codec_lead.py runs it
# through both runners): the chunks compared here are then the same on both
CONFIG = EngineConfig(kv_blocks=64, prefill_chunk=8, steady_chunk=8, max_frames=26, codec_lead=False)


@pytest.fixture(scope="module")
def model(converted_factory):
    return LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8")


def run(model: LoadedModel, runner: str, requests: list) -> list[tuple]:
    """Drive a scheduler by hand (the same interleaving for both runners); returns each
    request's (reason, codes, pcm chunks)."""
    sched = Scheduler(model, replace(CONFIG, backend=runner))
    try:
        streams = []
        for i, (text, lang, speaker, seed, _) in enumerate(requests):
            params = SamplingParams.from_defaults(model.spec.generation, seed=seed)
            streams.append(sched.submit(VoiceRequest(text, lang, speaker),
                                        params.greedy() if seed is None else params, max_frames=12 + 2 * i))
        for tick in range(200):
            for stream, request in zip(streams, requests):
                if request[4] == tick:
                    stream.cancel()
            sched.tick()
            if all(s.done for s in streams):
                break
        pool = sched.batch.pool
        assert pool.free == pool.num_blocks and not pool.tables and sched.metrics().active == 0
    finally:
        sched.close()  # the graphs go now: an aborted stream's error holds this frame, so `sched` sits in a cycle
    results = []
    for stream in streams:
        chunks = []
        try:
            chunks = [c.pcm for c in stream]
        except Exception as e:  # the aborted ones end with RequestAborted, after their chunks
            assert stream.result.reason == "aborted", e
        results.append((stream.result.reason, stream.result.codes, chunks))
    return results


@pytest.mark.parametrize("count", [1, 8])
def test_native_and_python_runners_give_the_same_codes_and_audio(model, count):
    requests = REQUESTS[:count]
    native, python = run(model, "auto", requests), run(model, "python", requests)
    sampled = 0
    for (reason_n, codes_n, pcm_n), (reason_p, codes_p, pcm_p), request in zip(native, python, requests):
        assert reason_n == reason_p
        np.testing.assert_array_equal(codes_n, codes_p)
        assert len(pcm_n) == len(pcm_p) and all(np.array_equal(a, b) for a, b in zip(pcm_n, pcm_p))
        sampled += request[3] is not None and codes_n.shape[0] > 0
    assert native[0][1].shape[0] > 0
    if count == 8:
        assert {r for r, _, _ in native} == {"aborted", "length"} and sampled >= 3


def test_native_runner_reports_bad_input_like_the_python_one(model):
    sched = Scheduler(model, EngineConfig(kv_blocks=1))
    try:
        with pytest.raises(ValueError, match="does not fit the KV cache"):
            sched.submit(VoiceRequest("word " * 60, "english", "ryan"))
        times = sched.batch.times
        assert times.steps == 0 and sched.runner.block_size == 32 and sched.runner.kv_block_bytes > 0
    finally:
        sched.close()


def greedy_codes(model: LoadedModel, sched: Scheduler, by_hand: bool) -> np.ndarray:
    """Codes of one greedy request, ticked here or read from a started engine."""
    params = SamplingParams.from_defaults(model.spec.generation).greedy()
    stream = sched.submit(VoiceRequest(*REQUESTS[0][:3]), params, max_frames=12)
    while by_hand and not stream.done:
        sched.tick()
    stream.read_all(60)
    return stream.result.codes


def test_runners_freed_by_the_collector_on_another_thread_while_another_engine_infers(converted_factory):
    """An engine nobody closed goes at a collector's pass, in whatever thread runs it and
    whatever that thread was doing, while another engine's step is inside OpenVINO: nothing
    crashes, and the other engine's numbers do not change."""
    def load() -> LoadedModel:  # one each: a model's prompt embedding serves one thread
        return LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8")

    config = replace(CONFIG)
    model, other = load(), load()
    busy = Scheduler(other, config).start()
    stop, codes, errors = threading.Event(), [], []

    def talk() -> None:
        try:
            while not stop.is_set():
                codes.append(greedy_codes(other, busy, by_hand=False))
        except Exception as e:  # the assertion below names it
            errors.append(e)

    talker = threading.Thread(target=talk)
    talker.start()
    try:
        for _ in range(3):
            dropped = Scheduler(model, config)
            codes.append(greedy_codes(model, dropped, by_hand=True))
            dropped.cycle = dropped  # never closed, only the collector can free it
            del dropped
            collector = threading.Thread(target=gc.collect)
            collector.start()
            collector.join()
    finally:
        stop.set()
        talker.join(120)
        busy.close()
    assert not errors and len(codes) > 3
    assert all(np.array_equal(c, codes[0]) for c in codes)


def test_closing_the_runner_mid_generation_waits_for_the_step_and_ends_the_request(model):
    """close() from another thread while the engine thread steps: the step in progress
    finishes on live graphs, the next one fails cleanly and the request ends with an error."""
    config = replace(CONFIG, backend="auto", min_frames=400, max_frames=400, kv_blocks=64)
    sched = Scheduler(model, config).start()
    try:
        params = SamplingParams.from_defaults(model.spec.generation, seed=1, min_frames=390)
        stream = sched.submit(VoiceRequest(*REQUESTS[0][:3]), params, max_frames=400)
        chunks = iter(stream)
        next(chunks)  # generating
        sched.runner.close()
        with pytest.raises(EngineError, match="the runner is closed"):
            for _ in chunks:
                pass
        assert stream.result.frames < 400
        with pytest.raises(RuntimeError, match="the runner is closed"):
            sched.runner.decode([])
        pool = sched.batch.pool
        assert pool.free == pool.num_blocks  # what is left readable: the pool and the times
    finally:
        sched.close()
