"""The codec lead (engine/codec_lead.py, docs/MODEL.md §8.3): a stream's first 40 ms decoded
ahead of the rest of its first frame, with the same samples, out before the step ends."""
from __future__ import annotations

import numpy as np
import oracle
import pytest
import torch
from ir import round_trip

from wyoming_qwen3tts.convert.codec_stream import build_codec_lead
from wyoming_qwen3tts.convert.ops import Weights
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.pacing import Pacer
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler, open_batch
from wyoming_qwen3tts.engine.sequence import Sequence
from wyoming_qwen3tts.engine.step import ChunkSchedule
from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.manifest import LEAD_GRAPH, LEAD_SAMPLES
from wyoming_qwen3tts.model.prompt import VoiceRequest

FRAME = 1920


def test_lead_graph_gives_the_official_decoders_first_samples(checkpoint_factory, tmp_path) -> None:
    """The first frame through half of the upsampling blocks' work: the official decoder's
    first 960 samples of that frame, whatever frames follow it (the decoder is causal)."""
    tiny = checkpoint_factory("tiny")
    ckpt, w = Checkpoint(tiny), Weights("fp32")
    graph = build_codec_lead(ckpt, w, LEAD_SAMPLES)
    # a fresh stream's zero past is not multiplied: no attention scores (one position), and
    # the 7-tap conv after the front keeps the 2 taps that reach the lead's 2 samples
    assert not [o for o in graph.get_ops() if o.get_type_name() == "Softmax"]
    taps = [o.input_value(1).get_partial_shape()[-1].get_length() for o in graph.get_ops()
            if o.get_type_name() == "Convolution" and o.input_value(1).get_partial_shape()[1].get_length()
            == ckpt.spec.codec_decoder.latent_dim]
    assert 2 in taps, taps
    lead = round_trip(graph, tmp_path / "lead.xml")
    decoder = oracle.load_official(tiny).model.speech_tokenizer.model.decoder
    codes = np.random.default_rng(12).integers(0, 2048, (16, 3))
    with torch.no_grad():
        ref = decoder(torch.from_numpy(codes[None])).numpy()[0, 0]
    got = lead({"codes": codes[None, :, :1]})["pcm"][0]
    assert got.shape == (LEAD_SAMPLES * FRAME // 4,)
    assert np.abs(ref[:got.size]).max() > 1e-3  # a signal, not silence
    assert np.abs(got - ref[:got.size]).max() <= 1e-4
    with pytest.raises(ValueError, match="latent samples"):
        build_codec_lead(ckpt, w, 4)


def test_pacer_lets_the_lead_go_only_where_the_rest_of_the_frame_comes_in_time() -> None:
    pacer = Pacer(1, 8, 0.08)
    assert not pacer.lead_keeps_up(0.04, 1)  # the first-chunk call not measured yet
    pacer.decoded(1, 1, 0.015)
    assert pacer.lead_keeps_up(0.04, 1)
    assert not pacer.lead_keeps_up(0.04, 2)  # two new streams' first chunks: 30 ms > half of 40
    pacer.decoded(1, 1, 0.05)
    pacer.decoded(1, 1, 0.05)  # a slow host: the median is now 50 ms
    assert not pacer.lead_keeps_up(0.04, 1)


@pytest.fixture(scope="module")
def model(converted_factory) -> LoadedModel:
    return LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8")


@pytest.mark.parametrize("runner", ["auto", "python"])
def test_lead_goes_out_mid_step_and_the_stream_keeps_every_sample(model, runner) -> None:
    """With either runner: the lead's 960 samples reach `on_audio` before the frame's whole
    decoding, the rest of the frame follows in the same step without them, and the request's
    codes and PCM are those it has without the lead (f32)."""
    assert LEAD_GRAPH in model.manifest["graphs"]
    params = SamplingParams.from_defaults(model.spec.generation, seed=4, max_new_tokens=12)
    embeds = model.embed_prompt(model.prompt(VoiceRequest("Turn on the kitchen lights.", "english", "ryan")))
    out = {}
    for lead in (False, True):
        batch = open_batch(model, EngineConfig(backend=runner, kv_blocks=16, codec_lead=lead), ChunkSchedule(1, 8))
        assert (batch.lead is not None) == lead and batch.pacer is not None
        batch.pacer.decoded(1, 1, 0.001)  # measured: the frame's decoding comes well within the lead
        seq = batch.add(embeds, params)
        early: list[int] = []

        def on_audio(s: Sequence, early: list[int] = early) -> None:
            early.append(sum(p.size for p in s.audio))

        batch.on_audio = on_audio
        chunks: list[np.ndarray] = []
        for _ in range(100):
            batch.step()
            chunks += seq.take_audio()
            if seq.finished and seq.decoded == seq.num_frames:
                break
        out[lead] = seq.codes, [c.size for c in chunks], np.concatenate(chunks), early
    (codes, sizes, pcm, early), (lead_codes, lead_sizes, lead_pcm, lead_early) = out[False], out[True]
    assert not early and lead_early == [960]
    assert sizes[0] == FRAME and lead_sizes[:2] == [960, FRAME - 960] and lead_sizes[2:] == sizes[1:]
    assert np.array_equal(codes, lead_codes)
    assert np.abs(pcm - lead_pcm).max() <= 1e-5


def test_no_lead_where_it_would_not_help(model) -> None:
    """Not before the first-chunk call is measured, not where it is too slow to follow the
    lead in time, not for a sequence whose first frame is its last (its whole frame is due in
    the same call)."""
    batch = open_batch(model, EngineConfig(kv_blocks=16, codec_lead=True), ChunkSchedule(1, 8))
    assert batch.lead is not None and batch.pacer is not None
    embeds = model.embed_prompt(model.prompt(VoiceRequest("Hello.", "english", "ryan")))
    params = SamplingParams.from_defaults(model.spec.generation).greedy()

    def first_chunk(max_frames: int) -> int:
        seq = batch.add(embeds, params, max_frames=max_frames)
        for _ in range(50):
            batch.step()
            if seq.audio:
                size = seq.audio[0].size
                while not (seq.finished and seq.decoded == seq.num_frames):
                    batch.step()
                return size
        raise AssertionError("no audio")

    batch.pacer._decode.clear()
    assert first_chunk(4) == FRAME  # not measured (this call measures it)
    for _ in range(3):
        batch.pacer.decoded(1, 1, 1.0)
    assert first_chunk(4) == FRAME  # measured too slow
    for _ in range(7):
        batch.pacer.decoded(1, 1, 0.001)
    assert first_chunk(1) == FRAME  # its only frame
    assert first_chunk(4) == 960


def test_scheduler_hands_the_lead_to_the_stream_first(model) -> None:
    sched = Scheduler(model, EngineConfig(kv_blocks=64, codec_lead=True))
    assert sched.batch.pacer is not None
    sched.batch.pacer.decoded(1, 1, 0.001)
    params = SamplingParams.from_defaults(model.spec.generation, seed=2, max_new_tokens=6)
    stream = sched.submit(VoiceRequest("Good night!", "english", "vivian"), params)
    for _ in range(100):
        sched.tick()
        if stream.done:
            break
    sizes = [c.pcm.size for c in stream]
    assert sizes[:2] == [960, FRAME - 960] and sum(sizes) == FRAME * stream.result.frames
