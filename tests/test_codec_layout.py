"""The codec and speaker-encoder layouts against the official module trees.

Names, order, shapes and dtypes of our torch-free TensorSpecs must equal the state_dicts of
the official classes built from the same configs; materialised tiny weights must load
strictly and give a non-degenerate codec through the official encode/decode.
"""
from __future__ import annotations

import json
import math

import numpy as np
import oracle  # noqa: F401  (stand-ins for unused modules; must precede qwen_tts)
import pytest
import torch
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSSpeakerEncoderConfig
from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSSpeakerEncoder, mel_spectrogram
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model
from transformers import MimiConfig

from qwen3tts_tools.synthetic.codec_layout import (
    codec_tensors,
    speaker_encoder_config,
    speaker_encoder_tensors,
    speech_tokenizer_config,
    speech_tokenizer_preprocessor_config,
)

# Exact counts of the official module tree at the released config.
FULL_DECODER_PARAMS = 114_323_137  # docs/MODEL.md §12: 114.32 M
FULL_ENCODER_TENSORS = 56_234_304  # docs/MODEL.md §12: 56.23 M (39,391,520 parameters + Mimi codebook buffers)
FULL_STATE_DICT_KEYS = 496
SPEAKER_ENCODER_PARAMS = {1024: 8_854_336, 2048: 12_001_088}  # docs/MODEL.md §12: 8.85 M / 12.00 M


def _official_codec(config: dict, device: str = "cpu") -> Qwen3TTSTokenizerV2Model:
    with torch.device(device):
        return Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**config)).eval()


def _materialize(specs, seed: int = 0) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return {s.name: torch.from_numpy(s.materialize(rng)) for s in specs}


def _assert_same_layout(state_dict: dict[str, torch.Tensor], specs) -> None:
    names = [s.name for s in specs]
    assert len(names) == len(set(names)), "duplicate tensor names"
    assert set(names) == set(state_dict), (sorted(set(state_dict) - set(names))[:10],
                                           sorted(set(names) - set(state_dict))[:10])
    assert names == list(state_dict), "same names, different order"
    for s in specs:
        assert s.shape == tuple(state_dict[s.name].shape), (s.name, s.shape, tuple(state_dict[s.name].shape))


def _as_json(data: dict) -> dict:
    return json.loads(json.dumps(data))


def _same_keys(a: dict, b: dict, where: str = "") -> None:
    assert list(a) == list(b), where
    for k, v in a.items():
        if isinstance(v, dict) and k.endswith("_config"):
            _same_keys(v, b[k], f"{where}.{k}")


# ---------------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["full", "tiny"])
def test_config_builds_the_official_config(preset):
    cfg = speech_tokenizer_config(preset)
    official = Qwen3TTSTokenizerV2Config(**cfg)
    assert official.model_type == cfg["model_type"] == "qwen3_tts_tokenizer_12hz"
    assert cfg["architectures"] == ["Qwen3TTSTokenizerV2Model"] and cfg["transformers_version"] == "4.57.3"
    dec, enc = official.decoder_config, official.encoder_config
    for key, value in cfg["decoder_config"].items():
        assert getattr(dec, key) == value, key
    assert dec.codebook_size == 2048 and dec.num_quantizers == 16
    assert math.prod(dec.upsample_rates + dec.upsampling_ratios) == cfg["decode_upsample_rate"] == 1920
    # The encoder: 12.5 Hz at 24 kHz (1920 samples per frame), 2048-entry codebooks, >= 16 of them.
    assert enc.sampling_rate == 24000 and enc.frame_rate == 12.5 and enc.frame_size == 1920
    assert enc.encodec_frame_rate == 25
    assert enc.codebook_size == 2048 and enc.num_quantizers >= cfg["encoder_valid_num_quantizers"] == 16
    assert enc.hidden_size % enc.upsample_groups == 0


@pytest.mark.parametrize("preset", ["full", "tiny"])
def test_encoder_config_is_what_mimi_config_serialises(preset):
    enc = speech_tokenizer_config(preset)["encoder_config"]
    round_trip = _as_json(MimiConfig(**enc).to_dict())  # as written to config.json (string label ids)
    assert round_trip == enc
    assert list(round_trip) == list(enc)


def test_full_config_values_are_the_released_ones():
    cfg = speech_tokenizer_config("full")
    assert {k: cfg[k] for k in ("encoder_valid_num_quantizers", "input_sample_rate", "output_sample_rate",
                                "decode_upsample_rate", "encode_downsample_rate")} == {
        "encoder_valid_num_quantizers": 16, "input_sample_rate": 24000, "output_sample_rate": 24000,
        "decode_upsample_rate": 1920, "encode_downsample_rate": 1920}
    dec = cfg["decoder_config"]
    assert dec == {
        "attention_bias": False, "attention_dropout": 0.0, "latent_dim": 1024, "codebook_dim": 512,
        "codebook_size": 2048, "decoder_dim": 1536, "hidden_act": "silu", "hidden_size": 512,
        "intermediate_size": 1024, "layer_scale_initial_scale": 0.01, "max_position_embeddings": 8000,
        "head_dim": 64, "num_attention_heads": 16, "num_hidden_layers": 8, "num_key_value_heads": 16,
        "num_quantizers": 16, "num_semantic_quantizers": 1, "rms_norm_eps": 1e-05, "rope_theta": 10000,
        "semantic_codebook_size": 4096, "sliding_window": 72, "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2], "vector_quantization_hidden_dimension": 512}
    enc = cfg["encoder_config"]
    defaults = _as_json(MimiConfig().to_dict())
    assert {k: v for k, v in enc.items() if k != "_frame_rate"} == {k: v for k, v in defaults.items()
                                                                    if k != "_frame_rate"}
    assert enc["_frame_rate"] == 12.5 and enc["num_quantizers"] == 32 and enc["codebook_dim"] == 256


def test_tiny_config_has_the_same_keys():
    _same_keys(speech_tokenizer_config("full"), speech_tokenizer_config("tiny"))
    json.dumps(speech_tokenizer_config("tiny"))  # serialisable as is


def test_preprocessor_config_is_what_encodec_feature_extractor_serialises():
    from transformers import EncodecFeatureExtractor

    cfg = speech_tokenizer_preprocessor_config()
    extractor = EncodecFeatureExtractor(**{k: v for k, v in cfg.items() if k != "feature_extractor_type"})
    assert json.loads(extractor.to_json_string()) == cfg
    assert cfg["feature_size"] == 1 and cfg["sampling_rate"] == 24000


# ---------------------------------------------------------------------------------------------
# codec layout
# ---------------------------------------------------------------------------------------------

def test_full_codec_layout_matches_the_official_tree():
    cfg = speech_tokenizer_config("full")
    model = _official_codec(cfg, "meta")
    state_dict = model.state_dict()
    specs = codec_tensors(cfg)
    _assert_same_layout(state_dict, specs)
    assert len(specs) == FULL_STATE_DICT_KEYS
    assert all(s.dtype == "float32" for s in specs)
    assert sum(p.numel() for p in model.decoder.parameters()) == FULL_DECODER_PARAMS
    assert sum(v.numel() for k, v in state_dict.items() if k.startswith("encoder.")) == FULL_ENCODER_TENSORS
    ours = {prefix: sum(math.prod(s.shape) for s in specs if s.name.startswith(prefix))
            for prefix in ("decoder.", "encoder.")}
    assert ours == {"decoder.": FULL_DECODER_PARAMS, "encoder.": FULL_ENCODER_TENSORS}
    # Every state_dict entry is a float32 tensor (Mimi's `initialized` flag included).
    assert {v.dtype for v in state_dict.values()} == {torch.float32}


def test_tiny_codec_layout_matches_the_official_tree():
    cfg = speech_tokenizer_config("tiny")
    specs = codec_tensors(cfg)
    _assert_same_layout(_official_codec(cfg, "meta").state_dict(), specs)
    assert all(s.dtype == "float32" for s in specs)
    assert sum(math.prod(s.shape) for s in specs) < 3_000_000


def test_codebooks_are_random_and_non_degenerate():
    specs = {s.name: s for s in codec_tensors(speech_tokenizer_config("tiny"))}
    usage = specs["decoder.quantizer.rvq_first.vq.layers.0._codebook.cluster_usage"]
    assert usage.init == "uniform" and usage.low > 0
    assert specs["decoder.quantizer.rvq_rest.vq.layers.14._codebook.embedding_sum"].init == "normal"
    assert specs["encoder.quantizer.acoustic_residual_vector_quantizer.layers.30.codebook.initialized"].init == "ones"
    scale = specs["decoder.pre_transformer.layers.0.self_attn_layer_scale.scale"]
    assert scale.init == "constant" and scale.low == 0.01


# ---------------------------------------------------------------------------------------------
# the tiny codec through the official implementation
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_codec():
    cfg = speech_tokenizer_config("tiny")
    model = _official_codec(cfg)
    model.load_state_dict(_materialize(codec_tensors(cfg)), strict=True)
    return cfg, model


def _check_audio(wav: torch.Tensor, n_samples: int) -> None:
    assert wav.shape == (n_samples,)
    assert torch.isfinite(wav).all()
    assert (wav.abs() >= 1.0).float().mean() < 0.05, "mostly clipped"
    assert wav.std() > 1e-3, "silent / constant"


def test_tiny_codec_decodes_random_codes(tiny_codec):
    _, model = tiny_codec
    codes = torch.randint(0, 2048, (1, 10, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        wav = model.decode(codes, return_dict=True).audio_values[0]
    _check_audio(wav, 10 * 1920)


def test_tiny_codec_encodes_one_second(tiny_codec):
    _, model = tiny_codec
    audio = torch.from_numpy(np.random.default_rng(1).standard_normal((1, 24000)).astype(np.float32) * 0.1)
    with torch.no_grad():
        codes = model.encode(audio, torch.ones_like(audio, dtype=torch.long), return_dict=True).audio_codes[0]
    assert codes.shape == (13, 16) and codes.dtype == torch.long
    assert 0 <= int(codes.min()) and int(codes.max()) <= 2047
    assert all(len(set(codes[:, q].tolist())) > 3 for q in range(16)), "degenerate quantizer"


def test_tiny_codec_loads_through_the_official_wrapper(tmp_path):
    """The files the generator writes, read by Qwen3TTSTokenizer.from_pretrained."""
    from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer
    from safetensors.torch import save_file
    from transformers import AutoModel

    cfg = speech_tokenizer_config("tiny")
    (tmp_path / "config.json").write_text(json.dumps(cfg, indent=2))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(speech_tokenizer_preprocessor_config(), indent=2))
    save_file(_materialize(codec_tensors(cfg)), str(tmp_path / "model.safetensors"), metadata={"format": "pt"})

    tokenizer = Qwen3TTSTokenizer.from_pretrained(str(tmp_path))
    assert type(tokenizer.feature_extractor).__name__ == "EncodecFeatureExtractor"
    _, info = AutoModel.from_pretrained(str(tmp_path), output_loading_info=True)
    assert not any(info.values()), info

    audio = np.random.default_rng(2).standard_normal(24000).astype(np.float32) * 0.1
    encoded = tokenizer.encode(audio, sr=24000)
    assert tuple(encoded.audio_codes[0].shape) == (13, 16)
    wavs, sr = tokenizer.decode(encoded)
    assert sr == 24000 and wavs[0].shape == (13 * 1920,)


def test_full_size_codec_is_non_degenerate():
    """Real widths: the inits keep activations O(1) through the whole real-size stack."""
    from transformers.modeling_utils import no_init_weights

    cfg = speech_tokenizer_config("full")
    with no_init_weights():  # every tensor is overwritten below; skip the 170 M-parameter init
        model = _official_codec(cfg)
    model.load_state_dict(_materialize(codec_tensors(cfg)), strict=True)
    codes = torch.randint(0, 2048, (1, 4, 16), generator=torch.Generator().manual_seed(0))
    audio = torch.from_numpy(np.random.default_rng(1).standard_normal((1, 12000)).astype(np.float32) * 0.1)
    with torch.no_grad():
        wav = model.decode(codes, return_dict=True).audio_values[0]
        codes_out = model.encode(audio, torch.ones_like(audio, dtype=torch.long), return_dict=True).audio_codes[0]
    _check_audio(wav, 4 * 1920)
    assert codes_out.shape == (7, 16) and all(len(set(codes_out[:, q].tolist())) > 2 for q in range(16))


# ---------------------------------------------------------------------------------------------
# speaker encoder
# ---------------------------------------------------------------------------------------------

SPEAKER_CONFIGS = {
    "0.6b": speaker_encoder_config(1024),
    "1.7b": speaker_encoder_config(2048),
    "tiny": speaker_encoder_config(64, tiny_channels=True),
    "tiny-default-channels": speaker_encoder_config(64),
}


def test_released_speaker_encoder_configs():
    assert SPEAKER_CONFIGS["0.6b"] == {"enc_dim": 1024, "sample_rate": 24000}
    assert SPEAKER_CONFIGS["1.7b"] == {"enc_dim": 2048, "sample_rate": 24000}


@pytest.mark.parametrize("name", list(SPEAKER_CONFIGS))
def test_speaker_encoder_layout_matches_the_official_tree(name):
    cfg = SPEAKER_CONFIGS[name]
    model = Qwen3TTSSpeakerEncoder(Qwen3TTSSpeakerEncoderConfig(**cfg))
    state_dict = {f"speaker_encoder.{k}": v for k, v in model.state_dict().items()}
    specs = speaker_encoder_tensors(cfg)
    _assert_same_layout(state_dict, specs)
    assert all(s.dtype == "bfloat16" for s in specs)
    assert len(list(model.buffers())) == 0  # no norms, no running statistics
    assert [s.name for s in speaker_encoder_tensors(cfg, prefix="")] == list(model.state_dict())
    if cfg["enc_dim"] in SPEAKER_ENCODER_PARAMS and "enc_channels" not in cfg:
        assert sum(p.numel() for p in model.parameters()) == SPEAKER_ENCODER_PARAMS[cfg["enc_dim"]]


@pytest.mark.parametrize("name", ["tiny", "0.6b"])
def test_speaker_encoder_gives_a_finite_moderate_xvector(name):
    cfg = SPEAKER_CONFIGS[name]
    model = Qwen3TTSSpeakerEncoder(Qwen3TTSSpeakerEncoderConfig(**cfg)).eval()
    weights = {k: v.to(torch.bfloat16).float() for k, v in
               _materialize(speaker_encoder_tensors(cfg, prefix="")).items()}
    model.load_state_dict(weights, strict=True)
    audio = torch.from_numpy(np.random.default_rng(3).standard_normal((1, 24000)).astype(np.float32) * 0.1)
    mels = mel_spectrogram(audio, n_fft=1024, num_mels=128, sampling_rate=24000, hop_size=256, win_size=1024,
                           fmin=0, fmax=12000).transpose(1, 2)
    with torch.no_grad():
        xvec = model(mels)[0]
    assert xvec.shape == (cfg["enc_dim"],) and torch.isfinite(xvec).all()
    assert 0.01 < float(xvec.std()) < 10.0
