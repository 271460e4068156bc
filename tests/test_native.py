"""The native runner against the Python reference runner: the same codes and PCM."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
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
CONFIG = EngineConfig(kv_blocks=64, prefill_chunk=8, steady_chunk=8, max_frames=26)


@pytest.fixture(scope="module")
def model(converted_factory):
    return LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8",
                       chunks=(1, 8))


def run(model: LoadedModel, runner: str, requests: list) -> list[tuple]:
    """Drive a scheduler by hand (the same interleaving for both runners); returns each
    request's (reason, codes, pcm chunks)."""
    sched = Scheduler(model, replace(CONFIG, runner=runner))
    streams = []
    for i, (text, lang, speaker, seed, _) in enumerate(requests):
        params = SamplingParams.from_defaults(model.spec.generation, seed=seed)
        streams.append(sched.submit(VoiceRequest(text, lang, speaker), params.greedy() if seed is None else params,
                                    max_frames=12 + 2 * i))
    for tick in range(200):
        for stream, request in zip(streams, requests):
            if request[4] == tick:
                stream.cancel()
        sched.tick()
        if all(s.done for s in streams):
            break
    pool = sched.runner.pool
    assert pool.free == pool.num_blocks and not pool.tables and sched.metrics().active == 0
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
    native, python = run(model, "native", requests), run(model, "python", requests)
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
    sched = Scheduler(model, EngineConfig(kv_blocks=1, runner="native"))
    with pytest.raises(ValueError, match="does not fit the KV cache"):
        sched.submit(VoiceRequest("word " * 60, "english", "ryan"))
    times = sched.runner.times
    assert times.steps == 0 and sched.runner.block_size == 32 and sched.runner.kv_block_bytes > 0
