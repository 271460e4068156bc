"""Typed, frozen descriptions of a Qwen3-TTS checkpoint, read from its JSON files.

Every value comes from the checkpoint's own `config.json`, `generation_config.json` and
`speech_tokenizer/config.json`. The official Python config classes have wrong defaults
(20 talker layers, 32 code groups, EOS 4198, θ 1e4 …), so a key that a real checkpoint
always carries is *required* here: a missing one is an error naming the file and key,
never a silent default. The only defaults are those the official code itself uses for
keys the released files omit (documented at each use).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

MODEL_TYPES = ("custom_voice", "voice_design", "base")


class ConfigError(ValueError):
    """A checkpoint configuration that cannot be used; the message names file and key."""


class _Reader:
    """Reads keys from one config dict, naming the file and path in every error."""

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a JSON object")
        self.data, self.where = data, where

    def req(self, key: str, kind: type | tuple[type, ...] = (int, float, str, bool, list, dict)) -> Any:
        if key not in self.data or self.data[key] is None:
            raise ConfigError(f"{self.where}: missing required key {key!r}")
        value = self.data[key]
        if kind in (int, float) and isinstance(value, bool):
            raise ConfigError(f"{self.where}: key {key!r} must be a number, got {value!r}")
        if kind is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, kind):
            raise ConfigError(f"{self.where}: key {key!r} has type {type(value).__name__}, expected {kind}")
        return value

    def opt(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def sub(self, key: str) -> _Reader:
        return _Reader(self.req(key, dict), f"{self.where}:{key}")


@dataclass(frozen=True)
class LayerStackSpec:
    """A Qwen3-style decoder stack (talker, code predictor): pre-norm, GQA, q/k RMSNorm, SwiGLU."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int

    @classmethod
    def read(cls, r: _Reader) -> LayerStackSpec:
        hidden, heads = r.req("hidden_size", int), r.req("num_attention_heads", int)
        spec = cls(
            hidden_size=hidden,
            intermediate_size=r.req("intermediate_size", int),
            num_layers=r.req("num_hidden_layers", int),
            num_heads=heads,
            num_kv_heads=r.req("num_key_value_heads", int),
            # the official attention uses getattr(config, "head_dim", hidden // heads)
            head_dim=int(r.opt("head_dim", hidden // heads)),
            rms_norm_eps=r.req("rms_norm_eps", float),
            rope_theta=r.req("rope_theta", float),
            max_position_embeddings=r.req("max_position_embeddings", int),
        )
        if heads % spec.num_kv_heads:
            raise ConfigError(f"{r.where}: num_attention_heads {heads} not a multiple of kv heads {spec.num_kv_heads}")
        return spec


@dataclass(frozen=True)
class CodecIds:
    """Control rows of the talker's codec vocabulary."""

    pad: int
    bos: int
    eos: int
    think: int
    nothink: int
    think_bos: int
    think_eos: int


@dataclass(frozen=True)
class TextIds:
    """Text-vocabulary ids that the prompt layout uses directly."""

    im_start: int
    im_end: int
    assistant: int
    tts_pad: int
    tts_bos: int
    tts_eos: int


@dataclass(frozen=True)
class Speaker:
    name: str
    codec_id: int  # row of talker.model.codec_embedding
    dialect: str | None  # e.g. "sichuan_dialect": replaces chinese/auto for this speaker


@dataclass(frozen=True)
class TalkerSpec:
    stack: LayerStackSpec
    vocab_size: int  # codec vocabulary (3072): 0..2047 audio codes, the rest control/language/speaker
    text_vocab_size: int
    text_hidden_size: int
    num_code_groups: int


@dataclass(frozen=True)
class CodePredictorSpec:
    stack: LayerStackSpec
    vocab_size: int  # 2048 codes per group
    num_code_groups: int
    has_projection: bool  # small_to_mtp_projection exists when its width differs from the talker's


@dataclass(frozen=True)
class GenerationDefaults:
    """generation_config.json; keys it omits fall back to the official wrapper's hard defaults."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_do_sample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    max_new_tokens: int = 2048


@dataclass(frozen=True)
class CodecDecoderSpec:
    codebook_size: int
    codebook_dim: int
    num_quantizers: int
    num_semantic_quantizers: int
    latent_dim: int
    decoder_dim: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    sliding_window: int
    rope_theta: float
    rms_norm_eps: float
    sample_rate: int
    samples_per_frame: int


@dataclass(frozen=True)
class CodecEncoderSpec:
    """speech_tokenizer/config.json: the encoder half of a transformers MimiModel (its
    `encoder_config`) and how many of its codebooks Qwen keeps. Defaults are MimiConfig's
    own for keys a serialised config may omit; the released file carries them all."""

    valid_num_quantizers: int  # codebooks kept (16 of the 32 Mimi quantizers)
    sample_rate: int
    samples_per_frame: int
    # SEANet encoder
    num_filters: int = 64
    num_residual_layers: int = 1
    upsampling_ratios: tuple[int, ...] = (8, 6, 5, 4)  # applied reversed (4, 5, 6, 8) when encoding
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    compress: int = 2
    pad_mode: str = "constant"
    use_conv_shortcut: bool = False
    # encoder transformer
    hidden_size: int = 512
    intermediate_size: int = 2048
    num_layers: int = 8
    num_heads: int = 8
    num_kv_heads: int = 8
    head_dim: int = 64
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # downsample conv to the frame rate (kernel 0: frame rate already reached, no conv)
    downsample_kernel: int = 4
    downsample_stride: int = 2
    # split residual vector quantizer
    codebook_size: int = 2048
    codebook_dim: int = 256
    num_quantizers: int = 32
    num_semantic_quantizers: int = 1
    vq_hidden_dim: int = 256


@dataclass(frozen=True)
class SpeakerEncoderSpec:
    """ECAPA-TDNN; the released configs carry only enc_dim and sample_rate, the official
    class supplies the rest (those defaults are the real architecture)."""

    enc_dim: int
    sample_rate: int
    mel_dim: int = 128
    channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    attention_channels: int = 128
    res2net_scale: int = 8
    se_channels: int = 128


@dataclass(frozen=True)
class VoiceSpec:
    """What a model offers a voice catalogue, read from `config.json` alone (so a server can
    list its voices before the rest of the checkpoint is downloaded or compiled)."""

    model_type: str  # custom_voice | voice_design | base
    model_size: str  # "0b6" | "1b7" (as the config says)
    languages: Mapping[str, int]  # lower-case name -> codec id, dialects included
    speakers: tuple[Speaker, ...]

    @property
    def supported_languages(self) -> tuple[str, ...]:
        """"auto" plus every language that is not a dialect, as the official model lists them."""
        return ("auto",) + tuple(n for n in self.languages if "dialect" not in n)

    def speaker(self, name: str) -> Speaker:
        for s in self.speakers:
            if s.name == name.lower():
                return s
        known = ", ".join(s.name for s in self.speakers) or "none"
        raise KeyError(f"unknown speaker {name!r} (this model has: {known})")


@dataclass(frozen=True)
class ModelSpec(VoiceSpec):
    talker: TalkerSpec
    code_predictor: CodePredictorSpec
    codec_ids: CodecIds
    text_ids: TextIds
    generation: GenerationDefaults
    codec_decoder: CodecDecoderSpec
    codec_encoder: CodecEncoderSpec
    speaker_encoder: SpeakerEncoderSpec | None


def parse_voice_spec(config: Mapping[str, Any], where: str = "config.json") -> VoiceSpec:
    """Model type, size, languages and preset speakers from a checkpoint's config.json."""
    r = _Reader(config, where)
    model_type = r.req("tts_model_type", str)
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"{where}: unknown tts_model_type {model_type!r} (expected one of {', '.join(MODEL_TYPES)})")
    t = r.sub("talker_config")
    languages = {k.lower(): int(v) for k, v in t.req("codec_language_id", dict).items()}
    spk_ids = t.opt("spk_id", {}) or {}
    dialect_of = t.opt("spk_is_dialect", {}) or {}
    speakers = []
    for name, codec_id in spk_ids.items():
        dialect = dialect_of.get(name, False)
        if dialect and dialect not in languages:
            raise ConfigError(f"{where}: speaker {name!r} has dialect {dialect!r} missing from codec_language_id")
        speakers.append(Speaker(name.lower(), int(codec_id), dialect or None))
    if model_type == "custom_voice" and not speakers:
        raise ConfigError(f"{where}: a custom_voice model needs talker_config.spk_id")
    return VoiceSpec(model_type=model_type, model_size=r.req("tts_model_size", str), languages=languages,
                     speakers=tuple(speakers))


def parse_model_config(config: Mapping[str, Any], generation: Mapping[str, Any],
                       codec: Mapping[str, Any], where: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from the three JSON documents of a checkpoint."""
    voices = parse_voice_spec(config, where)
    r = _Reader(config, where)
    tokenizer_type = r.req("tokenizer_type", str)
    if tokenizer_type != "qwen3_tts_tokenizer_12hz":
        raise ConfigError(f"{where}: tokenizer_type {tokenizer_type!r} is not supported (only the 12 Hz codec)")
    t = r.sub("talker_config")
    cp = t.sub("code_predictor_config")
    talker = TalkerSpec(
        stack=LayerStackSpec.read(t),
        vocab_size=t.req("vocab_size", int),
        text_vocab_size=t.req("text_vocab_size", int),
        text_hidden_size=t.req("text_hidden_size", int),
        num_code_groups=t.req("num_code_groups", int),
    )
    cp_stack = LayerStackSpec.read(cp)
    code_predictor = CodePredictorSpec(
        stack=cp_stack,
        vocab_size=cp.req("vocab_size", int),
        num_code_groups=cp.req("num_code_groups", int),
        has_projection=cp_stack.hidden_size != talker.stack.hidden_size,
    )
    if code_predictor.num_code_groups != talker.num_code_groups:
        raise ConfigError(f"{where}: talker and code predictor disagree on num_code_groups")
    codec_ids = CodecIds(
        pad=t.req("codec_pad_id", int), bos=t.req("codec_bos_id", int), eos=t.req("codec_eos_token_id", int),
        think=t.req("codec_think_id", int), nothink=t.req("codec_nothink_id", int),
        think_bos=t.req("codec_think_bos_id", int), think_eos=t.req("codec_think_eos_id", int),
    )
    text_ids = TextIds(
        im_start=r.req("im_start_token_id", int), im_end=r.req("im_end_token_id", int),
        assistant=r.req("assistant_token_id", int), tts_pad=r.req("tts_pad_token_id", int),
        tts_bos=r.req("tts_bos_token_id", int), tts_eos=r.req("tts_eos_token_id", int),
    )
    for ident in [*voices.languages.values(), *(s.codec_id for s in voices.speakers),
                  *vars(codec_ids).values()]:
        if not 0 <= ident < talker.vocab_size:
            raise ConfigError(f"{where}: codec id {ident} outside the talker vocabulary ({talker.vocab_size})")
    speaker_encoder = None
    if voices.model_type == "base":
        s = r.sub("speaker_encoder_config")
        speaker_encoder = SpeakerEncoderSpec(enc_dim=s.req("enc_dim", int), sample_rate=s.req("sample_rate", int),
                                             **_speaker_encoder_overrides(s))
    return ModelSpec(
        **{f.name: getattr(voices, f.name) for f in fields(VoiceSpec)},
        talker=talker,
        code_predictor=code_predictor,
        codec_ids=codec_ids,
        text_ids=text_ids,
        generation=parse_generation_config(generation),
        codec_decoder=parse_codec_decoder(codec),
        codec_encoder=parse_codec_encoder(codec),
        speaker_encoder=speaker_encoder,
    )


def _speaker_encoder_overrides(s: _Reader) -> dict[str, Any]:
    keys = {"mel_dim": "mel_dim", "enc_channels": "channels", "enc_kernel_sizes": "kernel_sizes",
            "enc_dilations": "dilations", "enc_attention_channels": "attention_channels",
            "enc_res2net_scale": "res2net_scale", "enc_se_channels": "se_channels"}
    out: dict[str, Any] = {}
    for key, field in keys.items():
        if key in s.data:
            value = s.data[key]
            out[field] = tuple(value) if isinstance(value, list) else value
    return out


def parse_generation_config(data: Mapping[str, Any]) -> GenerationDefaults:
    d = GenerationDefaults()
    g = _Reader(data, "generation_config.json")
    return GenerationDefaults(
        do_sample=bool(g.opt("do_sample", d.do_sample)),
        temperature=float(g.opt("temperature", d.temperature)),
        top_k=int(g.opt("top_k", d.top_k)),
        top_p=float(g.opt("top_p", d.top_p)),
        repetition_penalty=float(g.opt("repetition_penalty", d.repetition_penalty)),
        subtalker_do_sample=bool(g.opt("subtalker_dosample", d.subtalker_do_sample)),
        subtalker_temperature=float(g.opt("subtalker_temperature", d.subtalker_temperature)),
        subtalker_top_k=int(g.opt("subtalker_top_k", d.subtalker_top_k)),
        subtalker_top_p=float(g.opt("subtalker_top_p", d.subtalker_top_p)),
        max_new_tokens=int(g.opt("max_new_tokens", d.max_new_tokens)),
    )


def parse_codec_decoder(data: Mapping[str, Any]) -> CodecDecoderSpec:
    top = _Reader(data, "speech_tokenizer/config.json")
    if top.req("model_type", str) != "qwen3_tts_tokenizer_12hz":
        raise ConfigError(f"{top.where}: model_type must be qwen3_tts_tokenizer_12hz")
    d = top.sub("decoder_config")
    hidden, heads = d.req("hidden_size", int), d.req("num_attention_heads", int)
    spec = CodecDecoderSpec(
        codebook_size=d.req("codebook_size", int),
        codebook_dim=d.req("codebook_dim", int),
        num_quantizers=d.req("num_quantizers", int),
        num_semantic_quantizers=int(d.opt("num_semantic_quantizers", 1)),
        latent_dim=d.req("latent_dim", int),
        decoder_dim=d.req("decoder_dim", int),
        upsample_rates=tuple(d.req("upsample_rates", list)),
        upsampling_ratios=tuple(d.req("upsampling_ratios", list)),
        hidden_size=hidden,
        intermediate_size=d.req("intermediate_size", int),
        num_layers=d.req("num_hidden_layers", int),
        num_heads=heads,
        num_kv_heads=d.req("num_key_value_heads", int),
        head_dim=int(d.opt("head_dim", hidden // heads)),
        sliding_window=d.req("sliding_window", int),
        rope_theta=d.req("rope_theta", float),
        rms_norm_eps=d.req("rms_norm_eps", float),
        sample_rate=top.req("output_sample_rate", int),
        samples_per_frame=top.req("decode_upsample_rate", int),
    )
    product = 1
    for f in (*spec.upsample_rates, *spec.upsampling_ratios):
        product *= f
    if product != spec.samples_per_frame:
        raise ConfigError(f"{top.where}: upsampling factors multiply to {product}, "
                          f"decode_upsample_rate is {spec.samples_per_frame}")
    return spec


def parse_codec_encoder(data: Mapping[str, Any]) -> CodecEncoderSpec:
    """The encoder spec, with MimiConfig's derived values (head_dim, frame rates → the
    downsample conv) computed as MimiConfig computes them. Without `encoder_config` the
    official config builds a default MimiConfig, and so does this. Options the graph does
    not implement (non-causal convs, reflect padding, stereo, non-GELU MLP) are refused."""
    top = _Reader(data, "speech_tokenizer/config.json")
    e = top.sub("encoder_config") if "encoder_config" in data else _Reader({}, f"{top.where}:encoder_config")
    d = CodecEncoderSpec  # the class: its field defaults are MimiConfig's
    hidden, heads = int(e.opt("hidden_size", d.hidden_size)), int(e.opt("num_attention_heads", d.num_heads))
    ratios = tuple(int(r) for r in e.opt("upsampling_ratios", d.upsampling_ratios))
    rate = int(e.opt("sampling_rate", 24000))
    hop = 1
    for r in ratios:
        hop *= r
    encodec_frame_rate = -(-rate // hop)  # math.ceil(sampling_rate / hop_length)
    frame_rate = e.opt("_frame_rate", e.opt("frame_rate", None))
    if frame_rate is None:  # MimiConfig.frame_rate: sampling_rate / (product of all encoder strides)
        frame_rate = rate / (hop * 2)
    kernel = 0 if frame_rate == encodec_frame_rate else 2 * int(encodec_frame_rate / frame_rate)
    spec = CodecEncoderSpec(
        valid_num_quantizers=top.req("encoder_valid_num_quantizers", int),
        sample_rate=top.req("input_sample_rate", int),
        samples_per_frame=top.req("encode_downsample_rate", int),
        num_filters=int(e.opt("num_filters", d.num_filters)),
        num_residual_layers=int(e.opt("num_residual_layers", d.num_residual_layers)),
        upsampling_ratios=ratios,
        kernel_size=int(e.opt("kernel_size", d.kernel_size)),
        last_kernel_size=int(e.opt("last_kernel_size", d.last_kernel_size)),
        residual_kernel_size=int(e.opt("residual_kernel_size", d.residual_kernel_size)),
        dilation_growth_rate=int(e.opt("dilation_growth_rate", d.dilation_growth_rate)),
        compress=int(e.opt("compress", d.compress)),
        pad_mode=str(e.opt("pad_mode", d.pad_mode)),
        use_conv_shortcut=bool(e.opt("use_conv_shortcut", d.use_conv_shortcut)),
        hidden_size=hidden,
        intermediate_size=int(e.opt("intermediate_size", d.intermediate_size)),
        num_layers=int(e.opt("num_hidden_layers", d.num_layers)),
        num_heads=heads,
        num_kv_heads=int(e.opt("num_key_value_heads", d.num_kv_heads)),
        head_dim=int(e.opt("head_dim", hidden // heads)),
        norm_eps=float(e.opt("norm_eps", d.norm_eps)),
        rope_theta=float(e.opt("rope_theta", d.rope_theta)),
        downsample_kernel=kernel,
        codebook_size=int(e.opt("codebook_size", d.codebook_size)),
        codebook_dim=int(e.opt("codebook_dim", hidden)),
        num_quantizers=int(e.opt("num_quantizers", d.num_quantizers)),
        num_semantic_quantizers=int(e.opt("num_semantic_quantizers", d.num_semantic_quantizers)),
        vq_hidden_dim=int(e.opt("vector_quantization_hidden_dimension", d.vq_hidden_dim)),
    )
    refused = {"audio_channels": (e.opt("audio_channels", 1), 1),
               "use_causal_conv": (e.opt("use_causal_conv", True), True),
               "hidden_act": (e.opt("hidden_act", "gelu"), "gelu")}
    for key, (value, supported) in refused.items():
        if value != supported:
            raise ConfigError(f"{e.where}: {key}={value!r} is not supported (only {supported!r})")
    if spec.pad_mode not in ("constant", "replicate"):
        raise ConfigError(f"{e.where}: pad_mode {spec.pad_mode!r} is not supported (constant or replicate)")
    if rate != spec.sample_rate:
        raise ConfigError(f"{e.where}: sampling_rate {rate} differs from input_sample_rate {spec.sample_rate}")
    if hop * (spec.downsample_stride if kernel else 1) != spec.samples_per_frame:
        raise ConfigError(f"{e.where}: encoder strides give {hop}{' x 2' if kernel else ''} samples per frame, "
                          f"encode_downsample_rate is {spec.samples_per_frame}")
    if not spec.num_semantic_quantizers <= spec.valid_num_quantizers <= spec.num_quantizers:
        raise ConfigError(f"{top.where}: encoder_valid_num_quantizers {spec.valid_num_quantizers} outside "
                          f"[{spec.num_semantic_quantizers}, {spec.num_quantizers}]")
    if heads % spec.num_kv_heads:
        raise ConfigError(f"{e.where}: num_attention_heads {heads} not a multiple of kv heads {spec.num_kv_heads}")
    return spec
