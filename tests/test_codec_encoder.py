"""The codec encoder graph (Mimi, voice cloning) against the official `Qwen3TTSTokenizer.encode`.

Codes must be identical, not close: one different index changes the residual and so every
later codebook of that frame. Always after an IR round trip, on speech-like signals (voiced
harmonics with a moving pitch, syllable envelopes, noise bursts), at lengths that are and are
not multiples of the 1920-sample frame.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import openvino as ov
import oracle  # the official qwen-tts stack (fails loudly if torch / qwen_tts are missing)
import pytest
from ir import round_trip
from signals import speech_like

from wyoming_qwen3tts.convert.codec_encoder import build_codec_encoder
from wyoming_qwen3tts.convert.ops import Weights
from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.spec import ConfigError, parse_codec_encoder

RATE, FRAME = 24000, 1920


def chirp_mix(samples: int, seed: int) -> np.ndarray:
    """Sums of sines (one gliding) with a slow tremolo and noise: a non-speech check."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / RATE
    x = (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t) ** 2
         + 0.2 * np.sin(2 * np.pi * (500 + 300 * np.sin(2 * np.pi * 0.5 * t)) * t)
         + 0.03 * rng.standard_normal(samples))
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def tiny(checkpoint_factory) -> Path:
    return checkpoint_factory("tiny", "base")


@pytest.fixture(scope="module")
def official_tokenizer(tiny):
    return oracle.load_official(tiny).model.speech_tokenizer


@pytest.fixture(scope="module")
def encoder(tiny, tmp_path_factory) -> ov.CompiledModel:
    model = build_codec_encoder(Checkpoint(tiny), Weights("fp32"))
    return round_trip(model, tmp_path_factory.mktemp("codec_encoder") / "codec_encoder.xml")


def official(tokenizer, wav: np.ndarray) -> np.ndarray:
    """codes [16, T] from the official wrapper's public encode."""
    (codes,) = tokenizer.encode(wav, sr=RATE).audio_codes
    return codes.numpy().T


def test_graph_interface(tiny) -> None:
    model = build_codec_encoder(Checkpoint(tiny), Weights("fp32"))
    assert [p.get_any_name() for p in model.inputs] == ["pcm"]
    assert [r.get_any_name() for r in model.outputs] == ["codes"]
    assert model.input("pcm").get_element_type() == ov.Type.f32
    assert model.output("codes").get_element_type() == ov.Type.i64
    assert model.input("pcm").get_partial_shape().to_string() == "[?,?]"
    batch, books, frames = model.output("codes").get_partial_shape()
    assert batch.is_dynamic and books.get_length() == 16 and frames.is_dynamic


LENGTHS = {
    "1s": RATE,
    "2.5s": 5 * RATE // 2,
    "not-a-multiple": 3 * RATE + 777,
    "multiple+3": 20 * FRAME + 3,
    "exact-multiple": 5 * FRAME,
    "12s": 12 * RATE,  # > 250 transformer steps at 25 Hz: the (unused) sliding window would differ
}


@pytest.mark.parametrize("signal", [speech_like, chirp_mix])
@pytest.mark.parametrize("length", list(LENGTHS.values()), ids=list(LENGTHS))
def test_codes_identical_to_official(encoder, official_tokenizer, signal, length: int) -> None:
    wav = signal(length, seed=length)
    ref = official(official_tokenizer, wav)
    got = encoder([wav[None]])["codes"]
    frames = -(-length // FRAME)
    assert ref.shape == (16, frames)
    assert got.shape == (1, 16, frames)
    # not degenerate: most frames of every codebook pick their own entry
    assert min(len(np.unique(row)) for row in ref) >= max(3, frames // 3)
    mismatch = np.argwhere(got[0] != ref)
    assert mismatch.size == 0, f"{len(mismatch)} codes differ, first (codebook, frame): {mismatch[:5].tolist()}"


def test_batch_rows_equal_single_rows(encoder) -> None:
    length = 2 * RATE + 500
    wavs = np.stack([speech_like(length, seed=1), chirp_mix(length, seed=2)])
    both = encoder([wavs])["codes"]
    assert both.shape == (2, 16, -(-length // FRAME))
    for row in range(2):
        np.testing.assert_array_equal(both[row:row + 1], encoder([wavs[row:row + 1]])["codes"])
    assert not np.array_equal(both[0], both[1])


def test_zero_padded_batch_matches_official_batch(encoder, official_tokenizer) -> None:
    """Unequal lengths, padded with zeros as the official feature extractor pads them: each
    row cut to ⌈valid/1920⌉ frames equals the official batched encode (its last frame may
    differ from encoding the row alone: the padding is not Mimi's own right padding)."""
    wavs = [speech_like(60000, seed=3), chirp_mix(31234, seed=4)]
    batch = np.zeros((2, 60000), np.float32)
    for row, wav in enumerate(wavs):
        batch[row, :len(wav)] = wav
    got = encoder([batch])["codes"]
    refs = [c.numpy().T for c in official_tokenizer.encode(wavs, sr=RATE).audio_codes]
    for row, (wav, ref) in enumerate(zip(wavs, refs)):
        assert ref.shape == (16, -(-len(wav) // FRAME))
        np.testing.assert_array_equal(got[row, :, :ref.shape[1]], ref)


def test_spec_reads_encoder_config(tiny) -> None:
    config = json.loads((tiny / "speech_tokenizer" / "config.json").read_text())
    spec = parse_codec_encoder(config)
    mimi = config["encoder_config"]
    assert (spec.hidden_size, spec.num_filters, spec.num_layers) == (mimi["hidden_size"], mimi["num_filters"],
                                                                     mimi["num_hidden_layers"])
    assert spec.upsampling_ratios == tuple(mimi["upsampling_ratios"]) and spec.downsample_kernel == 4
    assert spec.valid_num_quantizers == 16 and spec.num_quantizers == 32
    for key, value in (("pad_mode", "reflect"), ("use_causal_conv", False), ("encoder_valid_num_quantizers", 40)):
        bad = json.loads(json.dumps(config))
        (bad if key.startswith("encoder_valid") else bad["encoder_config"])[key] = value
        with pytest.raises(ConfigError, match=key if key != "encoder_valid_num_quantizers" else "valid"):
            parse_codec_encoder(bad)
