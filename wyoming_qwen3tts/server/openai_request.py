"""A `POST /v1/audio/speech` body, checked field by field as OpenAI's API does (docs/OPENAI.md):
what is wrong is named in OpenAI's error shape, with the field in `param`, before anything
reaches the engine."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from .audio_encoding import FORMATS, AudioFormat
from .voices import Catalogue, VoiceEntry

DEFAULT_FORMAT = "mp3"  # OpenAI's default
STREAM_FORMATS = ("audio", "sse")
MAX_INSTRUCTIONS_CHARS = 2000  # a style or a voice description: a few sentences
# OpenAI's model names, taken as the served model: scripts and clients written for OpenAI
# (Open WebUI's default is tts-1) work unchanged (docs/OPENAI.md, "Models").
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")


class OpenAIError(Exception):
    """A request OpenAI's API would refuse, as its error object: status, message, type, param, code."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class SpeechJob:
    """A checked request: what to say, in which voice, encoded how."""

    text: str
    voice: VoiceEntry
    format: AudioFormat
    sse: bool = False
    instructions: str | None = None  # added to the voice's own instruct (1.7B CustomVoice, VoiceDesign)
    model: str = ""  # as the request named it


def model_id(catalogue: Catalogue) -> str:
    """The served model's id: its label as a slug, "Qwen3-TTS 0.6B CustomVoice" ->
    "qwen3-tts-0.6b-customvoice"."""
    return re.sub(r"[^a-z0-9.]+", "-", catalogue.label.lower()).strip("-")


def known_model(name: str, catalogue: Catalogue) -> bool:
    """The served model's id (any case) or one of OpenAI's names."""
    return name.lower() in (model_id(catalogue), *OPENAI_MODELS)


def _string(body: dict[str, Any], name: str, required: bool) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise OpenAIError(400, f"Missing required parameter: '{name}'.", name, "missing_required_parameter")
        return None
    if not isinstance(value, str):
        raise OpenAIError(400, f"Invalid type for '{name}': expected a string, got {type(value).__name__}.", name,
                          "invalid_type")
    return value


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = _string(body, name, required=False)
    if value is None:
        return default
    if value not in allowed:
        listed = ", ".join(f"'{a}'" for a in allowed)
        raise OpenAIError(400, f"Invalid value: '{value}'. Supported values are: {listed}.", name, "invalid_value")
    return value


def _voice_name(body: dict[str, Any]) -> str:
    """A name, or `{"id": name}` as newer clients send a custom voice."""
    voice = body.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
        if not isinstance(voice, str):
            raise OpenAIError(400, "Invalid value for 'voice': a voice object needs an 'id' string.", "voice",
                              "invalid_type")
        return voice
    name = _string(body, "voice", required=True)
    assert name is not None
    return name


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of the request body."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OpenAIError(400, f"The request body is not valid JSON ({e}).", None, "invalid_json") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "The request body must be a JSON object.", None, "invalid_json")
    return body


def speech_job(body: dict[str, Any], catalogue: Catalogue, max_text_chars: int) -> SpeechJob:
    """Check every field, in OpenAI's order: the required ones, then the values. Unknown fields
    are ignored (clients add their own)."""
    model = _string(body, "model", required=True)
    text = _string(body, "input", required=True)
    name = _voice_name(body)
    assert model is not None and text is not None
    if not known_model(model, catalogue):
        raise OpenAIError(404, f"The model '{model}' does not exist (this server serves '{model_id(catalogue)}'; "
                          f"{', '.join(OPENAI_MODELS)} are taken as it).", "model", "model_not_found")
    if not text.strip():
        raise OpenAIError(400, "'input' is empty: there is nothing to say.", "input", "empty_string")
    if len(text) > max_text_chars:
        raise OpenAIError(400, f"'input' is {len(text)} characters long; the most this server takes is "
                          f"{max_text_chars} (server.max_text_chars).", "input", "string_above_max_length")
    try:
        voice, _ = catalogue.resolve(name)
    except ValueError:
        listed = ", ".join(f"'{v.name}'" for v in catalogue.voices)
        raise OpenAIError(400, f"Invalid value: '{name}'. Supported values are: {listed}.", "voice",
                          "invalid_value") from None
    fmt = FORMATS[_choice(body, "response_format", tuple(FORMATS), DEFAULT_FORMAT)]
    sse = _choice(body, "stream_format", STREAM_FORMATS, "audio") == "sse"
    _check_speed(body.get("speed"))
    return SpeechJob(text, voice, fmt, sse, _instructions(body, catalogue), model)


def _check_speed(speed: Any) -> None:
    """Only the model's own pace: changing it would need a time-stretch that the model's
    audio does not get from the engine (docs/OPENAI.md, "Fields")."""
    if speed is None:
        return
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed):
        raise OpenAIError(400, f"Invalid type for 'speed': expected a number, got {speed!r}.", "speed", "invalid_type")
    if speed != 1.0:
        raise OpenAIError(400, f"'speed' {speed} is not supported: this server speaks at the model's own pace; "
                          "send 1.0 or leave 'speed' out.", "speed", "unsupported_value")


def _instructions(body: dict[str, Any], catalogue: Catalogue) -> str | None:
    text = _string(body, "instructions", required=False)
    if text is None or not text.strip():
        return None
    if not catalogue.takes_instructions:
        raise OpenAIError(400, f"'instructions' are not supported by {catalogue.label}: only 1.7B CustomVoice "
                          "and VoiceDesign models take them. Leave 'instructions' out.", "instructions",
                       "unsupported_parameter")
    if len(text) > MAX_INSTRUCTIONS_CHARS:
        raise OpenAIError(400, f"'instructions' is {len(text)} characters long; the most is {MAX_INSTRUCTIONS_CHARS}.",
                          "instructions", "string_above_max_length")
    return text.strip()
