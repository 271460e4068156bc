"""config.json / generation_config.json of synthetic checkpoints, in the released layout.

Full-size presets carry the real shapes and every key of the released configs (ids,
speakers, languages, RoPE settings, the code predictor's legacy generation keys); tiny
presets keep the same keys and ids with small widths so the official classes build them
in milliseconds. `tiny` follows the 0.6B code path (code predictor as wide as the talker,
no projection); `tiny-1.7b` the 1.7B one (`small_to_mtp_projection` present).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VARIANTS = ("custom_voice", "voice_design", "base")

LANGUAGE_IDS = {
    "chinese": 2055, "english": 2050, "german": 2053, "italian": 2070, "portuguese": 2071, "spanish": 2054,
    "japanese": 2058, "korean": 2064, "french": 2061, "russian": 2069,
    "beijing_dialect": 2074, "sichuan_dialect": 2062,
}
SPEAKER_IDS = {"serena": 3066, "vivian": 3065, "uncle_fu": 3010, "ryan": 3061, "aiden": 2861,
               "ono_anna": 2873, "sohee": 2864, "eric": 2875, "dylan": 2878}
SPEAKER_DIALECTS: dict[str, Any] = {name: False for name in SPEAKER_IDS} | {
    "eric": "sichuan_dialect", "dylan": "beijing_dialect"}

GENERATION_CONFIG = {
    "do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
    "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0, "subtalker_top_k": 50,
    "max_new_tokens": 8192,
}


@dataclass(frozen=True)
class Preset:
    name: str
    model_size: str  # tts_model_size as the config spells it
    talker_hidden: int
    talker_intermediate: int
    talker_layers: int
    heads: int
    kv_heads: int
    head_dim: int
    mrope_section: tuple[int, int, int]  # sums to head_dim / 2
    text_hidden: int
    cp_hidden: int
    cp_intermediate: int
    cp_layers: int
    codec: str  # speech_tokenizer preset: "full" or "tiny"
    full_size: bool  # real widths: weights scaled by fan-in, real tokenizer


PRESETS = {
    p.name: p
    for p in (
        Preset("tiny", "0b6", 64, 128, 2, 4, 2, 16, (4, 2, 2), 32, 64, 128, 2, "tiny", False),
        Preset("tiny-1.7b", "1b7", 64, 128, 2, 4, 2, 16, (4, 2, 2), 32, 32, 64, 2, "tiny", False),
        Preset("0.6b", "0b6", 1024, 3072, 28, 16, 8, 128, (24, 20, 20), 2048, 1024, 3072, 5, "full", True),
        Preset("1.7b", "1b7", 2048, 6144, 28, 16, 8, 128, (24, 20, 20), 2048, 1024, 3072, 5, "full", True),
    )
}

# The code predictor config as released: the real keys plus PretrainedConfig's serialised
# legacy generation fields (the official model passes explicit kwargs, so they are inert).
_CP_LEGACY = {
    "_name_or_path": "", "add_cross_attention": False, "architectures": None, "bad_words_ids": None,
    "begin_suppress_tokens": None, "bos_token_id": None, "chunk_size_feed_forward": 0,
    "cross_attention_hidden_size": None, "decoder_start_token_id": None, "diversity_penalty": 0.0,
    "do_sample": False, "early_stopping": False, "encoder_no_repeat_ngram_size": 0, "eos_token_id": None,
    "exponential_decay_length_penalty": None, "finetuning_task": None, "forced_bos_token_id": None,
    "forced_eos_token_id": None, "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "is_decoder": False,
    "is_encoder_decoder": False, "label2id": {"LABEL_0": 0, "LABEL_1": 1}, "length_penalty": 1.0,
    "max_length": 20, "min_length": 0, "no_repeat_ngram_size": 0, "num_beam_groups": 1, "num_beams": 1,
    "num_return_sequences": 1, "output_attentions": False, "output_hidden_states": False,
    "output_scores": False, "pad_token_id": None, "prefix": None, "problem_type": None, "pruned_heads": {},
    "remove_invalid_values": False, "repetition_penalty": 1.0, "return_dict": True,
    "return_dict_in_generate": False, "sep_token_id": None, "suppress_tokens": None,
    "task_specific_params": None, "temperature": 1.0, "tf_legacy_loss": False, "tie_encoder_decoder": False,
    "tie_word_embeddings": False, "tokenizer_class": None, "top_k": 50, "top_p": 1.0, "dtype": None,
    "torchscript": False, "typical_p": 1.0, "use_bfloat16": False,
}


def _code_predictor_config(p: Preset) -> dict[str, Any]:
    return {
        **_CP_LEGACY,
        "attention_bias": False, "attention_dropout": 0, "head_dim": p.head_dim, "hidden_act": "silu",
        "hidden_size": p.cp_hidden, "initializer_range": 0.02, "intermediate_size": p.cp_intermediate,
        "layer_types": ["full_attention"] * p.cp_layers, "max_position_embeddings": 65536,
        "max_window_layers": 28, "model_type": "qwen3_tts_talker_code_predictor",
        "num_attention_heads": p.heads, "num_code_groups": 16, "num_hidden_layers": p.cp_layers,
        "num_key_value_heads": p.kv_heads, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "use_cache": True, "use_sliding_window": False, "vocab_size": 2048,
    }


def model_config(preset: str, variant: str) -> dict[str, Any]:
    """The top-level config.json of a checkpoint."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (expected one of {', '.join(VARIANTS)})")
    p = PRESETS[preset]
    custom = variant == "custom_voice"
    talker = {
        "attention_bias": False, "attention_dropout": 0,
        "code_predictor_config": _code_predictor_config(p),
        "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_think_id": 2154,
        "codec_language_id": dict(LANGUAGE_IDS),
        "codec_nothink_id": 2155, "codec_pad_id": 2148, "codec_think_bos_id": 2156, "codec_think_eos_id": 2157,
        # Base models ship empty speaker tables; the official model calls .keys() on them.
        "spk_id": dict(SPEAKER_IDS) if custom else {},
        "spk_is_dialect": dict(SPEAKER_DIALECTS) if custom else {},
        "head_dim": p.head_dim, "hidden_act": "silu", "hidden_size": p.talker_hidden,
        "initializer_range": 0.02, "intermediate_size": p.talker_intermediate,
        "max_position_embeddings": 32768, "model_type": "qwen3_tts_talker",
        "num_attention_heads": p.heads, "num_code_groups": 16, "num_hidden_layers": p.talker_layers,
        "num_key_value_heads": p.kv_heads, "position_id_per_seconds": 13, "rms_norm_eps": 1e-06,
        "rope_scaling": {"interleaved": True, "mrope_section": list(p.mrope_section),
                         "rope_type": "default", "type": "default"},
        "rope_theta": 1000000, "sliding_window": None, "text_hidden_size": p.text_hidden,
        "text_vocab_size": 151936, "use_cache": True, "use_sliding_window": False, "vocab_size": 3072,
    }
    config: dict[str, Any] = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "assistant_token_id": 77091, "im_end_token_id": 151645, "im_start_token_id": 151644,
        "tts_bos_token_id": 151672, "tts_eos_token_id": 151673, "tts_pad_token_id": 151671,
        "model_type": "qwen3_tts", "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": p.model_size, "tts_model_type": variant,
        "talker_config": talker,
    }
    if variant == "base":
        from .codec_layout import speaker_encoder_config

        config["speaker_encoder_config"] = speaker_encoder_config(p.talker_hidden, tiny_channels=not p.full_size)
    config["transformers_version"] = "4.57.3"
    config["auto_map"] = {"AutoConfig": "configuration_qwen3_tts.Qwen3TTSConfig",
                          "AutoModel": "modeling_qwen3_tts.Qwen3TTSForConditionalGeneration"}
    return config
