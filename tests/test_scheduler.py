"""The scheduler: continuous batching, streams, aborts, guards, metrics."""
from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import numpy as np
import pytest

from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.engine.stream import EngineBusy, EngineError, RequestAborted, RequestTimeout
from wyoming_qwen3tts.model.prompt import PromptError, VoiceRequest

REQUESTS = [  # (text, language, speaker, seed or None for greedy)
    ("Hello there, how are you today?", "english", "ryan", None),
    ("The weather will be sunny.", "english", "vivian", 3),
    ("Turn on the kitchen lights.", "auto", "serena", 7),
    ("A longer sentence, with a clause or two, to make a longer prompt.", "english", "ryan", 11),
    ("Short.", "english", "uncle_fu", None),
    ("Guten Morgen, wie geht es dir?", "german", "vivian", 5),
    ("Timer set for ten minutes.", "english", "dylan", None),
    ("Good night!", "auto", "eric", 13),
]


@pytest.fixture(scope="module")
def model(converted_factory):
    return LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8")


def params_for(model: LoadedModel, seed: int | None) -> SamplingParams:
    params = SamplingParams.from_defaults(model.spec.generation, seed=seed)
    return params.greedy() if seed is None else params


def tick_until_done(sched: Scheduler, streams, limit: int = 500) -> list[int]:
    """Drive the scheduler by hand; returns stream ids in the order they finished."""
    order: list[int] = []
    for _ in range(limit):
        sched.tick()
        order += [s.id for s in streams if s.done and s.id not in order]
        if len(order) == len(streams):
            return order
    raise AssertionError("requests did not finish")


def assert_pool_full(sched: Scheduler) -> None:
    pool = sched.batch.pool
    assert pool.free == pool.num_blocks and pool.available == pool.num_blocks and not pool.tables
    assert not sched.batch.active


def test_eight_concurrent_requests_give_the_audio_each_gives_alone(converted_factory):
    """Bit for bit, with one inference thread: with more, the CPU plugin's paged attention
    adds per-thread partial sums in an order that depends on the batch (last-bit changes
    that flat random-weight logits turn into different greedy codes after a few frames)."""
    model = LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8",
                        threads=1)
    config = EngineConfig(max_batch=8, kv_blocks=64, first_chunk=1, steady_chunk=8, prefill_chunk=8, max_frames=24)
    alone = []
    with Scheduler(model, config) as sched:
        for i, (text, lang, speaker, seed) in enumerate(REQUESTS):
            stream = sched.submit(VoiceRequest(text, lang, speaker), params_for(model, seed), max_frames=10 + 2 * i)
            alone.append((stream.read_all(timeout=60), stream.result))
    with Scheduler(model, config) as sched:
        streams = [sched.submit(VoiceRequest(t, lang, spk), params_for(model, seed), max_frames=10 + 2 * i)
                   for i, (t, lang, spk, seed) in enumerate(REQUESTS)]
        together = [(s.read_all(timeout=120), s.result) for s in streams]
        deadline = time.monotonic() + 10  # a stream ends mid-tick; the metrics snapshot follows at its end
        while sched.metrics().active and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sched.metrics().active == 0
        assert_pool_full(sched)
    lengths = set()
    for (pcm_alone, res_alone), (pcm_together, res_together) in zip(alone, together):
        np.testing.assert_array_equal(res_alone.codes, res_together.codes)
        np.testing.assert_array_equal(pcm_together, pcm_alone)
        assert pcm_alone.size == res_alone.frames * 1920 == res_alone.samples and res_alone.frames > 0
        assert res_alone.reason in ("eos", "length") and res_alone.ttfa_s is not None
        lengths.add(res_alone.frames)
    assert len(lengths) > 1  # the batch really mixed sequences of different lengths


def test_chunks_stream_in_order_and_the_last_is_final(model):
    config = EngineConfig(kv_blocks=16, first_chunk=1, steady_chunk=8, max_frames=14)
    with Scheduler(model, config) as sched:
        stream = sched.submit(VoiceRequest("Hello there, how are you?", "english", "ryan"), params_for(model, None))
        chunks = list(stream)
        assert list(stream) == []  # the end stays the end
    sizes = [c.pcm.size // 1920 for c in chunks]
    assert sizes[0] == 1 and all(n <= 8 for n in sizes) and sum(sizes) == stream.result.frames
    assert [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]


def test_async_iteration(model):
    async def consume(sched: Scheduler) -> tuple[int, bool]:
        stream = sched.submit(VoiceRequest("Good morning.", "english", "vivian"), params_for(model, 1))
        chunks = [c async for c in stream]
        return sum(c.pcm.size for c in chunks), chunks[-1].final

    with Scheduler(model, EngineConfig(kv_blocks=16, max_frames=10, steady_chunk=8)) as sched:
        samples, final = asyncio.run(consume(sched))
    assert samples > 0 and final


def test_abort_mid_generation_and_mid_prefill_frees_every_block(model):
    sched = Scheduler(model, EngineConfig(kv_blocks=32, prefill_chunk=4, max_frames=30, steady_chunk=8))
    long_prompt = VoiceRequest("A long request whose prompt takes several prefill calls.", "english", "ryan")
    generating = sched.submit(VoiceRequest("Hello there.", "english", "vivian"), params_for(model, None))
    for _ in range(8):
        sched.tick()
    prefilling = sched.submit(long_prompt, params_for(model, 2))
    sched.tick()
    seqs = {r.id: r.seq for r in sched._running.values()}
    assert seqs[prefilling.id].pending is not None and seqs[prefilling.id].cached == 4  # mid-prefill
    assert seqs[generating.id].num_frames >= 5  # mid-generation
    generating.cancel()
    sched.abort(prefilling.id)
    sched.tick()
    for stream in (generating, prefilling):
        assert stream.done and stream.result.reason == "aborted"
        with pytest.raises(RequestAborted):
            stream.read_all(timeout=1)
    assert generating.result.frames >= 5
    assert_pool_full(sched)


def test_random_submit_abort_cycles_leak_no_block(model):
    rng = np.random.default_rng(0)
    sched = Scheduler(model, EngineConfig(kv_blocks=12, max_batch=4, max_queue=8, prefill_chunk=6, max_frames=12,
                                          steady_chunk=8))
    live = []
    for _ in range(200):
        action = rng.random()
        if action < 0.45 and len(live) < 8:
            text, lang, speaker, seed = REQUESTS[rng.integers(len(REQUESTS))]
            live.append(sched.submit(VoiceRequest(text, lang, speaker), params_for(model, seed)))
        elif action < 0.7 and live:
            live[rng.integers(len(live))].cancel()
        for _ in range(rng.integers(0, 4)):
            sched.tick()
        live = [s for s in live if not s.done]
    for stream in live:
        stream.cancel()
    sched.tick()
    assert all(s.done for s in live)
    assert_pool_full(sched)
    metrics = sched.metrics()
    assert metrics.blocks_used == 0 and metrics.active == 0 and metrics.queue_depth == 0
    assert metrics.ends.get("aborted", 0) > 10 and metrics.ends.get("eos", 0) + metrics.ends.get("length", 0) > 10
    times = metrics.times
    assert times.steps > 50 and min(times.talker_s, times.subcode_s, times.codec_s, times.host_s) > 0
    assert metrics.frames_total > 0 and metrics.requests_done >= metrics.ends["aborted"]


def test_a_small_pool_serves_everyone_in_admission_order(model):
    sched = Scheduler(model, EngineConfig(kv_blocks=2, max_batch=8, max_frames=20, steady_chunk=8))
    assert sched.batch.pool.blocks_for(len(model.prompt(VoiceRequest(REQUESTS[0][0], "english", "ryan"))) + 20) == 2
    streams = [sched.submit(VoiceRequest(t, lang, spk), params_for(model, seed)) for t, lang, spk, seed in REQUESTS[:5]]
    sched.tick()
    assert sched.metrics().active == 1 and sched.metrics().queue_depth == 4  # one fits at a time
    order = tick_until_done(sched, streams)
    assert order == [s.id for s in streams]
    assert all(s.result.reason in ("eos", "length") and s.result.frames > 0 for s in streams)
    assert [s.result.queued_s for s in streams] == sorted(s.result.queued_s for s in streams)
    assert_pool_full(sched)


def test_a_full_queue_is_a_clear_busy_error(model):
    sched = Scheduler(model, EngineConfig(kv_blocks=8, max_queue=2))
    for _ in range(2):
        sched.submit(VoiceRequest("Hi.", "english", "ryan"))
    with pytest.raises(EngineBusy, match="busy"):
        sched.submit(VoiceRequest("Hi.", "english", "ryan"))
    sched.close()


def test_bad_requests_fail_at_submit_and_leave_nothing_behind(model):
    sched = Scheduler(model, EngineConfig(kv_blocks=1))
    with pytest.raises(PromptError, match="unknown speaker"):
        sched.submit(VoiceRequest("Hi.", "english", "nobody"))
    with pytest.raises(ValueError, match="does not fit the KV cache"):
        sched.submit(VoiceRequest("word " * 60, "english", "ryan"))
    assert sched.metrics().queue_depth == 0 and not sched._waiting


def test_the_frame_cap_stops_a_request_without_eos(model):
    """The cap follows the text length: min_frames + frames_per_token x tokens."""
    config = EngineConfig(kv_blocks=16, min_frames=3, frames_per_token=2.0, max_frames=100, steady_chunk=8)
    text = "Hello there."
    tokens = len(model.tokenizer.encode(text))
    loose = Scheduler(model, replace(config, min_frames=60))
    unbounded = loose.submit(VoiceRequest(text, "english", "ryan"), params_for(model, None))
    tick_until_done(loose, [unbounded])
    sched = Scheduler(model, config)
    assert unbounded.result.frames > config.frame_cap(tokens), "this prompt must run past the cap to test it"
    capped = sched.submit(VoiceRequest(text, "english", "ryan"), params_for(model, None))
    tick_until_done(sched, [capped])
    assert capped.result.reason == "length" and capped.result.frames == 3 + 2 * tokens
    np.testing.assert_array_equal(capped.result.codes, unbounded.result.codes[:capped.result.frames])
    assert_pool_full(sched)


def test_timeouts_end_requests_waiting_or_running(model):
    sched = Scheduler(model, EngineConfig(kv_blocks=2, max_frames=40, steady_chunk=8))
    # timeouts well above a step's time: a first step may meet a collector's pass over the
    # earlier tests' engines (measured up to ~1 s on a busy 2-core host)
    running = sched.submit(VoiceRequest("Hello there.", "english", "ryan"), params_for(model, None), timeout=3.0)
    waiting = sched.submit(VoiceRequest("Hello again.", "english", "ryan"), params_for(model, None), timeout=2.0)
    sched.tick()
    sched.tick()  # a voice's first request feeds its prompt prefix alone first (the prefix cache)
    assert sched.metrics().active == 1 and sched.metrics().queue_depth == 1
    time.sleep(3.05)
    sched.tick()
    for stream in (running, waiting):
        assert stream.result.reason == "timeout"
        with pytest.raises(RequestTimeout, match="timed out"):
            stream.read_all(timeout=1)
    assert running.result.frames > 0 and waiting.result.frames == 0
    assert_pool_full(sched)


def test_a_failing_step_reaches_the_streams_not_the_engine(model, monkeypatch):
    with Scheduler(model, EngineConfig(kv_blocks=16, max_frames=8, steady_chunk=8)) as sched:
        real = sched.runner.forward
        monkeypatch.setattr(sched.runner, "forward", lambda plan: (_ for _ in ()).throw(RuntimeError("device lost")))
        doomed = sched.submit(VoiceRequest("Hello.", "english", "ryan"), params_for(model, None))
        with pytest.raises(EngineError, match="device lost"):
            doomed.read_all(timeout=30)
        monkeypatch.setattr(sched.runner, "forward", real)
        fine = sched.submit(VoiceRequest("Hello.", "english", "ryan"), params_for(model, None))
        assert fine.read_all(timeout=30).size > 0
        assert_pool_full(sched)


def test_the_idle_engine_sleeps(model):
    with Scheduler(model, EngineConfig(kv_blocks=8)) as sched:
        calls = []
        real = sched.tick
        sched.tick = lambda: (calls.append(1), real())[1]
        time.sleep(0.3)
        assert calls == []
        sched.submit(VoiceRequest("Hi.", "english", "ryan"), params_for(model, None), max_frames=3).read_all(30)
        assert 0 < len(calls) < 20
        settled = len(calls)
        time.sleep(0.3)
        assert len(calls) == settled


def test_close_aborts_what_is_left(model):
    sched = Scheduler(model, EngineConfig(kv_blocks=8)).start()
    with pytest.raises(RuntimeError, match="already started"):
        sched.start()  # a second loop over the same runner
    stream = sched.submit(VoiceRequest("Hello there, a sentence.", "english", "ryan"), params_for(model, None))
    sched.close()
    assert stream.done
    if stream.result.reason == "aborted":
        with pytest.raises(RequestAborted):
            stream.read_all(timeout=1)
    with pytest.raises(EngineError, match="shutting down"):
        sched.submit(VoiceRequest("Hi.", "english", "ryan"))
    assert_pool_full(sched)


def test_an_async_reader_whose_loop_closes_does_not_stop_the_engine(model):
    with Scheduler(model, EngineConfig(kv_blocks=32, max_frames=30, min_frames=30, steady_chunk=8)) as sched:
        bystander = sched.submit(VoiceRequest("A bystander.", "english", "vivian"), params_for(model, None))

        async def leave_after_one_chunk() -> None:
            async for _ in sched.submit(VoiceRequest("Hello there, how are you?", "english", "ryan"),
                                        params_for(model, None)):
                break  # gives up without cancel(); its loop then closes

        asyncio.run(leave_after_one_chunk())
        assert bystander.read_all(timeout=60).size > 0
        later = sched.submit(VoiceRequest("Anyone there?", "english", "ryan"), params_for(model, None), max_frames=3)
        assert later.read_all(timeout=60).size == 3 * 1920
        deadline = time.monotonic() + 30
        while sched.metrics().blocks_used and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sched.metrics().ends.get("aborted") == 1 and sched.metrics().blocks_used == 0


def test_text_layout_streaming_puts_one_text_token_before_the_first_frame(model):
    """engine.text_layout streaming gives a request without a layout of its own the streaming
    layout (its prompt one position after the voice's prefix, whatever the text's length):
    the codes of that layout asked for by the request; non_streaming and auto keep the model
    type's default (non-streaming for CustomVoice), a request's own choice always wins."""
    text = "Turn on the kitchen lights in the living room, please."
    params = replace(params_for(model, None), min_frames=10)

    def codes(layout: str, non_streaming: bool | None) -> np.ndarray:
        sched = Scheduler(model, EngineConfig(kv_blocks=64, text_layout=layout))
        try:
            stream = sched.submit(VoiceRequest(text, "english", "ryan", non_streaming=non_streaming), params,
                                  max_frames=10)
            tick_until_done(sched, [stream])
            return stream.result.codes
        finally:
            sched.close()

    streaming = codes("streaming", None)
    np.testing.assert_array_equal(streaming, codes("auto", False))
    default = codes("auto", None)
    assert not np.array_equal(streaming, default)
    np.testing.assert_array_equal(codes("non_streaming", None), default)
    np.testing.assert_array_equal(codes("streaming", True), default)
    prompt = model.prompt(VoiceRequest(text, "english", "ryan", non_streaming=False))
    assert len(prompt) == prompt.prefix_len + 1
    with pytest.raises(ValueError, match="text_layout"):
        EngineConfig(text_layout="sideways").validate()
