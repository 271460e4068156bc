"""The reference engine: block pool, sampling rules, bad input, precisions."""
from __future__ import annotations

import numpy as np
import pytest
from generate import generate_codes

from wyoming_qwen3tts.convert.pipeline import convert
from wyoming_qwen3tts.engine.batch import Batch
from wyoming_qwen3tts.engine.blocks import BlockPool
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.runner import PythonRunner
from wyoming_qwen3tts.engine.sampling import SamplingParams, process_talker_logits, sample_row
from wyoming_qwen3tts.engine.step import ChunkSchedule
from wyoming_qwen3tts.model.prompt import PromptError, VoiceRequest


def test_block_pool_grows_and_releases():
    pool = BlockPool(4, 32)
    assert pool.grow(1, 33) == [0, 1] and pool.free == 2
    assert pool.grow(1, 64) == [0, 1] and pool.can_grow(2, 64) and not pool.can_grow(2, 65)
    with pytest.raises(MemoryError, match="exhausted"):
        pool.grow(2, 100)
    pool.release(1)
    pool.release(1)
    assert pool.free == 4 and pool.used == 0


def test_talker_logit_rules():
    z = np.linspace(-1, 1, 3072).astype(np.float32)
    out = process_talker_logits(z, np.array([0, 3000 - 2048, 2047]), step=0, penalty=2.0, eos=2150, vocab_size=3072)
    assert out[0] == z[0] * 2 and out[2047] == z[2047] / 2  # negative logits grow, positive shrink
    assert out[2150] == -np.inf  # EOS masked in the first frames
    assert np.isinf(out[2048:]).all()  # control ids suppressed
    later = process_talker_logits(z, np.array([], np.int64), step=5, penalty=1.05, eos=2150, vocab_size=3072)
    assert later[2150] == z[2150] and np.isinf(np.delete(later[2048:], 2150 - 2048)).all()
    assert int(np.argmax(later)) == 2150
    held = process_talker_logits(z, np.array([], np.int64), step=5, penalty=1.0, eos=2150, vocab_size=3072,
                                 min_frames=6)
    assert held[2150] == -np.inf  # benchmarks hold EOS off


def test_sampling_rule():
    z = np.array([0.0, 3.0, 2.0, 1.0, -5.0])
    assert sample_row(z, 1.0, top_k=1, top_p=1.0, uniform=0.99) == 1
    assert {sample_row(z, 1.0, 2, 1.0, u) for u in np.linspace(0, 0.999, 50)} == {1, 2}
    assert sample_row(z, 1.0, 0, 0.5, 0.99) == 1  # top-p keeps only the head when it alone reaches p
    draws = [sample_row(z, 1.0, 0, 1.0, u) for u in np.random.default_rng(0).random(4000)]
    p = np.exp(z) / np.exp(z).sum()
    assert np.allclose(np.bincount(draws, minlength=5) / 4000, p, atol=0.03)


@pytest.fixture(scope="module")
def model(converted_factory):
    return LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="u8")


def one_block_batch(model: LoadedModel) -> Batch:
    return Batch(model, PythonRunner(model, ChunkSchedule()), 1, ChunkSchedule())


def test_prompt_longer_than_the_cache(model):
    runner = one_block_batch(model)
    embeds = model.embed_prompt(model.prompt(VoiceRequest("word " * 40, "english", "ryan")))
    with pytest.raises(ValueError, match="does not fit the KV cache"):
        runner.add(embeds, SamplingParams())
    assert runner.pool.free == 1 and not runner.active


def test_unknown_voice_is_a_clear_error(model):
    with pytest.raises(PromptError, match="unknown speaker 'nobody'"):
        model.prompt(VoiceRequest("Hi", speaker="nobody"))


def test_seeded_sampling_is_reproducible_in_any_batch(model):
    params = SamplingParams.from_defaults(model.spec.generation, seed=11, max_new_tokens=13)
    req = model.embed_prompt(model.prompt(VoiceRequest("Hello there.", "english", "ryan")))
    other = model.embed_prompt(model.prompt(VoiceRequest("Something else entirely.", "auto", "vivian")))
    (alone,) = generate_codes(model, [req], [params])
    together = generate_codes(model, [other, req], [SamplingParams.from_defaults(model.spec.generation, seed=5,
                                                                                 max_new_tokens=13), params])
    np.testing.assert_array_equal(alone.codes, together[1].codes)
    (reseeded,) = generate_codes(model, [req], [SamplingParams.from_defaults(model.spec.generation, seed=12,
                                                                             max_new_tokens=13)])
    assert not np.array_equal(alone.codes, reseeded.codes)
    assert alone.codes.shape == (12, 16) and alone.codes.min() >= 0 and alone.codes.max() < 2048


def test_frame_budget_is_cut_to_what_the_cache_can_hold(model):
    runner = one_block_batch(model)
    embeds = model.embed_prompt(model.prompt(VoiceRequest("Hi.", "english", "ryan")))
    seq = runner.add(embeds, SamplingParams.from_defaults(model.spec.generation, max_new_tokens=200).greedy())
    assert seq.max_frames == 32 - embeds.prefill.shape[0]  # the prompt, then one token per frame
    for _ in range(60):
        if not runner.active:
            break
        runner.step()
    assert seq.finished and seq.reason == "length" and seq.num_frames == seq.max_frames
    assert runner.pool.free == 1 and runner.pool.available == 1


def test_chunked_prefill_gives_the_same_codes(converted_factory):
    """A prompt fed over several talker calls (mixed with another sequence's decode rows)
    computes what one call computes. With an f32 cache: with u8, a later chunk sees the
    earlier ones quantized while one call sees them exact, so the numbers differ slightly."""
    model = LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32", kv_precision="f32")
    params = SamplingParams.from_defaults(model.spec.generation, max_new_tokens=9).greedy()
    long = model.embed_prompt(model.prompt(VoiceRequest("A much longer sentence to prefill in pieces.", "english",
                                                        "ryan")))
    short = model.embed_prompt(model.prompt(VoiceRequest("Hi.", "english", "vivian")))
    (whole,) = generate_codes(model, [long], [params])
    chunked = generate_codes(model, [short, long], [params, params], prefill_chunk=5)
    np.testing.assert_array_equal(whole.codes, chunked[1].codes)
    assert whole.codes.shape == (8, 16)


def test_embedding_graph_equals_numpy_for_every_track(checkpoint_factory, tmp_path):
    """The embedding graph (text track, codec track, speaker vector, reference frames) equals
    the numpy embedding that the prompt parity tests check against the official model."""
    from prompt_embedder import PromptEmbedder

    from wyoming_qwen3tts.model.checkpoint import Checkpoint

    src = checkpoint_factory("tiny-1.7b", "base", dtype="float32")
    model = LoadedModel(convert(src, tmp_path / "ov", weights="fp32"), precision="f32", kv_precision="f32")
    rng = np.random.default_rng(0)
    for non_streaming in (False, True):
        req = VoiceRequest("Hello world, clone me.", "english",
                           speaker_vector=rng.standard_normal(64).astype(np.float32),
                           ref_text="The reference words.", ref_codes=rng.integers(0, 2048, (9, 16)),
                           non_streaming=non_streaming)
        prompt = model.prompt(req)
        ours, reference = model.embed_prompt(prompt), PromptEmbedder(Checkpoint(src))(prompt)
        np.testing.assert_allclose(ours.prefill, reference.prefill, atol=1e-5, rtol=0)
        np.testing.assert_allclose(ours.trailing, reference.trailing, atol=1e-5, rtol=0)
