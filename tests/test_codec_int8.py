"""The codec decoder with its last blocks' convolutions in INT8 (convert/codec_int8.py), against
the official decoder: streamed chunk by chunk as the runtime decodes, within INT8's error of the
exact audio; run as int8 convolutions by the CPU plugin; and a conversion with them speaks."""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import openvino as ov
import oracle
import pytest
from ir import round_trip

from wyoming_qwen3tts.convert.codec import build_codec_decoder
from wyoming_qwen3tts.convert.codec_int8 import Int8Convs, calibrate, int8_weight
from wyoming_qwen3tts.convert.codec_stream import build_codec_lead, build_codec_steady
from wyoming_qwen3tts.convert.ops import Weights
from wyoming_qwen3tts.convert.pipeline import ConvertError, convert
from wyoming_qwen3tts.engine.codec_stream import CodecStream, StreamingCodec
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.manifest import LEAD_SAMPLES, read_converted
from wyoming_qwen3tts.model.prompt import VoiceRequest

log = logging.getLogger(__name__)

CHUNK, CHUNKS = 8, 5
QUANTIZED = 4 * 7 + 1 - 1  # 4 blocks × (upsampling conv + 3 units × 2 convs) + the last conv, less block 1's upsampling


def snr_db(x: np.ndarray, exact: np.ndarray) -> float:
    """dB of `exact`'s energy over the error's; inf where they are identical."""
    x, exact = x.astype(np.float64), exact.astype(np.float64)
    error = ((x - exact) ** 2).sum()
    return float(10 * np.log10((exact ** 2).sum() / error)) if error > 0 else float("inf")


def stream(compiled: ov.CompiledModel, codes: np.ndarray) -> np.ndarray:
    """codes [1, 16, CHUNKS·CHUNK] decoded chunk by chunk as the runtime does, the state carried: the PCM."""
    codec, state = StreamingCodec({}, {CHUNK: compiled}), CodecStream()
    return np.concatenate([codec.decode([state], [codes[0, :, c * CHUNK:(c + 1) * CHUNK]], CHUNK)[0]
                           for c in range(CHUNKS)])


def test_weights_round_to_int8_per_output_channel() -> None:
    w = np.random.default_rng(0).normal(size=(6, 4, 3)).astype(np.float32)
    w[2] = 0.0  # a silent channel keeps a usable scale
    q, scale = int8_weight(w)
    assert q.dtype == np.int8 and scale.shape == (6,) and np.abs(q).max() == 127
    np.testing.assert_array_equal(q[2], 0)
    assert np.abs(q * scale[:, None, None] - w).max() <= scale.max() / 2 + 1e-7


def test_int8_chunks_stay_near_the_official_decoder(checkpoint_factory, tmp_path) -> None:
    tiny = checkpoint_factory("tiny")
    ranges = calibrate(tiny)
    assert len(ranges) == QUANTIZED and all(r > 0 for r in ranges.values())
    ckpt = Checkpoint(tiny)
    compiled = round_trip(build_codec_steady(ckpt, Weights("fp32"), CHUNK, Int8Convs(ranges)), tmp_path / "q.xml")
    runtime = [(op.get_rt_info()["layerType"].astype(str), op.get_rt_info()["runtimePrecision"].astype(str))
               for op in compiled.get_runtime_model().get_ordered_ops()]
    int8 = [p for kind, p in runtime if kind == "Convolution" and p in ("u8", "i8")]
    assert len(int8) == QUANTIZED, runtime  # the plugin really multiplies them in int8
    exact = round_trip(build_codec_steady(ckpt, Weights("fp32"), CHUNK), tmp_path / "f.xml")
    codes = np.random.default_rng(99).integers(0, 2048, (1, 16, CHUNK * CHUNKS))  # not the calibration's codes
    reference = oracle.decode(oracle.load_official(tiny).model.speech_tokenizer.model.decoder, codes)[0]
    assert np.abs(stream(exact, codes) - reference).max() <= 1e-4  # the float graph is the exact path
    got = stream(compiled, codes)
    snr = snr_db(got, reference)
    log.info("INT8 codec (tiny) against the official decoder: %.1f dB, max error %.3f", snr,
             np.abs(got - reference).max())
    # measured 24.7 dB: a convolution left in float, or a range off by a factor, moves it by several dB
    assert 21.0 <= snr <= 30.0, snr
    # the INT8 offline decoder and a fresh stream's lead give the same samples (up to a step rounded the other way)
    convs = Int8Convs(ranges)
    offline = round_trip(build_codec_decoder(ckpt, Weights("fp32"), convs), tmp_path / "o.xml")
    whole = offline({"codes": codes})["pcm"][0]
    lead = round_trip(build_codec_lead(ckpt, Weights("fp32"), LEAD_SAMPLES, convs), tmp_path / "l.xml")
    start = lead({"codes": codes[:, :, :1]})["pcm"][0]
    agree = snr_db(whole, got), snr_db(start, got[:start.size])
    log.info("INT8 offline and lead graphs against the INT8 stream: %.1f, %.1f dB", *agree)
    assert min(agree) >= 50.0, agree  # measured: bit-identical here


def test_an_unusable_range_stops_the_conversion(checkpoint_factory, tmp_path, monkeypatch) -> None:
    """A convolution whose input never moved (a range of 0) would make a zero-width quantizer: the
    conversion stops, saying what to do, and leaves nothing behind."""
    from wyoming_qwen3tts.convert import codec_int8

    monkeypatch.setattr(codec_int8.np, "median", lambda a: 0.0)
    with pytest.raises(ConvertError, match="no usable input range for decoder.decoder.*--codec-weights fp32"):
        convert(checkpoint_factory("tiny"), tmp_path / "c8", weights="fp32", codec_weights="int8")
    assert not list(tmp_path.iterdir())


def test_a_cpu_without_bf16_hears_of_the_int8_codec(converted_factory, monkeypatch, caplog) -> None:
    """Where `auto` leaves the decoder in f32, the log at load names the setting that halves it."""
    from wyoming_qwen3tts.engine import loaded_model

    real = loaded_model.resolve_precisions
    monkeypatch.setattr(loaded_model, "resolve_precisions", lambda *a: {**real(*a), "decoder": "f32"})
    with caplog.at_level(logging.INFO, logger="wyoming_qwen3tts.engine.loaded_model"):
        LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="auto")
    assert "model.codec_weights: int8" in caplog.text
    caplog.clear()
    monkeypatch.setattr(loaded_model, "resolve_precisions", lambda *a: {**real(*a), "decoder": "bf16"})
    with caplog.at_level(logging.INFO, logger="wyoming_qwen3tts.engine.loaded_model"):
        LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="auto")
    assert "codec_weights" not in caplog.text


def speak(model: LoadedModel, voice: VoiceRequest) -> tuple[np.ndarray, np.ndarray]:
    """(codes [1, 16, T], streamed PCM) of one greedy request through the native runner."""
    config = EngineConfig(kv_blocks=64, steady_chunk=8, max_frames=30, codec_lead=False)
    sched = Scheduler(model, replace(config, backend="openvino"))
    try:
        params = SamplingParams.from_defaults(model.spec.generation).greedy()
        s = sched.submit(voice, params, max_frames=20)
        while not s.done:
            sched.tick()
    finally:
        sched.close()
    assert s.result is not None and s.result.codes is not None
    return s.result.codes.T[None].astype(np.int64), np.concatenate([c.pcm for c in s])


@pytest.mark.parametrize("variant", ["custom_voice", "base"])
def test_converted_int8_codec_speaks(variant, checkpoint_factory, tmp_path) -> None:
    """A conversion with the INT8 codec streams within INT8's error of the official decoding
    of its codes; a cloned voice's stream too, primed with the reference codes (the official
    audio: reference and generated codes decoded together, the reference cut off)."""
    src = checkpoint_factory("tiny", variant)
    out = convert(src, tmp_path / "c8", weights="int8", codec_weights="int8")
    manifest, _ = read_converted(out)
    assert manifest["options"]["codec_weights"] == "int8"
    codec = {name: g for name, g in manifest["graphs"].items() if name.startswith("codec_")}
    codec = {name: g for name, g in codec.items() if name != "codec_encoder"}  # a Base model's: always fp32
    assert codec and all(g["weights"] == "fp32+int8_conv" and g["constant_bytes"]["i8"] > 0 for g in codec.values())
    if variant == "base":
        assert manifest["graphs"]["codec_encoder"]["weights"] == "fp32"
        rng = np.random.default_rng(7)
        ref = rng.integers(0, 2048, (9, 16))
        voice = VoiceRequest("Turn on the kitchen lights.", "english", ref_text="The reference words.", ref_codes=ref,
                             speaker_vector=rng.standard_normal(64).astype(np.float32))
    else:
        ref, voice = np.zeros((0, 16), np.int64), VoiceRequest("Hello there, how are you today?", "english", "ryan")
    codes, pcm = speak(LoadedModel(out, precision="f32", kv_precision="u8"), voice)
    assert codes.shape[2] >= 8 and pcm.shape == (codes.shape[2] * 1920,)
    decoder = oracle.load_official(src).model.speech_tokenizer.model.decoder
    exact = oracle.decode(decoder, np.concatenate([ref.T[None], codes], axis=2))[0, len(ref) * 1920:]
    snr = snr_db(pcm, exact)
    log.info("converted INT8 codec (%s), streamed by the runner: %.1f dB against the official decoder", variant, snr)
    assert 21.0 <= snr <= 30.0, snr  # measured 24.5 dB (custom voice)
