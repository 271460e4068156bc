"""Checkpoint reader: dtypes, sharding, lazy access, specs from the files, clear errors."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tensor_files import write_safetensors

from qwen3tts_tools.synthetic.presets import GENERATION_CONFIG, model_config
from wyoming_qwen3tts.model.checkpoint import Checkpoint, CheckpointError
from wyoming_qwen3tts.model.safetensors import SafetensorsFile, bf16_to_f32, f32_to_bf16
from wyoming_qwen3tts.model.spec import ConfigError, parse_model_config

PROBES = ("talker.model.layers.1.mlp.down_proj.weight", "talker.model.norm.weight",
          "talker.code_predictor.lm_head.3.weight", "talker.text_projection.linear_fc1.bias")


def test_bf16_conversion_matches_torch():
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 100
    x[:4] = [0.0, -0.0, 1e-40, 3.4e38]
    ours = bf16_to_f32(f32_to_bf16(x))
    theirs = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("dtype,rtol", [("float16", 1e-3), ("bfloat16", 8e-3)])
def test_reads_each_dtype(checkpoint_factory, dtype, rtol):
    ref = Checkpoint(checkpoint_factory("tiny", "custom_voice", dtype="float32"))
    other = Checkpoint(checkpoint_factory("tiny", "custom_voice", dtype=dtype))
    expected_code = {"float16": "F16", "bfloat16": "BF16"}[dtype]
    for name in PROBES:
        assert ref.main.dtype(name) == "F32" and other.main.dtype(name) == expected_code
        a, b = ref.main.get(name), other.main.get(name)
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=rtol, atol=1e-6)
        assert not np.array_equal(a, b) or dtype == "float32"
    # the codec stays float32 whatever the main dtype, as released
    codec_name = "decoder.quantizer.rvq_first.vq.layers.0._codebook.embedding_sum"
    assert other.codec.dtype(codec_name) == "F32"


def test_bf16_values_equal_torch_reading(checkpoint_factory):
    d = checkpoint_factory("tiny", "custom_voice")
    from safetensors.torch import load_file

    theirs = load_file(str(d / "model.safetensors"))
    ckpt = Checkpoint(d)
    for name in PROBES:
        np.testing.assert_array_equal(ckpt.main.get(name), theirs[name].float().numpy())
    rows = [5, 151671, 0, 151673]
    np.testing.assert_array_equal(ckpt.main.rows("talker.model.text_embedding.weight", rows),
                                  theirs["talker.model.text_embedding.weight"][rows].float().numpy())


def test_sharded_equals_single(checkpoint_factory):
    single = Checkpoint(checkpoint_factory("tiny", "base"))
    sharded_dir = checkpoint_factory("tiny", "base", shards=3)
    assert not (sharded_dir / "model.safetensors").exists()
    index = json.loads((sharded_dir / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3
    sharded = Checkpoint(sharded_dir)
    assert sorted(sharded.main.names()) == sorted(single.main.names())
    for name in (*PROBES, "speaker_encoder.fc.weight"):
        np.testing.assert_array_equal(sharded.main.get(name), single.main.get(name))


def test_spec_comes_from_the_files(checkpoint_factory):
    spec = Checkpoint(checkpoint_factory("tiny-1.7b", "custom_voice")).spec
    assert spec.model_type == "custom_voice" and spec.model_size == "1b7"
    assert spec.talker.stack.num_layers == 2 and spec.talker.stack.hidden_size == 64
    assert spec.talker.stack.rope_theta == 1e6 and spec.talker.stack.head_dim == 16
    assert spec.code_predictor.has_projection and spec.code_predictor.num_code_groups == 16
    assert (spec.codec_ids.eos, spec.codec_ids.bos, spec.codec_ids.pad) == (2150, 2149, 2148)
    assert (spec.text_ids.tts_pad, spec.text_ids.tts_bos, spec.text_ids.tts_eos) == (151671, 151672, 151673)
    assert spec.speaker("Eric").dialect == "sichuan_dialect" and spec.speaker("ryan").codec_id == 3061
    assert spec.supported_languages[0] == "auto" and "beijing_dialect" not in spec.supported_languages
    assert spec.generation.max_new_tokens == 8192 and spec.generation.repetition_penalty == 1.05
    assert spec.codec_decoder.samples_per_frame == 1920 and spec.codec_decoder.num_quantizers == 16
    assert spec.speaker_encoder is None
    base = Checkpoint(checkpoint_factory("tiny", "base")).spec
    assert not base.code_predictor.has_projection and base.speakers == ()
    assert base.speaker_encoder is not None and base.speaker_encoder.enc_dim == 64


def test_full_size_configs_have_the_real_shapes():
    codec = {"model_type": "qwen3_tts_tokenizer_12hz", "encoder_valid_num_quantizers": 16,
             "input_sample_rate": 24000, "output_sample_rate": 24000, "decode_upsample_rate": 1920,
             "encode_downsample_rate": 1920, "decoder_config": {
                 "codebook_size": 2048, "codebook_dim": 512, "num_quantizers": 16, "latent_dim": 1024,
                 "decoder_dim": 1536, "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2],
                 "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
                 "num_key_value_heads": 16, "head_dim": 64, "sliding_window": 72, "rope_theta": 10000,
                 "rms_norm_eps": 1e-5}}
    big = parse_model_config(model_config("1.7b", "custom_voice"), GENERATION_CONFIG, codec)
    assert big.talker.stack.hidden_size == 2048 and big.talker.stack.intermediate_size == 6144
    assert big.talker.stack.num_layers == 28 and big.code_predictor.stack.num_layers == 5
    assert big.code_predictor.has_projection
    small = parse_model_config(model_config("0.6b", "custom_voice"), GENERATION_CONFIG, codec)
    assert small.talker.stack.hidden_size == 1024 and not small.code_predictor.has_projection
    assert small.codec_decoder.sliding_window == 72


# ------------------------------------------------------------------------------- errors


@pytest.fixture()
def scratch(checkpoint_factory, tmp_path) -> Path:
    d = tmp_path / "ckpt"
    shutil.copytree(checkpoint_factory("tiny", "custom_voice"), d)
    return d


@pytest.mark.parametrize("rel", ["config.json", "generation_config.json", "vocab.json", "merges.txt",
                                 "speech_tokenizer/config.json", "model.safetensors",
                                 "speech_tokenizer/model.safetensors"])
def test_missing_file_is_named(scratch, rel):
    (scratch / rel).unlink()
    with pytest.raises(CheckpointError, match=rel.replace(".", r"\.")):
        Checkpoint(scratch)


def _edit_config(d: Path, edit) -> None:
    config = json.loads((d / "config.json").read_text())
    edit(config)
    (d / "config.json").write_text(json.dumps(config))


def test_unknown_model_type(scratch):
    _edit_config(scratch, lambda c: c.update(tts_model_type="singing"))
    with pytest.raises(CheckpointError, match="unknown tts_model_type 'singing'"):
        Checkpoint(scratch)


def test_missing_key_is_an_error_not_a_default(scratch):
    _edit_config(scratch, lambda c: c["talker_config"].pop("num_hidden_layers"))
    with pytest.raises(CheckpointError, match="num_hidden_layers"):
        Checkpoint(scratch)


def test_config_key_wrong_type():
    config = model_config("tiny", "custom_voice")
    config["talker_config"]["hidden_size"] = "64"
    with pytest.raises(ConfigError, match="hidden_size"):
        parse_model_config(config, GENERATION_CONFIG, {})


def _rewrite_main(d: Path, edit) -> None:
    f = SafetensorsFile(d / "model.safetensors")
    tensors = {n: bf16_to_f32(f.raw(n)) for n in f.names()}
    del f
    edit(tensors)
    write_safetensors(d / "model.safetensors", tensors, dtypes={n: "bfloat16" for n in tensors})


def test_missing_tensor_is_named(scratch):
    _rewrite_main(scratch, lambda t: t.pop("talker.model.layers.1.self_attn.k_norm.weight"))
    with pytest.raises(CheckpointError, match=r"talker\.model\.layers\.1\.self_attn\.k_norm\.weight"):
        Checkpoint(scratch)


def test_misshaped_tensor_is_named(scratch):
    def edit(t):
        t["talker.codec_head.weight"] = t["talker.codec_head.weight"][:100]

    _rewrite_main(scratch, edit)
    with pytest.raises(CheckpointError, match=r"talker\.codec_head\.weight .*shape \(100, 64\).*\(3072, 64\)"):
        Checkpoint(scratch)


def test_corrupt_safetensors_is_named(scratch):
    (scratch / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*JSON"):
        Checkpoint(scratch)


def test_truncated_safetensors_is_named(scratch):
    data = (scratch / "model.safetensors").read_bytes()
    (scratch / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*inconsistent offsets"):
        Checkpoint(scratch)
