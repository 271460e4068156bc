"""Short codec chunks for a paced stream (engine/pacing.py): the decision from measured costs,
and, simulated against a listener who starts playing at the first audio, that it never leaves
a gap where short chunks keep up while it still moves on to long chunks once it is ahead."""
from __future__ import annotations

import numpy as np
import pytest

from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.pacing import MARGIN_S, WINDOW, Pacer
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import open_batch
from wyoming_qwen3tts.engine.step import ChunkSchedule, short_chunks_carry_on
from wyoming_qwen3tts.model.prompt import VoiceRequest
from wyoming_qwen3tts.server.holdback import Holdback

FRAME_S = 0.08


def pacer(step: float | None = 0.04, short: float | None = 0.025, long: float | None = 0.075) -> Pacer:
    p = Pacer(short=1, steady=8, frame_s=FRAME_S)
    if step is not None:
        p.generated(1, step)
    if short is not None:
        p.decoded(1, 1, short)
    if long is not None:
        p.decoded(8, 1, long)
    return p


def test_nothing_is_decided_before_both_costs_are_measured():
    assert not pacer(step=None).short_due(1, 0.0, 1)
    assert not pacer(short=None).short_due(1, 0.0, 1)
    assert pacer(step=None).short_rate(1) is None
    assert pacer().short_rate(2) is None  # measured at one sequence, not two


def test_short_chunks_while_they_are_at_least_as_fast_as_real_time():
    assert pacer(step=0.04, short=0.025).keeps_up(1)  # 65 ms per 80 ms frame
    assert pacer(step=0.05, short=0.025).keeps_up(1)  # 75 ms: only just, still better than a long chunk's wait
    assert pacer(step=0.055, short=0.025).keeps_up(1)  # 80 ms: real time
    assert not pacer(step=0.06, short=0.025).keeps_up(1)  # 85 ms
    assert not pacer(step=0.06, short=0.025).short_due(1, 0.0, 1)


def test_with_several_sequences_every_step_runs_each_ones_short_call():
    p = pacer(step=0.03, short=0.02)
    p.generated(2, 0.045)
    assert p.short_rate(1) == pytest.approx(1 / 0.05) and p.keeps_up(1)
    assert p.short_rate(2) == pytest.approx(1 / 0.085) and not p.keeps_up(2)  # 45 + 2 x 20 ms per frame
    p.generated(3, 0.0)  # (a made-up free step) the wait for a long chunk counts the others' short calls
    wait = (8 - 1) * 2 * 0.02 + 0.075
    assert p.short_due(3, wait + MARGIN_S - 0.001, 1) and not p.short_due(3, wait + MARGIN_S + 0.001, 1)


def test_short_while_the_lead_would_not_cover_the_wait_for_a_long_chunk():
    p = pacer(step=0.04, short=0.025, long=0.075)
    wait = (8 - 3) * 0.04 + 0.075  # five more frames, then the long call
    assert p.short_due(1, wait + MARGIN_S - 0.001, 3)
    assert not p.short_due(1, wait + MARGIN_S + 0.001, 3)
    # a long call not measured yet is taken at the short call's cost per frame
    assert pacer(long=None).short_due(1, 5 * 0.04 + 8 * 0.025 + MARGIN_S - 0.001, 3)
    two = Pacer(short=2, steady=8, frame_s=FRAME_S)  # a 2-frame short graph: still a whole call per frame
    two.generated(1, 0.04)
    two.decoded(2, 1, 0.045)
    assert two.short_rate(1) == pytest.approx(1 / 0.085) and not two.keeps_up(1)
    assert not pacer(long=None).short_due(1, 5 * 0.04 + 8 * 0.025 + MARGIN_S + 0.001, 3)


def test_several_ready_frames_take_the_cheaper_of_short_calls_and_one_long_call():
    p = pacer(short=0.025, long=0.075)
    assert p.call_size(1) == 1 and p.call_size(2) == 1  # 50 ms against 75
    assert p.call_size(4) == 8  # 100 ms against 75


def test_estimates_are_medians_of_recent_calls_so_a_cold_first_call_does_not_count():
    p = Pacer(short=1, steady=8, frame_s=FRAME_S)
    p.decoded(1, 1, 0.5)  # the first call of a process: allocations, caches cold
    for _ in range(2):
        p.decoded(1, 1, 0.02)
    p.generated(1, 0.04)
    assert p.short_rate(1) == pytest.approx(1 / 0.06)
    for _ in range(WINDOW):
        p.decoded(1, 2, 0.08)  # two streams per call: per stream
    assert p.short_rate(1) == pytest.approx(1 / 0.08)


def listen(step: float, short: float, long: float, frames: int) -> tuple[float, list[int]]:
    """Simulate one paced stream: a step makes a frame in `step` s, a decoder call of n frames
    costs `short` (n = 1) or `long` (n up to 8), as the batch runs them (engine/batch.py: the
    first chunk short, then long ones when full, or what the pacer asks for). Returns the
    longest a listener who started at the first audio waited, and the chunk sizes."""
    p, t, made, decoded, first = Pacer(short=1, steady=8, frame_s=FRAME_S), 0.0, 0, 0, None
    dry, chunks = 0.0, []
    while decoded < frames:
        t += step
        made += 1
        p.generated(1, step)
        while True:
            ready = made - decoded
            if decoded == 0 or ready >= 8 or (made == frames and ready > 0):
                size = 1 if decoded == 0 else 8
            elif ready > 0 and first is not None and p.short_due(1, decoded * FRAME_S - (t - first), ready):
                size = p.call_size(ready)
            else:
                break
            n = min(size, ready)
            t += short if size == 1 else long
            p.decoded(size, 1, short if size == 1 else long)
            if first is None:
                first = t
            dry = max(dry, t - (first + decoded * FRAME_S))  # arrives after the audio before it has played
            decoded += n
            chunks.append(n)
    return dry, chunks


@pytest.mark.parametrize("step,short,long", [(0.037, 0.025, 0.075), (0.02, 0.02, 0.05), (0.045, 0.02, 0.07),
                                             (0.05, 0.025, 0.075)])
def test_a_paced_stream_never_runs_dry_where_short_chunks_keep_up(step, short, long):
    dry, chunks = listen(step, short, long, frames=120)
    assert dry <= 0, (dry, chunks)


def test_once_ahead_a_paced_stream_takes_long_chunks_again():
    """62 ms per frame in short chunks: 18 ms ahead per frame, enough for a long chunk's wait
    (7 steps and the call, and the margin: 0.43 s) after ~30 frames."""
    _, chunks = listen(0.037, 0.025, 0.075, frames=120)
    switch = chunks.index(8)
    assert 20 <= switch <= 40 and set(chunks[switch:-1]) == {8}, chunks


def test_where_short_chunks_cannot_keep_up_the_schedule_is_the_plain_one():
    """70 + 30 ms per frame in short chunks is slower than real time: long chunks make the most audio."""
    _, chunks = listen(0.07, 0.03, 0.08, frames=40)
    assert chunks == [1, 8, 8, 8, 8, 7]


@pytest.mark.parametrize("runner", ["auto", "python"])
def test_a_paced_stream_in_short_chunks_has_the_audio_of_long_ones(converted_factory, runner):
    """Through the batch with either runner: a paced sequence told it is behind decodes
    1-frame chunks through the 1-frame steady graph, carrying the decoder state on; its codes
    and PCM are those of the same request in the plain schedule (1, then 8)."""
    model = LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8")
    config = EngineConfig(backend=runner, kv_blocks=16, codec_lead=False)  # chunks of whole frames
    batch = open_batch(model, config, ChunkSchedule(1, 8))
    assert batch.runner.can_pace and batch.pacer is not None
    batch.pacer.short_due = lambda *args: True  # always barely ahead of playback
    params = SamplingParams.from_defaults(model.spec.generation, seed=3, max_new_tokens=19)
    embeds = model.embed_prompt(model.prompt(VoiceRequest("Hello there, how are you?", "english", "ryan")))
    out = {}
    for paced in (False, True):
        seq = batch.add(embeds, params, paced=paced)
        chunks: list[np.ndarray] = []
        for _ in range(200):
            batch.step()
            chunks += seq.take_audio()
            if seq.finished and seq.decoded == seq.num_frames:
                break
        out[paced] = seq.codes, [c.size // 1920 for c in chunks], np.concatenate(chunks)
    (plain_codes, plain_chunks, plain_pcm), (paced_codes, paced_chunks, paced_pcm) = out[False], out[True]
    assert plain_chunks[:3] == [1, 8, 8] and paced_chunks == [1] * sum(plain_chunks)
    assert np.array_equal(plain_codes, paced_codes)
    assert np.abs(plain_pcm - paced_pcm).max() <= 1e-5


def test_runners_pace_only_with_a_steady_graph_of_the_short_length():
    assert short_chunks_carry_on(ChunkSchedule(1, 8), {1, 8})
    assert not short_chunks_carry_on(ChunkSchedule(1, 8), {8})  # a 1-frame call through the 8-frame graph
    assert not short_chunks_carry_on(ChunkSchedule(8, 8), {8})  # no short chunks at all
    assert not short_chunks_carry_on(ChunkSchedule(1, 8, offline=True), {1, 8})


def test_a_stream_only_just_faster_than_real_time_starts_without_the_holdbacks_wait():
    """Issue 38: 57 ms steps and 20 ms 1-frame calls (13 frames/s, a default-preset stream on two
    cores) once made the pacer take long chunks (it asked for 10 % over real time), and the
    holdback then held the start for most of an 8-frame chunk's making. Short chunks keep up, so
    the stream comes in them, and at the pacer's rate its start plays at once."""
    p = pacer(step=0.057, short=0.02, long=0.07)
    assert p.keeps_up(1)
    rate = p.short_rate(1)
    assert rate is not None and 12.5 < rate < 13.75
    hold = Holdback(0.5)
    assert hold.wait_s(made=1, since_first_s=0.0, held=1, tokens=20, chunk=1, expected_rate=rate) == 0.0
    # the long-chunk schedule it replaced: the start waits ~0.5 s, the whole bound
    assert hold.wait_s(made=1, since_first_s=0.0, held=1, tokens=20, chunk=8, expected_rate=rate) > 0.45
