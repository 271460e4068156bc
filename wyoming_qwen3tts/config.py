"""config.yaml → typed, validated, frozen server settings.

The defaults live here, in the dataclasses; config.yaml documents every one of them and a
test keeps the two identical. Every key is checked against the dataclass it fills: an
unknown key, a value of the wrong type or out of range raises ConfigError naming the key by
its dotted path ("engine.max_batchh: unknown key (did you mean max_batch?)"), so a typo
never silently falls back to a default.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from .engine.config import RETIRED, EngineConfig, retired
from .engine.devices import KV_PRECISIONS, PRECISION_SETTINGS

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
DEVICES = ("CPU", "GPU", "NPU", "AUTO")
# Equal to convert.ops.WEIGHT_FORMATS (a test checks it); importing that would load openvino.
WEIGHT_FORMATS = ("int8", "int4", "mixed", "fp16", "fp32")
WEIGHT_SETTINGS = ("auto", *WEIGHT_FORMATS)  # auto: measured per CPU at the first start (docs/WEIGHTS.md)
# Equal to convert.pipeline.CODEC_FORMATS (a test checks it): the codec decoder's weights.
CODEC_FORMATS = ("fp32", "fp16", "int8")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key by its dotted path."""


@dataclass(frozen=True)
class ModelConfig:
    """Which model to serve, and where the server keeps the models it converts."""

    source: str = DEFAULT_MODEL  # a qwen3tts-convert output dir, a checkpoint dir, or a hub repo id
    data_dir: str = "~/.cache/wyoming-qwen3tts"  # conversions of checkpoints and repo ids
    weights: str = "auto"  # weight format of those conversions; auto: the most accurate that is real time here
    codec_weights: str = "fp32"  # the codec decoder's in those conversions; int8: faster, not exact (opt-in)
    memory_budget_mb: int | None = None  # several models: unload the least recently used idle one beyond this

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser()

    def validate(self) -> None:
        _non_empty("model.source", self.source)
        _non_empty("model.data_dir", self.data_dir)
        _one_of("model.weights", self.weights, WEIGHT_SETTINGS)
        _one_of("model.codec_weights", self.codec_weights, CODEC_FORMATS)
        if self.memory_budget_mb is not None and self.memory_budget_mb < 1:
            raise ConfigError(f"model.memory_budget_mb: must be >= 1, got {self.memory_budget_mb}")


@dataclass(frozen=True)
class ModelEntry:
    """One of several models served together (`models:`); data_dir is model.data_dir."""

    source: str
    weights: str | None = None  # None: model.weights
    preload: bool = True  # False: loaded on its first request (which waits up to server.loading_wait)

    def validate(self, where: str) -> None:
        _non_empty(f"{where}.source", self.source)
        if self.weights is not None:
            _one_of(f"{where}.weights", self.weights, WEIGHT_SETTINGS)


@dataclass(frozen=True)
class DevicesConfig:
    """OpenVINO device of each compiled graph (they are split by compute shape)."""

    talker: str = "CPU"
    subcode: str = "CPU"
    decoder: str = "CPU"
    threads: int | None = None  # CPU inference threads per graph; None: the plugin's choice (all cores)

    def validate(self) -> None:
        for name in ("talker", "subcode", "decoder"):
            value = getattr(self, name)
            if value not in DEVICES and not re.fullmatch(r"GPU\.\d+", value):
                raise ConfigError(f"devices.{name}: {value!r} is not one of {', '.join(DEVICES)} "
                                  f"(or GPU.<n> for one of several GPUs)")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"devices.threads: must be >= 1, got {self.threads}")


@dataclass(frozen=True)
class PrecisionConfig:
    """Numeric precision, always set explicitly (OpenVINO's own CPU default changes with the
    CPU): auto is each device's fastest native precision (engine/devices.py), f32 the exact path."""

    inference: str = "auto"
    kv_cache: str = "u8"

    def validate(self) -> None:
        _one_of("precision.inference", self.inference, PRECISION_SETTINGS)
        _one_of("precision.kv_cache", self.kv_cache, KV_PRECISIONS)


TEXT_FEEDING = ("word", "sentence")
NORMALIZE_TEXT = ("auto", "off")


@dataclass(frozen=True)
class ServerSettings:
    """The Wyoming side: where to listen, how to chunk audio, request limits, sampling."""

    uri: str = "tcp://0.0.0.0:10200"
    samples_per_chunk: int = 1024
    max_text_chars: int = 5000
    max_sentence_chars: int = 300
    zeroconf: str | None = None  # service name to announce over mDNS; None: no announcement
    greedy: bool = False
    seed: int | None = None
    default_voice: str | None = None
    loading_wait: float = 30.0  # seconds a request arriving while the model loads waits for it
    profile: bool = False  # log every request's first-audio timing at info, and their medians at shutdown
    text_feeding: str = "word"  # streamed text: "word" (a sentence starts with its first words) or "sentence"
    normalize_text: str = "auto"  # numbers, times, units... in words in the sentence's language (docs/TEXT.md); "off"
    holdback_s: float = 0.5  # streamed requests: the longest a sentence's audio start is held against underrun
    http: str | None = None  # HOST:PORT of the voice lab's HTTP side (docs/HTTP.md); None: off
    http_token: str | None = None  # bearer token of the HTTP side; required off loopback unless http_ingress
    http_ingress: bool = False  # answer HTTP only from Home Assistant's ingress proxy (and token holders)
    asr: str | None = None  # tcp://HOST:PORT of a Wyoming speech-to-text server (voice lab transcripts)
    ha_url: str | None = None  # Home Assistant, to reload its Wyoming entry when the voices change
    ha_token: str | None = None  # its long-lived token; None: env SUPERVISOR_TOKEN or HA_TOKEN

    def validate(self) -> None:
        _check_uri(self.uri)
        if self.loading_wait < 0:
            raise ConfigError(f"server.loading_wait: must be >= 0, got {self.loading_wait}")
        if self.text_feeding not in TEXT_FEEDING:
            raise ConfigError(f"server.text_feeding: {self.text_feeding!r} is not one of {', '.join(TEXT_FEEDING)}")
        if self.normalize_text not in NORMALIZE_TEXT:
            raise ConfigError(f"server.normalize_text: {self.normalize_text!r} is not one of "
                              f"{', '.join(NORMALIZE_TEXT)}")
        if self.holdback_s < 0:
            raise ConfigError(f"server.holdback_s: must be >= 0, got {self.holdback_s}")
        for name in ("samples_per_chunk", "max_text_chars", "max_sentence_chars"):
            if getattr(self, name) < 1:
                raise ConfigError(f"server.{name}: must be >= 1, got {getattr(self, name)}")
        if self.seed is not None and self.seed < 0:
            raise ConfigError(f"server.seed: must be >= 0, got {self.seed}")
        for name in ("zeroconf", "default_voice", "http_token", "ha_token"):
            if getattr(self, name) is not None:
                _non_empty(f"server.{name}", getattr(self, name))
        if self.http is not None:
            host, _ = http_address(self.http)
            if not self.http_token and not self.http_ingress and not _loopback(host):
                raise ConfigError(f"server.http: {self.http} is reachable from other machines; set server.http_token "
                                  f"(--http-token), or bind to 127.0.0.1, or use server.http_ingress")
        if self.asr is not None and re.fullmatch(r"tcp://[^:/]+:\d+", self.asr) is None:
            raise ConfigError(f"server.asr: {self.asr!r} is not tcp://HOST:PORT")
        if self.ha_url is not None and re.fullmatch(r"https?://[^/\s]+(/\S*)?", self.ha_url) is None:
            raise ConfigError(f"server.ha_url: {self.ha_url!r} is not an http:// or https:// URL")


def http_address(value: str) -> tuple[str, int]:
    """(host, port) of server.http's HOST:PORT (an IPv6 host in brackets)."""
    match = re.fullmatch(r"([^:/\[\]]+|\[[0-9A-Fa-f:.]+\]):(\d+)", value)
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ConfigError(f"server.http: {value!r} is not HOST:PORT (port 1-65535)")
    return match.group(1).strip("[]"), int(match.group(2))


def _loopback(host: str) -> bool:
    return host == "localhost" or host == "::1" or host.startswith("127.")


@dataclass(frozen=True)
class VoiceConfig:
    """An extra voice: a designed one (instruct, VoiceDesign), a preset speaker with its own
    name, language or style (speaker [+ instruct on 1.7B], CustomVoice), or a clone (ref_audio,
    Base). Whether the model can serve it is the voice catalogue's decision."""

    name: str
    description: str | None = None
    language: str | None = None
    speaker: str | None = None
    instruct: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only: bool = False
    model: int | str | None = None  # several models: which serves it (index in models:, or its source)

    def validate(self, where: str) -> None:
        for name in ("name", "description", "language", "speaker", "instruct", "ref_audio", "ref_text"):
            if getattr(self, name) is not None:
                _non_empty(f"{where}.{name}", getattr(self, name))
        if self.name != self.name.strip():
            raise ConfigError(f"{where}.name: {self.name!r} has leading or trailing whitespace")
        if self.ref_audio is not None:
            if self.speaker is not None or self.instruct is not None:
                raise ConfigError(f"{where}: a clone voice (ref_audio) takes no speaker or instruct")
            if self.ref_text is None and not self.x_vector_only:
                raise ConfigError(f"{where}: a clone voice needs ref_text (the reference's transcript), "
                                  f"or x_vector_only: true")
        elif self.ref_text is not None or self.x_vector_only:
            raise ConfigError(f"{where}: ref_text and x_vector_only apply only to a clone voice (ref_audio)")
        elif self.speaker is None and self.instruct is None:
            raise ConfigError(f"{where}: give instruct (a designed voice), speaker (a preset speaker) "
                              f"or ref_audio (a clone)")


@dataclass(frozen=True)
class ServerConfig:
    """The whole config.yaml."""

    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    devices: DevicesConfig = field(default_factory=DevicesConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    server: ServerSettings = field(default_factory=ServerSettings)
    voices: tuple[VoiceConfig, ...] = ()
    models: tuple[ModelEntry, ...] = ()  # several models served together; empty: model.source alone

    @property
    def model_entries(self) -> tuple[ModelEntry, ...]:
        """Every model served, in order (one: model.source), each with its weight format."""
        entries = self.models or (ModelEntry(self.model.source),)
        return tuple(dataclasses.replace(m, weights=m.weights or self.model.weights) for m in entries)

    def model_index(self, voice: int) -> int | None:
        """The model `voices[voice]` names (its index in model_entries), None if it names none;
        ConfigError for a model not served."""
        ref, where = self.voices[voice].model, f"voices[{voice}].model"
        entries = self.model_entries
        if ref is None:
            return None
        if isinstance(ref, int):
            if not 0 <= ref < len(entries):
                raise ConfigError(f"{where}: {ref} is not a model index (models: 0-{len(entries) - 1})")
            return ref
        matches = [i for i, m in enumerate(entries) if m.source == ref]
        if not matches:
            raise ConfigError(f"{where}: {ref!r} is not the source of a served model "
                              f"(models: {', '.join(m.source for m in entries)})")
        return matches[0]

    def validate(self) -> None:
        self.model.validate()
        for i, entry in enumerate(self.models):
            entry.validate(f"models[{i}]")
        try:
            self.engine.validate()
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.devices.validate()
        self.precision.validate()
        self.server.validate()
        seen: dict[str, int] = {}
        for i, voice in enumerate(self.voices):
            voice.validate(f"voices[{i}]")
            key = voice.name.casefold()
            if key in seen:
                raise ConfigError(f"voices[{i}].name: {voice.name!r} is already the name of voices[{seen[key]}]")
            seen[key] = i
            self.model_index(i)


def load_config(path: str | Path | None = None) -> ServerConfig:
    """The validated configuration in `path`; None: the defaults. Relative ref_audio paths are
    taken relative to the file's directory."""
    if path is None:
        config = ServerConfig()
        config.validate()
        return config
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: plain data only
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from None
    try:
        config = _build(ServerConfig, data, "")
        config.validate()
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    voices = tuple(dataclasses.replace(v, ref_audio=str(path.parent / Path(v.ref_audio).expanduser()))
                   if v.ref_audio is not None else v for v in config.voices)
    return dataclasses.replace(config, voices=voices)


# Command-line flag → the settings it overrides.
_FLAGS: dict[str, tuple[tuple[str, str], ...]] = {
    "model": (("model", "source"),),  # a list: one replaces the models, several become models:
    "data_dir": (("model", "data_dir"),),
    "weights": (("model", "weights"),),
    "codec_weights": (("model", "codec_weights"),),
    "device": (("devices", "talker"), ("devices", "subcode"), ("devices", "decoder")),
    "talker_device": (("devices", "talker"),),
    "subcode_device": (("devices", "subcode"),),
    "decoder_device": (("devices", "decoder"),),
    "threads": (("devices", "threads"),),
    "precision": (("precision", "inference"),),
    "kv_precision": (("precision", "kv_cache"),),
    "max_batch": (("engine", "max_batch"),),
    "backend": (("engine", "backend"),),
    "kernels": (("engine", "kernels"),),
    "first_chunk": (("engine", "first_chunk"),),
    "steady_chunk": (("engine", "steady_chunk"),),
    "text_layout": (("engine", "text_layout"),),
    "codec_lead": (("engine", "codec_lead"),),
    "uri": (("server", "uri"),),
    "zeroconf": (("server", "zeroconf"),),
    "samples_per_chunk": (("server", "samples_per_chunk"),),
    "greedy": (("server", "greedy"),),
    "seed": (("server", "seed"),),
    "voice": (("server", "default_voice"),),
    "profile": (("server", "profile"),),
    "text_feeding": (("server", "text_feeding"),),
    "normalize_text": (("server", "normalize_text"),),
    "holdback": (("server", "holdback_s"),),
    "http": (("server", "http"),),
    "http_token": (("server", "http_token"),),
    "http_ingress": (("server", "http_ingress"),),
    "asr": (("server", "asr"),),
    "ha_url": (("server", "ha_url"),),
}


OVERRIDES = tuple(_FLAGS)  # the flags apply_overrides takes


def apply_overrides(config: ServerConfig, **flags: Any) -> ServerConfig:
    """`config` with command-line values applied and validated again; a None value keeps the
    configured one (so boolean flags need `default=None`, not False). `device` sets all three
    devices; a per-graph device flag given with it wins for that graph."""
    sources = flags.pop("model", None)
    if isinstance(sources, (list, tuple)) and sources:
        if len(sources) == 1:
            config = dataclasses.replace(config, models=(), model=dataclasses.replace(config.model,
                                                                                       source=sources[0]))
        else:
            config = dataclasses.replace(config, models=tuple(ModelEntry(s) for s in sources))
    elif sources is not None:
        flags["model"] = sources
    changes: dict[str, dict[str, Any]] = {}
    ordered = sorted(flags.items(), key=lambda item: item[0] != "device")  # "device" first
    for flag, value in ordered:
        if flag not in _FLAGS:
            raise TypeError(f"apply_overrides() got an unknown flag {flag!r} (known: {', '.join(_FLAGS)})")
        if value is None:
            continue
        for section, name in _FLAGS[flag]:
            hint = typing.get_type_hints(type(getattr(config, section)))[name]
            changes.setdefault(section, {})[name] = _typed(hint, value, f"{section}.{name}")
    config = dataclasses.replace(config, **{section: dataclasses.replace(getattr(config, section), **values)
                                            for section, values in changes.items()})
    config.validate()
    return config


# --- typed construction ----------------------------------------------------------------------


def _build(cls: type, data: Any, path: str) -> Any:
    """An instance of dataclass `cls` from a YAML mapping; None means all defaults."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or 'the top level'}: expected a mapping of settings, got {_shown(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields and cls is EngineConfig and key in RETIRED:
            raise ConfigError(retired(str(key)))
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            raise ConfigError(f"{where}: unknown key" + (f" (did you mean {close[0]}?)" if close else ""))
        values[key] = _typed(hints[key], value, where)
    for name, f in fields.items():
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{path}.{name}: required" if path else f"{name}: required")
    return cls(**values)


def _typed(hint: Any, value: Any, where: str) -> Any:
    """`value` checked against type `hint` (str, int, float, bool, X | None, tuple[X, ...], a dataclass)."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None and len(options) < len(typing.get_args(hint)):
            return None
        if any(o not in _TYPE_NAMES for o in options[1:]):
            raise TypeError(f"unsupported setting type {hint}")
        for option in options[:-1]:  # plain types: the first that takes the value (int | str)
            try:
                return _typed(option, value, where)
            except ConfigError:
                continue
        try:
            return _typed(options[-1], value, where)
        except ConfigError:
            if len(options) == 1:
                raise
            raise ConfigError(f"{where}: expected {' or '.join(_TYPE_NAMES[o] for o in options)}, "
                              f"got {_shown(value)}") from None
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"unsupported setting type {hint}")
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {_shown(value)}")
        return tuple(_typed(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is str and isinstance(value, str):
        return value
    if hint not in _TYPE_NAMES:
        raise TypeError(f"unsupported setting type {hint}")
    raise ConfigError(f"{where}: expected {_TYPE_NAMES[hint]}, got {_shown(value)}")


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _shown(value: Any) -> str:
    if value is None:
        return "null (not set)"
    return f"{type(value).__name__} {value!r}"


def _non_empty(where: str, value: str) -> None:
    if not value.strip():
        raise ConfigError(f"{where}: must not be empty")


def _one_of(where: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(allowed)}")


def _check_uri(uri: str) -> None:
    if uri == "stdio://" or (uri.startswith("unix://") and len(uri) > len("unix://")):
        return
    match = re.fullmatch(r"tcp://([^:/]+|\[[0-9A-Fa-f:.]+\]):(\d+)", uri)
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ConfigError(f"server.uri: {uri!r} is not tcp://HOST:PORT (port 1-65535), unix://PATH or stdio://")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last silently)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable: construct_mapping reports it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
