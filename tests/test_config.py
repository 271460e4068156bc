"""config.yaml loading, validation and command-line overrides (wyoming_qwen3tts/config.py)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from wyoming_qwen3tts.config import (
    ConfigError,
    DevicesConfig,
    ModelConfig,
    ModelEntry,
    ServerConfig,
    VoiceConfig,
    apply_overrides,
    load_config,
)
from wyoming_qwen3tts.engine.config import EngineConfig

CONFIG_YAML = Path(__file__).resolve().parents[1] / "config.yaml"
SECTIONS = [f.name for f in dataclasses.fields(ServerConfig) if f.name not in ("voices", "models")]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    return str(err.value)


# --- the documented file ---------------------------------------------------------------------


def test_documented_file_is_exactly_the_defaults():
    assert load_config(CONFIG_YAML) == ServerConfig() == load_config(None)


def test_documented_file_lists_every_setting():
    raw = yaml.safe_load(CONFIG_YAML.read_text(encoding="utf-8"))
    assert set(raw) == {f.name for f in dataclasses.fields(ServerConfig)}
    for section in SECTIONS:
        cls = type(getattr(ServerConfig(), section))
        assert list(raw[section]) == [f.name for f in dataclasses.fields(cls)], section
    assert raw["voices"] == [] and raw["models"] == []
    text = CONFIG_YAML.read_text(encoding="utf-8")
    comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    for f in (*dataclasses.fields(VoiceConfig), *dataclasses.fields(ModelEntry)):  # lists: commented examples
        assert re.search(rf"#\s+(- )?{f.name}:", comments), f.name


def test_documented_file_comments_every_section_key():
    """Each setting line is preceded (directly or through its group) by a comment."""
    lines = CONFIG_YAML.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if re.match(r"  \w+:", line):
            above = lines[i - 1].strip()
            assert above.startswith("#") or re.match(r"\w+:", above), line


def test_weight_formats_match_the_converter():
    from wyoming_qwen3tts.config import WEIGHT_FORMATS
    from wyoming_qwen3tts.convert.ops import WEIGHT_FORMATS as CONVERTER_FORMATS
    assert WEIGHT_FORMATS == CONVERTER_FORMATS


def test_codec_formats_match_the_converter():
    from wyoming_qwen3tts.config import CODEC_FORMATS
    from wyoming_qwen3tts.convert.pipeline import CODEC_FORMATS as CONVERTER_FORMATS
    assert CODEC_FORMATS == CONVERTER_FORMATS
    with pytest.raises(ConfigError, match="model.codec_weights"):
        ServerConfig(model=ModelConfig(codec_weights="int4")).validate()


# --- loading -------------------------------------------------------------------------------


def test_partial_file_overrides_only_what_it_names(tmp_path):
    config = load_config(write(tmp_path, """
engine:
  max_batch: 4
  frames_per_token: 5       # an integer where a float is expected is fine
devices:
  decoder: GPU.1
  threads: 2
precision: {inference: bf16, kv_cache: f16}
server:
  zeroconf: qwen
  seed: 7
  greedy: true
"""))
    assert config.engine == dataclasses.replace(EngineConfig(), max_batch=4, frames_per_token=5.0)
    assert isinstance(config.engine.frames_per_token, float)
    assert config.devices == DevicesConfig(decoder="GPU.1", threads=2)
    assert (config.precision.inference, config.precision.kv_cache) == ("bf16", "f16")
    assert (config.server.zeroconf, config.server.seed, config.server.greedy) == ("qwen", 7, True)
    assert config.model == ServerConfig().model and config.voices == ()


@pytest.mark.parametrize("text", ["", "# only a comment\n", "engine:\n", "voices: null\n"])
def test_empty_file_or_sections_give_defaults(tmp_path, text):
    assert load_config(write(tmp_path, text)) == ServerConfig()


@pytest.mark.parametrize("text,message", [
    ("engine:\n  max_batchh: 4\n", "engine.max_batchh: unknown key (did you mean max_batch?)"),
    ("enigne:\n  max_batch: 4\n", "enigne: unknown key (did you mean engine?)"),
    ("server:\n  port: 10200\n", "server.port: unknown key"),
    ("voices:\n  - name: a\n    instructt: x\n", "voices[0].instructt: unknown key (did you mean instruct?)"),
    ("devices:\n  talker: TPU\n", "devices.talker: 'TPU' is not one of CPU, GPU, NPU, AUTO"),
    ("devices:\n  subcode: cpu\n", "devices.subcode: 'cpu' is not one of"),
    ("devices:\n  threads: 0\n", "devices.threads: must be >= 1, got 0"),
    ("precision:\n  inference: f64\n", "precision.inference: 'f64' is not one of auto, f32, bf16, f16"),
    ("precision:\n  kv_cache: i4\n", "precision.kv_cache: 'i4' is not one of u8, f16, f32"),
    ("model:\n  weights: int2\n", "model.weights: 'int2' is not one of auto, int8, int4, mixed, fp16, fp32"),
    ("model:\n  source: ''\n", "model.source: must not be empty"),
    ("engine:\n  max_batch: '8'\n", "engine.max_batch: expected an integer, got str '8'"),
    ("engine:\n  max_batch: true\n", "engine.max_batch: expected an integer, got bool True"),
    ("engine:\n  max_batch: 2.5\n", "engine.max_batch: expected an integer, got float 2.5"),
    ("engine:\n  max_batch: null\n", "engine.max_batch: expected an integer, got null"),
    ("engine:\n  frames_per_token: fast\n", "engine.frames_per_token: expected a number, got str 'fast'"),
    ("engine:\n  max_batch: 0\n", "engine.max_batch must be >= 1, got 0"),
    ("engine:\n  request_timeout: -1\n", "engine.request_timeout must be >= 0"),
    ("engine: 5\n", "engine: expected a mapping of settings, got int 5"),
    ("server:\n  greedy: 'yes'\n", "server.greedy: expected true or false, got str 'yes'"),
    ("server:\n  seed: 1.5\n", "server.seed: expected an integer, got float 1.5"),
    ("server:\n  seed: -1\n", "server.seed: must be >= 0"),
    ("server:\n  zeroconf: 12\n", "server.zeroconf: expected a string, got int 12"),
    ("server:\n  zeroconf: ' '\n", "server.zeroconf: must not be empty"),
    ("server:\n  samples_per_chunk: 0\n", "server.samples_per_chunk: must be >= 1"),
    ("server:\n  max_sentence_chars: 0\n", "server.max_sentence_chars: must be >= 1"),
    ("server:\n  uri: http://localhost:10200\n", "server.uri: 'http://localhost:10200' is not tcp://HOST:PORT"),
    ("server:\n  uri: tcp://localhost\n", "server.uri"),
    ("server:\n  uri: tcp://0.0.0.0:70000\n", "server.uri"),
    ("server:\n  uri: 'unix://'\n", "server.uri"),
    ("voices: {name: a}\n", "voices: expected a list, got dict"),
    ("voices:\n  - instruct: x\n", "voices[0].name: required"),
    ("voices:\n  - name: a\n", "voices[0]: give instruct (a designed voice), speaker"),
    ("voices:\n  - name: ' a'\n    instruct: x\n", "voices[0].name: ' a' has leading or trailing whitespace"),
    ("voices:\n  - {name: a, instruct: x, ref_audio: a.wav, ref_text: hi}\n", "takes no speaker or instruct"),
    ("voices:\n  - {name: a, ref_audio: a.wav}\n", "voices[0]: a clone voice needs ref_text"),
    ("voices:\n  - {name: a, instruct: x, ref_text: hi}\n", "voices[0]: ref_text and x_vector_only apply only"),
    ("voices:\n  - {name: a, instruct: x, x_vector_only: true}\n", "voices[0]: ref_text and x_vector_only apply"),
    ("voices:\n  - {name: a, instruct: x, language: ''}\n", "voices[0].language: must not be empty"),
    ("voices:\n  - {name: Nova, instruct: x}\n  - {name: nova, instruct: y}\n",
     "voices[1].name: 'nova' is already the name of voices[0]"),
    ("- engine\n", "the top level: expected a mapping of settings, got list"),
    ("engine:\n  max_batch: 4\n  max_batch: 5\n", "duplicate key 'max_batch'"),
    ("engine: [unclosed\n", "is not valid YAML"),
])
def test_bad_settings_are_named(tmp_path, text, message):
    error = error_of(tmp_path, text)
    assert message in error
    assert str(tmp_path / "config.yaml") in error  # which file, too


@pytest.mark.parametrize("uri", ["tcp://0.0.0.0:10200", "tcp://[::1]:10200", "tcp://my-host.local:1",
                                 "unix:///run/qwen.sock", "stdio://"])
def test_good_uris(tmp_path, uri):
    assert load_config(write(tmp_path, f"server:\n  uri: '{uri}'\n")).server.uri == uri


def test_voices_load_and_clone_paths_resolve_against_the_file(tmp_path):
    config = load_config(write(tmp_path, """
voices:
  - name: narrator
    description: Narrator
    language: en
    instruct: A calm voice.
  - name: ryan-de
    speaker: ryan
    language: de
  - {name: anna, ref_audio: voices/anna.wav, ref_text: Hello.}
  - {name: bob, ref_audio: /abs/bob.wav, x_vector_only: true}
"""))
    narrator, ryan, anna, bob = config.voices
    assert narrator == VoiceConfig(name="narrator", description="Narrator", language="en", instruct="A calm voice.")
    assert (ryan.speaker, ryan.language, ryan.instruct) == ("ryan", "de", None)
    assert anna.ref_audio == str(tmp_path / "voices" / "anna.wav") and anna.ref_text == "Hello."
    assert bob.ref_audio == "/abs/bob.wav" and bob.x_vector_only


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path)  # a directory
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "bin.yaml")


def test_data_path_expands_home():
    assert load_config(None).model.data_path == Path("~/.cache/wyoming-qwen3tts").expanduser()
    assert "~" not in str(load_config(None).model.data_path)


# --- command-line overrides -------------------------------------------------------------------


def test_none_keeps_configured_values():
    config = dataclasses.replace(ServerConfig(), server=dataclasses.replace(ServerConfig().server, greedy=True))
    assert apply_overrides(config, greedy=None, seed=None, device=None, uri=None) == config
    assert apply_overrides(config) == config


def test_overrides_reach_their_settings():
    base = ServerConfig()
    config = apply_overrides(base, model="/models/qwen", data_dir="/data", weights="fp16", device="GPU",
                             precision="bf16", kv_precision="f16", max_batch=2, first_chunk=2, steady_chunk=24,
                             uri="tcp://127.0.0.1:10201", zeroconf="qwen3tts", samples_per_chunk=512, greedy=True,
                             seed=3, voice="ryan", threads=1)
    assert (config.model.source, config.model.data_dir, config.model.weights) == ("/models/qwen", "/data", "fp16")
    assert config.devices == DevicesConfig("GPU", "GPU", "GPU", threads=1)
    assert (config.precision.inference, config.precision.kv_cache) == ("bf16", "f16")
    assert (config.engine.max_batch, config.engine.first_chunk, config.engine.steady_chunk) == (2, 2, 24)
    assert config.engine.max_queue == base.engine.max_queue
    server = config.server
    assert (server.uri, server.zeroconf, server.samples_per_chunk, server.greedy, server.seed, server.default_voice) \
        == ("tcp://127.0.0.1:10201", "qwen3tts", 512, True, 3, "ryan")
    assert base == ServerConfig()  # the input is untouched


def test_precision_is_auto_unless_pinned(tmp_path):
    assert ServerConfig().precision.inference == "auto"
    assert apply_overrides(ServerConfig(), precision="f32").precision.inference == "f32"
    assert load_config(write(tmp_path, "precision:\n  inference: auto\n")) == ServerConfig()


def test_per_graph_device_beats_device_whatever_the_order():
    for flags in ({"decoder_device": "NPU", "device": "GPU"}, {"device": "GPU", "decoder_device": "NPU"}):
        assert apply_overrides(ServerConfig(), **flags).devices == DevicesConfig("GPU", "GPU", "NPU")
    assert apply_overrides(ServerConfig(), talker_device="GPU.0").devices == DevicesConfig(talker="GPU.0")


def test_bad_overrides_are_refused():
    with pytest.raises(ConfigError, match="devices.talker: 'TPU' is not one of"):
        apply_overrides(ServerConfig(), device="TPU")
    with pytest.raises(ConfigError, match="engine.steady_chunk: expected an integer, got str '8'"):
        apply_overrides(ServerConfig(), steady_chunk="8")
    with pytest.raises(ConfigError, match="engine.first_chunk must be >= 1"):
        apply_overrides(ServerConfig(), first_chunk=0)
    with pytest.raises(TypeError, match="unknown flag 'devices'"):
        apply_overrides(ServerConfig(), devices="CPU")
