"""Layout of `speech_tokenizer/` (the 12 Hz codec) and of the Base models' speaker encoder.

Everything here is computed from config dicts, torch-free, and mirrors the official module
trees name for name, shape for shape and in state_dict order:
- codec decoder: `qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2.Qwen3TTSTokenizerV2Decoder`;
- codec encoder: transformers' `MimiModel` with its decoder half removed (`Qwen3TTSTokenizerV2Encoder`);
- speaker encoder: `qwen_tts.core.models.modeling_qwen3_tts.Qwen3TTSSpeakerEncoder` (ECAPA-TDNN).
Non-persistent buffers (RoPE inv_freq, Mimi conv stride/kernel_size/padding_total) are not in
the files and not listed. Every tensor is a float: the codec in float32 (as released), the
speaker encoder in bfloat16 (it lives in the main model.safetensors).

Inits keep a real-size stack's activations O(1) (weights ~ N(0, gain/fan_in)) and make every
tensor matter: codebooks, norm weights, biases, SnakeBeta parameters and the ConvNeXt gamma
are random rather than the official init's zeros/ones/1e-6, so an implementation that drops
one of them cannot match the official one by accident.
"""
from __future__ import annotations

import math
from typing import Any

from .layout import TensorSpec

# ---------------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------------

# decoder_config as released (key order of the published file).
_DECODER_FULL: dict[str, Any] = {
    "attention_bias": False, "attention_dropout": 0.0, "latent_dim": 1024, "codebook_dim": 512,
    "codebook_size": 2048, "decoder_dim": 1536, "hidden_act": "silu", "hidden_size": 512,
    "intermediate_size": 1024, "layer_scale_initial_scale": 0.01, "max_position_embeddings": 8000,
    "head_dim": 64, "num_attention_heads": 16, "num_hidden_layers": 8, "num_key_value_heads": 16,
    "num_quantizers": 16, "num_semantic_quantizers": 1, "rms_norm_eps": 1e-05, "rope_theta": 10000,
    "semantic_codebook_size": 4096, "sliding_window": 72, "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2], "vector_quantization_hidden_dimension": 512,
}
# Tiny: same keys; 16 x 2048 codes, 1920 samples/frame and the 72-frame window stay.
_DECODER_TINY = {"latent_dim": 64, "codebook_dim": 32, "decoder_dim": 64, "hidden_size": 32,
                 "intermediate_size": 64, "head_dim": 8, "num_attention_heads": 4, "num_hidden_layers": 2,
                 "num_key_value_heads": 4, "vector_quantization_hidden_dimension": 32}

# encoder_config: a transformers MimiConfig as MimiConfig.to_dict() serialises it (4.57.3), with
# the transformers defaults that Qwen uses and the explicit 12.5 Hz frame rate.
_MIMI_FULL: dict[str, Any] = {
    "sampling_rate": 24000, "audio_channels": 1, "hidden_size": 512, "num_filters": 64,
    "num_residual_layers": 1, "upsampling_ratios": [8, 6, 5, 4], "kernel_size": 7, "last_kernel_size": 3,
    "residual_kernel_size": 3, "dilation_growth_rate": 2, "use_causal_conv": True, "pad_mode": "constant",
    "compress": 2, "trim_right_ratio": 1.0, "codebook_size": 2048, "codebook_dim": 256, "num_quantizers": 32,
    "use_conv_shortcut": False, "vector_quantization_hidden_dimension": 256, "upsample_groups": 512,
    "num_hidden_layers": 8, "intermediate_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 8,
    "hidden_act": "gelu", "max_position_embeddings": 8000, "initializer_range": 0.02, "norm_eps": 1e-05,
    "use_cache": False, "use_streaming": False, "rope_theta": 10000.0, "sliding_window": 250,
    "attention_dropout": 0.0, "head_dim": 64, "layer_scale_initial_scale": 0.01, "attention_bias": False,
    "_frame_rate": 12.5, "num_semantic_quantizers": 1,
}
# Tiny Mimi: the same 8*6*5*4 strides (+ the x2 downsample) keep 12.5 Hz at 24 kHz; all 32
# quantizers of 2048 entries stay (the file holds 32, the model keeps 16). upsample_groups must
# divide hidden_size: MimiModel builds its (later discarded) upsampler with that many groups.
_MIMI_TINY = {"hidden_size": 32, "num_filters": 4, "codebook_dim": 16, "vector_quantization_hidden_dimension": 16,
              "upsample_groups": 32, "num_hidden_layers": 2, "intermediate_size": 64, "num_attention_heads": 2,
              "num_key_value_heads": 2, "head_dim": 16}

# The generic PretrainedConfig fields that MimiConfig.to_dict() appends (transformers 4.57.3).
_PRETRAINED_CONFIG_FIELDS: dict[str, Any] = {
    "return_dict": True, "output_hidden_states": False, "torchscript": False, "dtype": None, "pruned_heads": {},
    "tie_word_embeddings": True, "chunk_size_feed_forward": 0, "is_encoder_decoder": False, "is_decoder": False,
    "cross_attention_hidden_size": None, "add_cross_attention": False, "tie_encoder_decoder": False,
    "architectures": None, "finetuning_task": None, "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
    "label2id": {"LABEL_0": 0, "LABEL_1": 1}, "task_specific_params": None, "problem_type": None,
    "tokenizer_class": None, "prefix": None, "bos_token_id": None, "pad_token_id": None, "eos_token_id": None,
    "sep_token_id": None, "decoder_start_token_id": None, "max_length": 20, "min_length": 0, "do_sample": False,
    "early_stopping": False, "num_beams": 1, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "typical_p": 1.0,
    "repetition_penalty": 1.0, "length_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None, "num_return_sequences": 1, "output_scores": False,
    "return_dict_in_generate": False, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "remove_invalid_values": False, "exponential_decay_length_penalty": None, "suppress_tokens": None,
    "begin_suppress_tokens": None, "num_beam_groups": 1, "diversity_penalty": 0.0, "_name_or_path": "",
    "transformers_version": "4.57.3", "tf_legacy_loss": False, "use_bfloat16": False, "model_type": "mimi",
    "output_attentions": False,
}

CODEC_PRESETS = ("full", "tiny")


def speech_tokenizer_config(preset: str) -> dict[str, Any]:
    """speech_tokenizer/config.json for preset "full" (as released) or "tiny"."""
    if preset not in CODEC_PRESETS:
        raise ValueError(f"unknown codec preset {preset!r} (expected one of {', '.join(CODEC_PRESETS)})")
    tiny = preset == "tiny"
    decoder = {**_DECODER_FULL, **(_DECODER_TINY if tiny else {})}
    encoder = {**_MIMI_FULL, **(_MIMI_TINY if tiny else {}), **_PRETRAINED_CONFIG_FIELDS}
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
        "encoder_config": encoder,
        "decoder_config": decoder,
        "transformers_version": "4.57.3",
    }


def speech_tokenizer_preprocessor_config() -> dict[str, Any]:
    """speech_tokenizer/preprocessor_config.json: EncodecFeatureExtractor as it serialises itself.

    The official wrapper loads it with AutoFeatureExtractor (feature_extractor_type picks the
    class), resamples inputs to `sampling_rate` and needs chunk_length_s/overlap null so the
    extractor pads plainly and returns `padding_mask`.
    """
    return {
        "chunk_length_s": None, "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
        "overlap": None, "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
        "sampling_rate": 24000,
    }


def speaker_encoder_config(enc_dim: int, *, tiny_channels: bool = False) -> dict[str, Any]:
    """speaker_encoder_config of a Base model's config.json.

    The releases hold only enc_dim (1024 for 0.6B, 2048 for 1.7B) and sample_rate; the
    official Qwen3TTSSpeakerEncoderConfig supplies the ECAPA channels. It also honours the
    channel keys from the config, so tiny_channels=True adds narrow ones (about 0.1 M
    parameters instead of ~9 M; mel_dim stays 128, the mel front-end is fixed).
    """
    config: dict[str, Any] = {"enc_dim": int(enc_dim), "sample_rate": 24000}
    if tiny_channels:
        config.update(enc_channels=[32, 32, 32, 32, 96], enc_attention_channels=16, enc_se_channels=16)
    return config


# ---------------------------------------------------------------------------------------------
# tensor helpers
# ---------------------------------------------------------------------------------------------

_NORM_LOW, _NORM_HIGH = 0.8, 1.2  # norm weights: around one
_BIAS_STD = 0.02


def _weight(name: str, shape: tuple[int, ...], fan_in: int, gain: float = 1.0, dtype: str = "float32") -> TensorSpec:
    return TensorSpec(name, shape, dtype, "normal", std=gain / math.sqrt(fan_in))


def _const(name: str, shape: tuple[int, ...], value: float, dtype: str = "float32") -> TensorSpec:
    return TensorSpec(name, shape, dtype, "constant", low=value)


def _bias(name: str, n: int, dtype: str = "float32") -> TensorSpec:
    return TensorSpec(name, (n,), dtype, "normal", std=_BIAS_STD)


def _norm(p: str, n: int, bias: bool = False) -> list[TensorSpec]:
    out = [TensorSpec(p + "weight", (n,), "float32", "uniform", low=_NORM_LOW, high=_NORM_HIGH)]
    return (out + [_bias(p + "bias", n)]) if bias else out


def _linear(p: str, n_in: int, n_out: int, bias: bool, gain: float = 1.0) -> list[TensorSpec]:
    out = [_weight(p + "weight", (n_out, n_in), n_in, gain)]
    return (out + [_bias(p + "bias", n_out)]) if bias else out


def _conv(p: str, n_in: int, n_out: int, k: int, bias: bool = True, groups: int = 1, gain: float = 1.0,
          dtype: str = "float32") -> list[TensorSpec]:
    """nn.Conv1d under prefix p: weight (out, in/groups, k) [+ bias (out,)]."""
    out = [_weight(p + "weight", (n_out, n_in // groups, k), n_in // groups * k, gain, dtype)]
    return (out + [_bias(p + "bias", n_out, dtype)]) if bias else out


def _conv_transpose(p: str, n_in: int, n_out: int, k: int, stride: int) -> list[TensorSpec]:
    """nn.ConvTranspose1d: weight (in, out, k); each output sample sums in * k/stride taps."""
    return [_weight(p + "weight", (n_in, n_out, k), n_in * max(1, k // stride)), _bias(p + "bias", n_out)]


def _snake(p: str, n: int) -> list[TensorSpec]:
    """SnakeBeta: alpha and beta in log space (x + sin^2(x e^a) / e^b)."""
    return [TensorSpec(p + "alpha", (n,), "float32", "normal", std=0.1),
            TensorSpec(p + "beta", (n,), "float32", "normal", std=0.1)]


def _codebook_stats(p: str, sum_name: str, size: int, dim: int, std: float) -> list[TensorSpec]:
    """Usage counts and embedding sums; the table is sum / usage (the official init: ones, zeros)."""
    return [TensorSpec(p + "cluster_usage", (size,), "float32", "uniform", low=0.5, high=2.0),
            TensorSpec(p + sum_name, (size, dim), "float32", "normal", std=std)]


# ---------------------------------------------------------------------------------------------
# codec decoder (Qwen3TTSTokenizerV2Decoder)
# ---------------------------------------------------------------------------------------------

def _attention(layer: str, c: dict[str, Any]) -> list[TensorSpec]:
    """q/k/v/o projections of one attention block (codec decoder and Mimi share the shape)."""
    hidden, bias = c["hidden_size"], bool(c["attention_bias"])
    head_dim = c.get("head_dim") or hidden // c["num_attention_heads"]
    q_width, kv_width = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
    out: list[TensorSpec] = []
    for proj, width in (("q_proj", q_width), ("k_proj", kv_width), ("v_proj", kv_width)):
        out += _linear(f"{layer}self_attn.{proj}.", hidden, width, bias)
    return out + _linear(f"{layer}self_attn.o_proj.", q_width, hidden, bias)


def _decoder_transformer(p: str, c: dict[str, Any]) -> list[TensorSpec]:
    hidden, latent, inter = c["hidden_size"], c["latent_dim"], c["intermediate_size"]
    scale = c["layer_scale_initial_scale"]
    out: list[TensorSpec] = []
    for i in range(c["num_hidden_layers"]):
        layer = f"{p}layers.{i}."
        out += _attention(layer, c)
        out += _linear(f"{layer}mlp.gate_proj.", hidden, inter, False)
        out += _linear(f"{layer}mlp.up_proj.", hidden, inter, False)
        out += _linear(f"{layer}mlp.down_proj.", inter, hidden, False)
        out += _norm(f"{layer}input_layernorm.", hidden) + _norm(f"{layer}post_attention_layernorm.", hidden)
        out += [_const(f"{layer}self_attn_layer_scale.scale", (hidden,), scale),
                _const(f"{layer}mlp_layer_scale.scale", (hidden,), scale)]
    return (out + _norm(p + "norm.", hidden) + _linear(p + "input_proj.", latent, hidden, True)
            + _linear(p + "output_proj.", hidden, latent, True))


def _decoder_rvq(p: str, n_q: int, dim: int, outer: int, size: int) -> list[TensorSpec]:
    """ResidualVectorQuantizer with force_projection: 1x1 convs outer<->dim, no bias."""
    out = _conv(p + "input_proj.", outer, dim, 1, bias=False) + _conv(p + "output_proj.", dim, outer, 1, bias=False)
    for j in range(n_q):
        out += _codebook_stats(f"{p}vq.layers.{j}._codebook.", "embedding_sum", size, dim, std=0.25)
    return out


def _convnext(p: str, dim: int) -> list[TensorSpec]:
    return ([TensorSpec(p + "gamma", (dim,), "float32", "uniform", low=0.05, high=0.2)]
            + _conv(p + "dwconv.conv.", dim, dim, 7, groups=dim) + _norm(p + "norm.", dim, bias=True)
            + _linear(p + "pwconv1.", dim, 4 * dim, True) + _linear(p + "pwconv2.", 4 * dim, dim, True))


def _residual_unit(p: str, dim: int) -> list[TensorSpec]:
    return (_snake(p + "act1.", dim) + _conv(p + "conv1.conv.", dim, dim, 7)
            + _snake(p + "act2.", dim) + _conv(p + "conv2.conv.", dim, dim, 1, gain=0.3))


def _decoder_block(p: str, n_in: int, n_out: int, rate: int) -> list[TensorSpec]:
    out = _snake(p + "block.0.", n_in) + _conv_transpose(p + "block.1.conv.", n_in, n_out, 2 * rate, rate)
    for k in range(3):  # dilations 1, 3, 9
        out += _residual_unit(f"{p}block.{k + 2}.", n_out)
    return out


def _codec_decoder(p: str, c: dict[str, Any]) -> list[TensorSpec]:
    latent, cb_dim, dim = c["latent_dim"], c["codebook_dim"], c["decoder_dim"]
    rates = list(c["upsample_rates"])
    out = _decoder_transformer(p + "pre_transformer.", c)
    # The official quantizer hard-codes one semantic quantizer and codebook_size entries for
    # both branches (semantic_codebook_size is not read).
    for branch, n_q in (("rvq_first", 1), ("rvq_rest", c["num_quantizers"] - 1)):
        out += _decoder_rvq(f"{p}quantizer.{branch}.", n_q, cb_dim // 2, cb_dim, c["codebook_size"])
    out += _conv(p + "pre_conv.conv.", cb_dim, latent, 3)
    for i, factor in enumerate(c["upsampling_ratios"]):
        out += _conv_transpose(f"{p}upsample.{i}.0.conv.", latent, latent, factor, factor)
        out += _convnext(f"{p}upsample.{i}.1.", latent)
    out += _conv(p + "decoder.0.conv.", latent, dim, 7)
    for i, rate in enumerate(rates):
        out += _decoder_block(f"{p}decoder.{i + 1}.", dim // 2**i, dim // 2 ** (i + 1), rate)
    final = dim // 2 ** len(rates)
    out += _snake(f"{p}decoder.{len(rates) + 1}.", final)
    out += _conv(f"{p}decoder.{len(rates) + 2}.conv.", final, 1, 7, gain=0.1)
    return out


# ---------------------------------------------------------------------------------------------
# codec encoder (MimiModel minus upsample / decoder_transformer / decoder)
# ---------------------------------------------------------------------------------------------

def _mimi_seanet(p: str, c: dict[str, Any]) -> list[TensorSpec]:
    """MimiEncoder: conv, then per ratio (reversed) resnet blocks + ELU + strided conv, ELU, conv."""
    nf, layers = c["num_filters"], p + "layers."
    out = _conv(layers + "0.conv.", c["audio_channels"], nf, c["kernel_size"])
    idx, scaling = 1, 1
    for ratio in reversed(c["upsampling_ratios"]):
        dim = scaling * nf
        for _ in range(c["num_residual_layers"]):
            hidden = dim // c["compress"]
            out += _conv(f"{layers}{idx}.block.1.conv.", dim, hidden, c["residual_kernel_size"])
            out += _conv(f"{layers}{idx}.block.3.conv.", hidden, dim, 1, gain=0.5)
            if c["use_conv_shortcut"]:
                out += _conv(f"{layers}{idx}.shortcut.conv.", dim, dim, 1)
            idx += 1
        out += _conv(f"{layers}{idx + 1}.conv.", dim, 2 * dim, 2 * ratio)  # idx is the ELU
        idx, scaling = idx + 2, scaling * 2
    return out + _conv(f"{layers}{idx + 1}.conv.", scaling * nf, c["hidden_size"], c["last_kernel_size"])


def _mimi_transformer(p: str, c: dict[str, Any]) -> list[TensorSpec]:
    hidden, inter = c["hidden_size"], c["intermediate_size"]
    out: list[TensorSpec] = []
    for i in range(c["num_hidden_layers"]):
        layer = f"{p}layers.{i}."
        out += _attention(layer, c)
        out += _linear(f"{layer}mlp.fc1.", hidden, inter, False) + _linear(f"{layer}mlp.fc2.", inter, hidden, False)
        out += _norm(f"{layer}input_layernorm.", hidden, bias=True)
        out += _norm(f"{layer}post_attention_layernorm.", hidden, bias=True)
        out += [_const(f"{layer}self_attn_layer_scale.scale", (hidden,), c["layer_scale_initial_scale"]),
                _const(f"{layer}mlp_layer_scale.scale", (hidden,), c["layer_scale_initial_scale"])]
    return out


def _mimi_frame_rates(c: dict[str, Any]) -> tuple[float, int]:
    """(frame_rate, encodec_frame_rate) as MimiConfig computes them."""
    hop = math.prod(c["upsampling_ratios"])
    frame_rate = c.get("_frame_rate") or c.get("frame_rate") or c["sampling_rate"] / (hop * 2)
    return frame_rate, math.ceil(c["sampling_rate"] / hop)


def _mimi_rvq(p: str, c: dict[str, Any], n_q: int) -> list[TensorSpec]:
    out: list[TensorSpec] = []
    for j in range(n_q):
        book = f"{p}layers.{j}.codebook."
        out += [TensorSpec(book + "initialized", (1,), "float32", "ones")]
        out += _codebook_stats(book, "embed_sum", c["codebook_size"], c["codebook_dim"], std=0.1)
    hidden, vq_dim = c["hidden_size"], c["vector_quantization_hidden_dimension"]
    if vq_dim != hidden:
        out += _conv(p + "input_proj.", hidden, vq_dim, 1, bias=False)
        out += _conv(p + "output_proj.", vq_dim, hidden, 1, bias=False)
    return out


def _codec_encoder(p: str, c: dict[str, Any]) -> list[TensorSpec]:
    out = _mimi_seanet(p + "encoder.", c) + _mimi_transformer(p + "encoder_transformer.", c)
    frame_rate, encodec_rate = _mimi_frame_rates(c)
    if frame_rate != encodec_rate:
        k = 2 * int(encodec_rate / frame_rate)
        out += _conv(p + "downsample.conv.", c["hidden_size"], c["hidden_size"], k, bias=False)
    n_sem = c["num_semantic_quantizers"]
    out += _mimi_rvq(p + "quantizer.semantic_residual_vector_quantizer.", c, n_sem)
    out += _mimi_rvq(p + "quantizer.acoustic_residual_vector_quantizer.", c, c["num_quantizers"] - n_sem)
    return out


def codec_tensors(config: dict[str, Any]) -> list[TensorSpec]:
    """Every tensor of speech_tokenizer/model.safetensors (float32), in state_dict order."""
    return _codec_encoder("encoder.", config["encoder_config"]) + _codec_decoder("decoder.", config["decoder_config"])


# ---------------------------------------------------------------------------------------------
# speaker encoder (Qwen3TTSSpeakerEncoder, ECAPA-TDNN; no norm layers, no buffers)
# ---------------------------------------------------------------------------------------------

_ECAPA_DEFAULTS: dict[str, Any] = {
    "mel_dim": 128, "enc_channels": [512, 512, 512, 512, 1536], "enc_kernel_sizes": [5, 3, 3, 3, 1],
    "enc_dilations": [1, 2, 3, 4, 1], "enc_attention_channels": 128, "enc_res2net_scale": 8, "enc_se_channels": 128,
}
_RELU_GAIN = math.sqrt(2.0)


def _tdnn(p: str, n_in: int, n_out: int, k: int) -> list[TensorSpec]:
    """TimeDelayNetBlock: conv (+ ReLU)."""
    return _conv(p + "conv.", n_in, n_out, k, gain=_RELU_GAIN, dtype="bfloat16")


def _se_res2net(p: str, n_in: int, n_out: int, k: int, scale: int, se: int) -> list[TensorSpec]:
    part = n_out // scale
    out = _tdnn(p + "tdnn1.", n_in, n_out, 1)
    for j in range(scale - 1):
        out += _tdnn(f"{p}res2net_block.blocks.{j}.", n_in // scale, part, k)
    out += _tdnn(p + "tdnn2.", n_out, n_out, 1)
    out += _conv(p + "se_block.conv1.", n_out, se, 1, gain=_RELU_GAIN, dtype="bfloat16")
    return out + _conv(p + "se_block.conv2.", se, n_out, 1, dtype="bfloat16")


def speaker_encoder_tensors(config: dict[str, Any], prefix: str = "speaker_encoder.") -> list[TensorSpec]:
    """Every tensor of the ECAPA-TDNN speaker encoder (bfloat16), in state_dict order."""
    c = {**_ECAPA_DEFAULTS, **config}
    ch, ks, dil = c["enc_channels"], c["enc_kernel_sizes"], c["enc_dilations"]
    if not len(ch) == len(ks) == len(dil):
        raise ValueError("enc_channels, enc_kernel_sizes and enc_dilations must have the same length")
    out = _tdnn(prefix + "blocks.0.", c["mel_dim"], ch[0], ks[0])
    for i in range(1, len(ch) - 1):
        out += _se_res2net(f"{prefix}blocks.{i}.", ch[i - 1], ch[i], ks[i], c["enc_res2net_scale"],
                           c["enc_se_channels"])
    out += _tdnn(prefix + "mfa.", ch[-1], ch[-1], ks[-1])
    att = c["enc_attention_channels"]
    out += _tdnn(prefix + "asp.tdnn.", 3 * ch[-1], att, 1)
    out += _conv(prefix + "asp.conv.", att, ch[-1], 1, dtype="bfloat16")
    # A small final gain keeps the x-vector (log-mel inputs have a large offset) near the scale
    # of the talker's embeddings, into whose sequence it is inserted.
    return out + _conv(prefix + "fc.", 2 * ch[-1], c["enc_dim"], 1, gain=0.05, dtype="bfloat16")
