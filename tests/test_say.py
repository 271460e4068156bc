"""qwen3tts-say end to end: the same samples whatever the chunk schedule, or offline."""
from __future__ import annotations

import numpy as np
import pytest
from generate import generate_codes
from signals import read_wav

from wyoming_qwen3tts.convert.pipeline import convert
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.step import ChunkSchedule
from wyoming_qwen3tts.model.prompt import VoiceRequest
from wyoming_qwen3tts.say import main as say


@pytest.fixture(scope="module")
def converted(checkpoint_factory, tmp_path_factory):
    return convert(checkpoint_factory("tiny", "custom_voice", dtype="float32"),
                   tmp_path_factory.mktemp("say") / "ov", weights="fp32")


def test_schedules_and_offline_write_the_same_samples(converted, tmp_path):
    outputs = []
    for name, options in [("a", ["--first-chunk", "1", "--steady-chunk", "8"]),
                          ("b", ["--first-chunk", "4", "--steady-chunk", "24"]), ("c", ["--offline"])]:
        wav = tmp_path / f"{name}.wav"
        assert say(["Hello world, this is streamed audio.", "--model", str(converted), "--voice", "ryan",
                    "--language", "english", "--greedy", "--precision", "f32", "--kv-precision", "f32",
                    "--max-frames", "37", "-o", str(wav), "--save-codes", str(tmp_path / f"{name}.npy")] + options) == 0
        samples, rate = read_wav(wav)
        assert rate == 24000
        outputs.append(samples.astype(np.int32))
        assert np.load(tmp_path / f"{name}.npy").shape == (37, 16)
    assert outputs[0].shape == (37 * 1920,) and np.abs(outputs[0]).max() > 1000
    assert np.array_equal(outputs[0], outputs[1])  # both streaming schedules: identical samples
    # offline vs streaming: the same float PCM to ~1e-6, so at most a rounding flip of 1 LSB
    assert np.abs(outputs[0] - outputs[2]).max() <= 1


@pytest.fixture(scope="module")
def model(converted):
    return LoadedModel(converted, precision="f32", kv_precision="f32")


def test_streaming_audio_in_a_batch_equals_offline(model):
    requests = [VoiceRequest("One two three.", "english", "ryan"),
                VoiceRequest("A somewhat longer sentence for the second stream.", "auto", "vivian",
                             non_streaming=False),
                VoiceRequest("Third.", "english", "aiden")]
    params = [SamplingParams.from_defaults(model.spec.generation, max_new_tokens=n, seed=i).greedy()
              for i, n in enumerate((11, 30, 19))]
    embeds = [model.embed_prompt(model.prompt(r)) for r in requests]
    for schedule in (ChunkSchedule(1, 8), ChunkSchedule(2, 24), ChunkSchedule(4, 8)):
        for seq in generate_codes(model, embeds, params, schedule=schedule):
            assert seq.pcm.shape == (seq.num_frames * 1920,)
            np.testing.assert_allclose(seq.pcm, model.decode_offline(seq.codes), atol=1e-5, rtol=0)


def test_unknown_chunk_size_is_a_clear_error(model):
    embeds = model.embed_prompt(model.prompt(VoiceRequest("Hi.", "english", "ryan")))
    # a steady chunk longer than every exported steady graph (a shorter one decodes through a longer graph)
    with pytest.raises(ValueError, match="no codec graphs for chunks first=1 steady=32"):
        generate_codes(model, [embeds], [SamplingParams()], schedule=ChunkSchedule(1, 32))


def test_several_texts_run_together_and_match_each_alone(converted, tmp_path):
    common = ["--model", str(converted), "--voice", "vivian", "--language", "english", "--seed", "4",
              "--precision", "f32", "--kv-precision", "f32", "--threads", "1", "--max-frames", "20"]
    texts = ["First text.", "A second, longer text to say.", "Third!"]
    listing = tmp_path / "texts.txt"
    listing.write_text(f"{texts[1]}\n\n{texts[2]}\n", encoding="utf-8")
    assert say([texts[0], "--text-file", str(listing), "-o", str(tmp_path / "all.wav")] + common) == 0
    for i, text in enumerate(texts):
        alone = tmp_path / f"alone{i}.wav"
        seed = ["--seed", str(4 + i)]
        assert say([text, "-o", str(alone)] + common + seed) == 0
        together, _ = read_wav(tmp_path / f"all-{i + 1}.wav")
        assert together.size > 0 and np.array_equal(together, read_wav(alone)[0])
    assert not (tmp_path / "all.wav").exists()


def test_say_reports_bad_input_without_a_traceback(converted, tmp_path, caplog):
    args = ["Hi.", "--model", str(converted), "--voice", "nobody", "-o", str(tmp_path / "x.wav")]
    assert say(args) == 2
    assert "unknown speaker 'nobody'" in caplog.text and not (tmp_path / "x.wav").exists()


def test_auto_is_the_default_and_reaches_the_offline_decoder(converted, tmp_path, caplog):
    """The default precision is auto: every graph gets what auto picks for it on this CPU,
    the offline decoder (compiled on first use) too."""
    import openvino as ov

    from wyoming_qwen3tts.engine.devices import GRAPHS, device_capabilities, fastest_precision
    from wyoming_qwen3tts.say import parse_args

    assert parse_args(["Hi.", "--model", str(converted), "-o", "x.wav"]).precision == "auto"
    capabilities = device_capabilities(ov.Core(), "CPU")
    expected = ", ".join(f"{graph} CPU {fastest_precision('CPU', capabilities, graph)}" for graph in GRAPHS)
    wav = tmp_path / "auto.wav"
    with caplog.at_level("INFO"):
        assert say(["Hello there.", "--model", str(converted), "--voice", "ryan", "--greedy", "--max-frames", "6",
                    "--offline", "-o", str(wav)]) == 0
    assert f"{expected} (precision auto" in caplog.text
    assert read_wav(wav)[0].shape == (6 * 1920,)


def test_an_f32_kv_cache_needs_f32_compute(converted, tmp_path, caplog):
    args = ["Hi.", "--model", str(converted), "--voice", "ryan", "--precision", "bf16", "--kv-precision", "f32",
            "-o", str(tmp_path / "x.wav")]
    assert say(args) == 2
    assert "an f32 KV cache needs f32 compute" in caplog.text and "Traceback" not in caplog.text
