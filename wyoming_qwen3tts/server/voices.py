"""The voice catalogue: the model's preset speakers plus the voices of config.yaml.

It answers two questions: what to advertise in Wyoming `Info` (Home Assistant shows a voice's
description as its name and lists voices per BCP-47 language, so every voice advertises all
the model's languages with its native one first), and which voice and model language a
request means. Home Assistant sends only a voice name, never a language, so a request's
language falls back to the voice's configured default and then to "auto": the model reads the
language from the text, and a dialect speaker speaks its dialect.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from wyoming.info import Attribution, Info, TtsProgram, TtsVoice

from ..clone.cloner import CloneError, ClonePrompt
from ..config import VoiceConfig
from ..model.prompt import VoiceRequest
from ..model.spec import Speaker, VoiceSpec

log = logging.getLogger(__name__)

PROGRAM_NAME = "qwen3tts"
ATTRIBUTION = Attribution(name="Qwen Team, Alibaba Cloud", url="https://github.com/QwenLM/Qwen3-TTS")

# The model's language names → BCP-47, in the order the official README lists them.
LANGUAGE_TAGS: dict[str, str] = {
    "chinese": "zh", "english": "en", "japanese": "ja", "korean": "ko", "german": "de",
    "french": "fr", "russian": "ru", "portuguese": "pt", "spanish": "es", "italian": "it",
}
_NAME_OF_TAG = {tag: name for name, tag in LANGUAGE_TAGS.items()}

# Preset CustomVoice speakers: native language and a short description, from the official
# README's speaker table (docs/MODEL.md §1.3 lists the native languages).
# Dialect speakers (eric, dylan) are Chinese; their dialect comes from the model's spec.
_PRESETS: dict[str, tuple[str, str]] = {
    "vivian": ("chinese", "bright young female"),
    "serena": ("chinese", "warm, gentle young female"),
    "uncle_fu": ("chinese", "seasoned male, low and mellow"),
    "dylan": ("chinese", "youthful male"),
    "eric": ("chinese", "lively male"),
    "ryan": ("english", "dynamic male"),
    "aiden": ("english", "sunny American male"),
    "ono_anna": ("japanese", "playful female"),
    "sohee": ("korean", "warm female"),
}
_MODEL_TYPES = {"custom_voice": "CustomVoice", "voice_design": "VoiceDesign", "base": "Base"}


class VoiceNotFound(ValueError):
    """A request names a voice the catalogue does not have."""

    code = "VoiceNotFound"


class LanguageNotSupported(ValueError):
    """A request or a configured voice names a language the model cannot speak."""

    code = "LanguageNotSupported"


class CatalogueError(ValueError):
    """No voice can be served, or server.default_voice names none of them."""


@dataclass(frozen=True)
class VoiceEntry:
    """One advertised voice and what it asks of the model."""

    name: str
    description: str
    languages: tuple[str, ...]  # BCP-47, native language first
    default_language: str  # a model language name, or "auto"
    speaker: str | None = None  # preset speaker (CustomVoice)
    instruct: str | None = None  # voice description (VoiceDesign) or style (1.7B CustomVoice)
    clone: ClonePrompt | None = None  # voice clone (Base): from a reference recording

    def styled(self, instructions: str | None) -> VoiceEntry:
        """This voice with a request's instructions after its own instruct (OpenAI's
        `instructions`): the voice stays itself, the request adds a style."""
        if not instructions:
            return self
        return replace(self, instruct=f"{self.instruct} {instructions}" if self.instruct else instructions)

    def request(self, text: str, language: str) -> VoiceRequest:
        """What the engine is asked to say in this voice."""
        if self.clone is not None:
            return self.clone.request(text, language)
        return VoiceRequest(text, language, self.speaker, self.instruct)


def model_language(language: str, supported: Iterable[str]) -> str:
    """The model's name for `language`: "en", "en-US", "en_us", "English" → "english"; "auto" stays."""
    supported = tuple(supported)
    key = language.strip().lower().replace("_", "-")
    if key == "auto" or key in supported:
        return key
    name = _NAME_OF_TAG.get(key.split("-", 1)[0])
    if name in supported:
        return name
    known = [LANGUAGE_TAGS[n] for n in supported if n in LANGUAGE_TAGS] + ["auto", *supported]
    raise LanguageNotSupported(f"language {language!r} is not supported by this model (use one of: {', '.join(known)})")


def _native_language(speaker: Speaker) -> str | None:
    """The model language a preset speaker speaks natively; every Qwen3-TTS dialect is Chinese."""
    return "chinese" if speaker.dialect else _PRESETS.get(speaker.name, (None, ""))[0]


def styles_speakers(spec: VoiceSpec) -> bool:
    """Whether the model speaks its preset speakers in a style (an instruct): 1.7B CustomVoice
    models do, 0.6B ones ignore it (docs/MODEL.md)."""
    return spec.model_type == "custom_voice" and spec.model_size != "0b6"


def model_label(spec: VoiceSpec) -> str:
    """A display name such as "Qwen3-TTS 0.6B CustomVoice" (the spec says "0b6", "custom_voice")."""
    size = spec.model_size.replace("b", ".").upper() + "B" if "b" in spec.model_size else spec.model_size
    return f"Qwen3-TTS {size} {_MODEL_TYPES.get(spec.model_type, spec.model_type)}"


class Catalogue:
    """Every voice one model can serve, in a fixed order: preset speakers by name, then the
    configured voices in config order.

    A configured voice the model cannot serve (a clone voice on a non-Base model, a designed
    voice on a CustomVoice model, an unknown speaker or language, a name clash) is skipped,
    logged and listed in `errors`, so one stale entry does not take the server down; having
    no voice at all, or a default voice that is not in the catalogue, raises CatalogueError.

    A preview catalogue (`preview=True`) is the voice list known from the model's config.json
    alone, before the model is loaded: clone voices are listed without encoding their
    recordings (a missing recording is skipped), and skipped voices are logged only at debug
    level (the catalogue of the loaded model logs them). It advertises voices, serves none.
    """

    def __init__(self, spec: VoiceSpec, voices: Sequence[VoiceConfig] = (), default_voice: str | None = None,
                 clone: Callable[[VoiceConfig], ClonePrompt] | None = None, preview: bool = False,
                 renames: Mapping[str, str] | None = None, may_be_empty: bool = False) -> None:
        """clone: prepares a clone voice (ref_audio) from its recording, raising CloneError.
        renames: preset speakers served under another name (another model has theirs).
        may_be_empty: one of several models, which may serve no voice yet (a Base model
        whose clones are still to be saved)."""
        self.label = model_label(spec)
        self._renames = dict(renames or {})
        self.preview = preview
        self._spec = spec
        self._languages = tuple(n for n in spec.supported_languages if n != "auto")
        untagged = [n for n in self._languages if n not in LANGUAGE_TAGS]
        if untagged and not preview:
            log.warning("model languages without a BCP-47 tag are not advertised (requests may name them): %s",
                        ", ".join(untagged))
        if len(untagged) == len(self._languages):
            raise CatalogueError(f"{self.label} lists no language with a known BCP-47 tag")
        entries = [self._speaker_entry(s) for s in sorted(spec.speakers, key=lambda s: s.name)]
        errors: list[str] = []
        for voice in voices:
            try:
                entry = self._config_entry(voice, clone)
                if entry.name.casefold() in {e.name.casefold() for e in entries}:
                    raise CatalogueError(f"voice {voice.name!r}: the name is taken by another voice")
                entries.append(entry)
            except CatalogueError as e:
                log.log(logging.DEBUG if preview else logging.ERROR, "%s; the voice is skipped", e)
                errors.append(str(e))
        if not entries and not may_be_empty:
            reason = "; ".join(errors) or "the model has no preset speakers and config.yaml defines no voices"
            raise CatalogueError(f"no voice can be served by {self.label}: {reason}")
        self.voices: tuple[VoiceEntry, ...] = tuple(entries)
        self.errors: tuple[str, ...] = tuple(errors)
        self._by_name = {e.name.casefold(): e for e in entries}
        self.default = self.voices[0] if entries else None
        if default_voice is not None:
            if default_voice.casefold() not in self._by_name:
                raise CatalogueError(f"server.default_voice {default_voice!r} is not a voice of {self.label} "
                                     f"(voices: {', '.join(e.name for e in self.voices)})")
            self.default = self._by_name[default_voice.casefold()]

    @property
    def spec(self) -> VoiceSpec:
        return self._spec

    @property
    def tags(self) -> tuple[str, ...]:
        """BCP-47 tags of the model's languages."""
        return self._tags(None)

    def resolve(self, name: str | None, language: str | None = None) -> tuple[VoiceEntry, str]:
        """(voice, model language) for a request: no name → the default voice; the language is
        the request's if given, else the voice's configured default, else "auto"."""
        entry = self.default if not name else self._by_name.get(name.casefold())
        if entry is None and not name:
            raise VoiceNotFound(f"{self.label} has no voice yet")
        if entry is None:
            raise VoiceNotFound(f"unknown voice {name!r} (voices: {', '.join(e.name for e in self.voices)})")
        return entry, self.language(entry, language)

    def language(self, entry: VoiceEntry, language: str | None) -> str:
        """The model language of a request in `entry`'s voice: the request's, else the voice's default."""
        return model_language(language, self._languages) if language else entry.default_language

    def _tags(self, native: str | None) -> tuple[str, ...]:
        """BCP-47 tags of the model's languages, `native` first."""
        names = [n for n in LANGUAGE_TAGS if n in self._languages]
        if native in names:
            names.remove(native)
            names.insert(0, native)
        return tuple(LANGUAGE_TAGS[n] for n in names)

    def _speaker_entry(self, speaker: Speaker) -> VoiceEntry:
        native = _native_language(speaker)
        label: str | None
        if speaker.dialect:
            label = f"{speaker.dialect.removesuffix('_dialect').replace('_', ' ').title()} Chinese"
        else:
            label = native.title() if native else None
        details = ", ".join(part for part in (label, _PRESETS.get(speaker.name, ("", ""))[1]) if part)
        title = speaker.name.replace("_", " ").title()
        name = self._renames.get(speaker.name, speaker.name)
        if name != speaker.name:
            details = f"{details}; {self.label}" if details else self.label
        return VoiceEntry(name=name, description=f"{title} ({details})" if details else title,
                          languages=self._tags(native), default_language="auto", speaker=speaker.name)

    def _config_entry(self, voice: VoiceConfig, clone: Callable[[VoiceConfig], ClonePrompt] | None) -> VoiceEntry:
        where, kind = f"voice {voice.name!r}", self._spec.model_type
        speaker, native, prompt = None, None, None
        if voice.ref_audio is not None:
            if kind != "base":
                raise CatalogueError(f"{where} clones a voice (ref_audio), which needs a Base model; "
                                     f"the model is {self.label}")
            if self.preview and not Path(voice.ref_audio).is_file():
                raise CatalogueError(f"{where}: recording {voice.ref_audio} not found")
            if clone is None and not self.preview:
                raise CatalogueError(f"{where} clones a voice, but no model is loaded to clone it with")
        elif voice.speaker is not None:
            if kind != "custom_voice":
                raise CatalogueError(f"{where} uses preset speaker {voice.speaker!r}, but {self.label} "
                                     f"has no preset speakers")
            try:
                speaker = self._spec.speaker(voice.speaker)
            except KeyError as e:
                raise CatalogueError(f"{where}: {e.args[0]}") from None
            if voice.instruct and not styles_speakers(self._spec):
                raise CatalogueError(f"{where}: 0.6B CustomVoice models ignore instruct "
                                     f"(use a 1.7B CustomVoice model, or drop instruct)")
            native = _native_language(speaker)
        elif kind != "voice_design":
            raise CatalogueError(f"{where} is a designed voice (instruct without speaker), which needs a "
                                 f"VoiceDesign model; the model is {self.label}")
        default_language = "auto"
        if voice.language is not None:
            try:
                default_language = model_language(voice.language, self._languages)
            except LanguageNotSupported as e:
                raise CatalogueError(f"{where}: {e}") from None
        if default_language != "auto":
            native = default_language
        if voice.ref_audio is not None and clone is not None:  # last: the costly step
            try:
                prompt = clone(voice)
            except CloneError as e:
                raise CatalogueError(str(e)) from None
            except Exception as e:
                log.exception("%s: cloning failed", where)
                raise CatalogueError(f"{where}: cloning failed ({type(e).__name__}: {e})") from None
        return VoiceEntry(name=voice.name, description=voice.description or voice.name,
                          languages=self._tags(native), default_language=default_language,
                          speaker=speaker.name if speaker else None, instruct=voice.instruct, clone=prompt)

    @property
    def takes_instructions(self) -> bool:
        """Whether a request may add instructions (a style): 1.7B CustomVoice and VoiceDesign
        models read an instruct; 0.6B CustomVoice ignores it, Base has none (docs/MODEL.md)."""
        return self._spec.model_type == "voice_design" or styles_speakers(self._spec)


class VoiceList(Protocol):
    """A catalogue, or the directory of several models' catalogues."""

    label: str
    voices: tuple[VoiceEntry, ...]


def build_info(catalogue: VoiceList, version: str) -> Info:
    """Wyoming `Info`: one installed TTS program with every voice, identical on every call and
    the same for a preview catalogue as for the loaded model's (unless a clone voice fails to
    encode). Home Assistant builds its entity from the first `info` it gets, so a program
    without voices is never published."""
    voices = [TtsVoice(name=e.name, attribution=ATTRIBUTION, installed=True, description=e.description,
                       version=None, languages=list(e.languages), speakers=None) for e in catalogue.voices]
    description = f"{catalogue.label} on OpenVINO"
    program = TtsProgram(name=PROGRAM_NAME, attribution=ATTRIBUTION, installed=True, description=description,
                         version=version, voices=voices, supports_synthesize_streaming=True)
    return Info(tts=[program])
